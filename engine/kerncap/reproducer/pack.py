"""One-file reproducers: `kerncap pack DIR` / `kerncap unpack FILE`.

A pack file (`.kcap`) is a magic, a version and a sequence of frames:

    b"KCAPPACK" u32le(version)
    frame := u16le(len(name)) name(utf-8) u64le(len(payload)) payload

    kcap-pack.json        the index (zstd JSON): every entry's path, type, size, XXH64, mode
    files/<path>          each file of the reproducer except capture/blobs, zstd
    blobs/<h>             each distinct chunk once, zstd (restored as <blobs_dir>/<h>.bin)

Each payload is compressed on its own, so a damaged byte costs one entry, and the
unpacker checks every entry's length and hash against the index. (A tar stream was
tried first: its 512-byte headers and padding doubled the size of small reproducers.)
Unpacking goes into `DIR.partial-<pid>`, renamed to DIR only when every entry arrived intact.

A pack can come from anyone, so unpacking (docs/capture-format.md, "Pack files"):
* makes plain files and directories only, through kerncap.core.confined.Tree (never
  through a link), with permission bits masked (no set-ID, sticky, group/world write);
* refuses, before writing anything, a pack that declares more than `Limits` allow
  (a total, and a ratio to the pack's own size above a floor), and chunks its manifest
  does not use or of other lengths than it says;
* streams every payload (decompressed, hashed and written in pieces): no entry is held
  in memory whole, whatever size it declares.
"""

from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import shutil
import stat
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Iterator

import xxhash
import zstandard as zstd

from kerncap import __version__
from kerncap.core.confined import Tree, TreeError, link_error
from kerncap.core.fsio import find_leftovers, fs_error, is_leftover_name, remove_quietly, temp_name
from kerncap.core.schema import problem
from kerncap.core.units import human_bytes
from kerncap.errors import KerncapError, UsageError
from kerncap.reproducer.format import MAX_MANIFEST_BYTES, Capture, capture_chunks
from kerncap.reproducer.schemas import PACK_INDEX
from kerncap.reproducer.store import ZSTD_LEVEL, compress, compress_in_order, max_frame_bytes

PACK_FORMAT = "kerncap-pack"
PACK_VERSION = 1
INDEX_NAME = "kcap-pack.json"
MAX_INDEX_BYTES = 256 << 20
MAX_UNPACKED_BYTES = 1 << 44
PIECE = 4 << 20            # streaming: bytes decompressed, hashed and written at a time
STREAM_FILE_BYTES = 64 << 20  # files larger than this are packed in pieces too
SUFFIX = ".kcap"
MAGIC = b"KCAPPACK"
_HEADER = struct.Struct("<8sI")
_NAME_LEN = struct.Struct("<H")
_PAYLOAD_LEN = struct.Struct("<Q")


@dataclass(frozen=True)
class Limits:
    """How much a pack may unpack to: at most `max_bytes` in all, and no more than
    `max_ratio` times the pack file's own size once past `free_bytes`. The defaults fit
    real captures (tens of GB of mostly incompressible memory pack about 1:1; zero chunks
    are not stored at all) and refuse a small file that claims gigabytes."""

    max_bytes: int = 1 << 40     # 1 TiB
    max_ratio: float = 1000.0
    free_bytes: int = 1 << 30    # below this a pack may expand as it likes

    def problem(self, declared: int, packed: int) -> str | None:
        if declared > self.max_bytes:
            return (f"it declares {human_bytes(declared)}, more than the {human_bytes(self.max_bytes)} "
                    "kerncap unpacks (--max-bytes)")
        if declared > self.free_bytes and declared > self.max_ratio * max(packed, 1):
            return (f"it declares {human_bytes(declared)} from {human_bytes(packed)} of pack "
                    f"({declared / max(packed, 1):.0f}x its size; the limit is {self.max_ratio:g}x above "
                    f"{human_bytes(self.free_bytes)}, --max-ratio)")
        return None


@dataclass
class PackResult:
    path: Path                 # the pack file, or the unpacked directory
    files: int = 0             # reproducer files (manifest, cubins, sources, …)
    blobs: int = 0             # distinct chunks
    logical: int = 0           # captured memory: sum of region sizes
    stored: int = 0            # bytes of the reproducer directory's files on disk
    packed: int = 0            # bytes of the pack file
    left_out: list[str] = field(default_factory=list)  # files not packed, and why
    notes: list[str] = field(default_factory=list)     # e.g. what an interrupted earlier run left behind

    @property
    def ratio(self) -> float:
        """How many times smaller the pack is than the directory."""
        return self.stored / self.packed if self.packed else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "files": self.files, "blobs": self.blobs, "logical": self.logical,
                "stored": self.stored, "packed": self.packed, "ratio": round(self.ratio, 2), "left_out": self.left_out,
                "notes": self.notes}


def default_pack_path(directory: Path) -> Path:
    """Next to the directory (resolved, so `kerncap pack .` does not write into it)."""
    root = directory.resolve()
    return root.parent / f"{root.name}{SUFFIX}"


def default_unpack_dir(pack: Path) -> Path:
    name = pack.name[: -len(SUFFIX)] if pack.name.endswith(SUFFIX) and len(pack.name) > len(SUFFIX) else pack.name + ".d"
    return pack.parent / name


# -- packing ------------------------------------------------------------------------------


def pack(directory: str | os.PathLike, output: str | os.PathLike | None = None, *, force: bool = False) -> PackResult:
    """Write a reproducer into one verified, zstd-compressed `.kcap` file (default: next to it)."""
    root = Path(directory)
    if not root.is_dir():
        raise KerncapError(f"{root} is not a directory", "pass a reproducer directory (what `kerncap extract` wrote)")
    if (root / "capture").is_symlink():
        raise link_error(root / "capture", "pack")
    cap = Capture.open(root)  # refuses incomplete or foreign directories
    if output is not None and str(output) == "":
        raise UsageError("the pack file name (-o) is empty", "pass -o FILE.kcap, or leave -o out for DIR.kcap")
    out = Path(output) if output is not None else default_pack_path(root)
    if out.is_dir():
        raise KerncapError(f"{out} is a directory", "pass -o with a file name, e.g. -o repro.kcap")
    if (out.exists() or out.is_symlink()) and not force:
        raise KerncapError(f"{out} already exists", "pass --force to replace it, or -o another file")
    tmp = temp_name(out)
    blobs_dir = PurePosixPath((cap.root.resolve().relative_to(root.resolve()) / "blobs").as_posix())
    chunks = dict(capture_chunks(cap))
    # A reproducer whose payloads are in the store packs them from there (read_chunk),
    # and the pack carries the chunks itself: its store marker stays behind.
    marker = cap.root / "stored.json"
    entries, left_out = _walk(root, blobs_dir, chunks, skip={out.resolve(), tmp.resolve(), marker.resolve()})
    index = {
        "format": PACK_FORMAT, "format_version": PACK_VERSION, "tool_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "source": str(root.resolve()),
        "blobs_dir": blobs_dir.as_posix(), "entries": entries,
        "blobs": [{"hash": h, "size": n} for h, n in chunks.items()],
    }
    result = PackResult(path=out, files=sum(e["type"] == "file" for e in entries), blobs=len(chunks),
                        logical=cap.logical_bytes, left_out=left_out)
    result.stored = sum(e["size"] for e in entries if e["type"] == "file")
    result.notes = [left.advice() for left in find_leftovers(out.parent, out.name)]
    try:
        with open(tmp, "wb") as f:
            f.write(_HEADER.pack(MAGIC, PACK_VERSION))
            _write_frame(f, INDEX_NAME, compress(json.dumps(index, separators=(",", ":")).encode()))
            for e in entries:  # large files first, each in pieces
                if e["type"] == "file" and e["size"] > STREAM_FILE_BYTES:
                    _write_streamed(f, root, e)
            for name, data, payload in compress_in_order(_payloads(root, entries, cap, chunks)):
                if name.startswith("blobs/"):
                    result.stored += len(data)
                _write_frame(f, name, payload)
        os.replace(tmp, out)
    except OSError as exc:
        raise fs_error(exc, f"write {out}") from None
    finally:
        remove_quietly(tmp)  # never raises over the real error (a read-only directory)
    result.packed = out.stat().st_size
    return result


def _changed(path: Path) -> KerncapError:
    return KerncapError(f"{path} changed while packing", "pack again when nothing writes to the reproducer")


def _read_pieces(path: Path) -> Iterator[bytes]:
    """A regular file's bytes in pieces (a file replaced by a FIFO meanwhile never blocks)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _changed(path) from None
        raise
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _changed(path)
        while piece := f.read(PIECE):
            yield piece


def _hash_file(path: Path) -> tuple[int, str]:
    h, n = xxhash.xxh64(), 0
    for piece in _read_pieces(path):
        h.update(piece)
        n += len(piece)
    return n, h.hexdigest()


def _payloads(root: Path, entries: list[dict], cap: Capture, chunks: dict[str, int]) -> Iterator[tuple[str, bytes]]:
    """(frame name, raw bytes) of every file not streamed, then every chunk."""
    for e in entries:
        if e["type"] == "file" and e["size"] <= STREAM_FILE_BYTES:
            data = b"".join(_read_pieces(root / e["path"]))
            if len(data) != e["size"] or xxhash.xxh64_hexdigest(data) != e["xxh64"]:
                raise _changed(root / e["path"])
            yield f"files/{e['path']}", data
    for h, n in chunks.items():
        yield f"blobs/{h}", cap.read_chunk(h, n)  # verifies length and hash: never pack a corrupt chunk


def _write_streamed(f: BinaryIO, root: Path, e: dict) -> None:
    """One file's frame, compressed in pieces; its length is written once known."""
    name = f"files/{e['path']}".encode()
    f.write(_NAME_LEN.pack(len(name)) + name)
    at = f.tell()
    f.write(_PAYLOAD_LEN.pack(0))
    h, n = xxhash.xxh64(), 0
    with zstd.ZstdCompressor(level=ZSTD_LEVEL, threads=-1).stream_writer(f, size=e["size"], closefd=False) as w:
        for piece in _read_pieces(root / e["path"]):
            h.update(piece)
            n += len(piece)
            if n > e["size"]:
                break
            w.write(piece)
    if n != e["size"] or h.hexdigest() != e["xxh64"]:
        raise _changed(root / e["path"])
    end = f.tell()
    f.seek(at)
    f.write(_PAYLOAD_LEN.pack(end - at - _PAYLOAD_LEN.size))
    f.seek(end)


def _walk(root: Path, blobs_dir: PurePosixPath, chunks: dict[str, int], skip: set[Path]) -> tuple[list[dict], list[str]]:
    """Index entries for everything under root except the chunk files of blobs_dir."""
    entries: list[dict[str, Any]] = []
    left_out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = Path(dirpath).relative_to(root)
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            rel = (rel_dir / name).as_posix()
            try:
                st = path.lstat()
            except FileNotFoundError:  # gone since it was listed: a temp file renamed, a blob moved to the store
                if name in dirnames:
                    dirnames.remove(name)
                continue
            meta = {"path": rel, "mode": stat.S_IMODE(st.st_mode), "mtime": st.st_mtime}
            if not _utf8(rel):
                left_out.append(f"{rel.encode('utf-8', 'surrogateescape').decode('utf-8', 'backslashreplace')} "
                                "(a file name that is not UTF-8 text: a pack names its files in UTF-8)")
                if stat.S_ISDIR(st.st_mode):
                    dirnames.remove(name)
            elif is_leftover_name(name):
                left_out.append(f"{rel} (a temporary file or copy of a kerncap command, running or interrupted)")
                if stat.S_ISDIR(st.st_mode):
                    dirnames.remove(name)
            elif stat.S_ISLNK(st.st_mode):
                left_out.append(f"{rel} (a symbolic link: unpack refuses links, so none are packed)")
            elif stat.S_ISDIR(st.st_mode) and PurePosixPath(rel).parent == blobs_dir:
                left_out.append(f"{rel} (a directory among the chunks: unpack refuses anything there but chunks)")
                dirnames.remove(name)
            elif stat.S_ISDIR(st.st_mode):
                entries.append({**meta, "type": "dir"})
            elif not stat.S_ISREG(st.st_mode):
                left_out.append(f"{rel} (not a regular file)")
            elif path.resolve() in skip:
                continue
            elif PurePosixPath(rel).parent == blobs_dir:
                if name.removesuffix(".bin") not in chunks:
                    left_out.append(f"{rel} (no manifest entry uses it)")
            else:
                size, digest = _hash_file(path)
                entries.append({**meta, "type": "file", "size": size, "xxh64": digest})
    return entries, left_out


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _write_frame(f: BinaryIO, name: str, payload: bytes) -> None:
    raw = name.encode()
    f.write(_NAME_LEN.pack(len(raw)) + raw + _PAYLOAD_LEN.pack(len(payload)))
    f.write(payload)


class _Truncated(Exception):
    def __init__(self, what: str, entry: str | None = None):
        super().__init__(what)
        self.entry = entry


def _read_exact(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise _Truncated(f"file ends {n - len(data)} bytes early")
    return data


def _read_frame_header(f: BinaryIO, limit: int) -> tuple[str, int] | None:
    """The next frame's (name, payload length), or None at the end of the file."""
    head = f.read(_NAME_LEN.size)
    if not head:
        return None
    if len(head) != _NAME_LEN.size:
        raise _Truncated("file ends inside a frame header")
    name = _read_exact(f, _NAME_LEN.unpack(head)[0]).decode()
    try:
        (size,) = _PAYLOAD_LEN.unpack(_read_exact(f, _PAYLOAD_LEN.size))
    except _Truncated as exc:
        raise _Truncated(str(exc), name) from None
    if size > limit:  # a damaged length must not make us read (or allocate) the whole file
        raise _Truncated(f"it claims {size} bytes, only {limit} are left in the file", name)
    return name, size


class _Bounded(io.RawIOBase):
    """The next `n` bytes of a file, for zstd's stream reader (which must not read past
    the frame's payload into the next frame)."""

    def __init__(self, f: BinaryIO, n: int):
        self.f, self.left = f, n

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        want = min(len(b), self.left)
        if want <= 0:
            return 0
        data = self.f.read(want)
        if not data:
            raise _Truncated(f"file ends {self.left} bytes early")
        b[: len(data)] = data
        self.left -= len(data)
        return len(data)


class _Payloads:
    """Decompresses frame payloads into `out`, hashing them, in pieces of PIECE bytes
    through two buffers allocated once per unpack (a fresh 4 MiB buffer per chunk costs a
    page fault per 4 KiB, which made unpack 1.3x slower than reading whole payloads)."""

    def __init__(self):
        self.dctx = zstd.ZstdDecompressor()
        self.packed = bytearray(max_frame_bytes(PIECE))
        self.plain = bytearray(PIECE)

    def stream(self, f: BinaryIO, size: int, declared: int, out: BinaryIO | None) -> str:
        """Decompress one frame's payload (`size` bytes at f's position) into `out`,
        refusing more or fewer than `declared` bytes; its XXH64. f is left at the
        frame's end. A payload that fits the buffer (every chunk of a real capture) is
        read whole first; a larger one is read as it is decompressed."""
        end = f.tell() + size
        h, n = xxhash.xxh64(), 0
        try:
            if size <= len(self.packed):
                view = memoryview(self.packed)[:size]
                if f.readinto(view) != size:
                    raise _Truncated(f"file ends inside the entry's {size} bytes")
                source = view
            else:
                source = _Bounded(f, size)
            reader = self.dctx.stream_reader(source, read_size=1 << 20, read_across_frames=False, closefd=False)
            plain = memoryview(self.plain)
            while got := reader.readinto(plain[: min(PIECE, declared + 1 - n)]):
                n += got
                if n > declared:
                    raise zstd.ZstdError(f"the entry expands to more than the {declared} bytes its index entry "
                                         "declares")
                h.update(plain[:got])
                if out is not None:
                    out.write(plain[:got])
        finally:
            f.seek(end)
        if n != declared:
            raise zstd.ZstdError(f"the entry holds {n} bytes, its index entry declares {declared}")
        return h.hexdigest()


# -- unpacking ----------------------------------------------------------------------------


def _open_regular(src: Path) -> BinaryIO:
    """The pack file, opened without blocking on a FIFO or a device (refused)."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise KerncapError(f"cannot open {src} ({why})", "check the path") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise KerncapError(f"{src} is not a regular file (a FIFO, a device or a directory)",
                           "pass a pack file written by `kerncap pack`")
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return os.fdopen(fd, "rb")


def unpack(pack_file: str | os.PathLike, output: str | os.PathLike | None = None, *,
           limits: Limits | None = None) -> PackResult:
    """Restore the reproducer held by a `.kcap` file into a new (or empty) directory,
    checking every entry; nothing is left behind when it is damaged. `limits` bounds what
    a pack may expand to (default `Limits()`: 1 TiB, and 1000x the pack's size past 1 GiB)."""
    src = Path(pack_file)
    if output is not None and str(output) == "":
        raise UsageError("the output directory (-o) is empty", "pass -o DIR, or leave -o out for FILE without .kcap")
    out = Path(output) if output is not None else default_unpack_dir(src)
    f = _open_regular(src)
    with f:
        if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
            raise KerncapError(f"{out} exists and is not empty", "pass -o with a new directory, or remove that one")
        partial = out.with_name(f"{out.name}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)  # a leftover of this pid's earlier, killed run
        made = _missing_parents(out)  # `-o new/dir/r` makes new/dir, as mkdir -p would
        done = False
        try:
            try:
                for d in made:
                    os.mkdir(d)
                os.mkdir(partial)
                with Tree(partial) as tree:
                    result = _extract(src, f, tree, limits or Limits())
                os.rename(partial, out)  # onto an empty directory too (POSIX rename)
                done = True
            except OSError as exc:
                raise fs_error(exc, f"unpack {src} into {out}") from None
        finally:
            shutil.rmtree(partial, ignore_errors=True)  # gone after the rename; never the target
            for d in reversed(made if not done else []):  # nothing of a failed unpack remains
                try:
                    os.rmdir(d)
                except OSError:
                    break
    result.path = out
    result.packed = src.stat().st_size
    result.notes = [left.advice() for left in find_leftovers(out.parent, out.name)]
    return result


def _missing_parents(out: Path) -> list[Path]:
    """The directories above `out` that do not exist yet, outermost first."""
    missing = []
    parent = out.absolute().parent
    while not os.path.lexists(parent) and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    return missing[::-1]


def _corrupt(src: Path, entry: str, what: str) -> KerncapError:
    return KerncapError(f"{src} is corrupt or truncated at entry {entry!r}: {what}",
                        "the pack file is damaged; copy it again or pack the reproducer again (`kerncap pack DIR`)")


def _refused(src: Path, what: str, *, limit: bool = False) -> KerncapError:
    hint = ("if you trust this pack and it is genuinely this large, raise the limit "
            "(`kerncap unpack --max-bytes/--max-ratio`)" if limit else
            "`kerncap pack` writes only the chunks a manifest uses, as long as it gives them: this pack was "
            "made or changed by something else; ask for a fresh `kerncap pack` of the reproducer")
    return KerncapError(f"{src} is refused: {what}", hint)


class _Chunks:
    """What the unpacked manifest says the chunks are, checked once against the index
    before the first chunk is written (a pack may carry only chunks its manifest uses,
    each of the length the manifest gives it)."""

    def __init__(self, src: Path, tree: Tree, index: dict[str, Any]):
        self.src, self.tree, self.index = src, tree, index
        self.manifest_dir = PurePosixPath(index["blobs_dir"]).parent
        self.checked = False

    def check(self) -> None:
        if self.checked:
            return
        self.checked = True
        manifest = (self.manifest_dir / "manifest.json").as_posix()
        try:
            cap = Capture.open(self.tree.root / self.manifest_dir)
        except KerncapError as exc:
            raise _corrupt(self.src, f"files/{manifest}",
                           f"its manifest must come before the chunks and be readable ({exc.message})") from None
        used = dict(capture_chunks(cap))
        for b in self.index["blobs"]:
            if b["hash"] not in used:
                raise _refused(self.src, f"its index declares chunk {b['hash']} ({human_bytes(b['size'])}), which "
                                         f"its manifest {manifest} does not use")
            if used[b["hash"]] != b["size"]:
                raise _refused(self.src, f"its index declares chunk {b['hash']} as {b['size']} bytes; the "
                                         f"manifest gives it {used[b['hash']]}")
        lacking = set(used) - {b["hash"] for b in self.index["blobs"]}
        if lacking:
            raise _corrupt(self.src, INDEX_NAME, f"the manifest uses {len(lacking)} chunk(s) the pack does not hold "
                                                 f"(first: {sorted(lacking)[0]})")


def _extract(src: Path, f: BinaryIO, tree: Tree, limits: Limits) -> PackResult:
    entry = INDEX_NAME
    total = os.fstat(f.fileno()).st_size
    try:
        head = f.read(_HEADER.size)
        if not head.startswith(MAGIC) or len(head) < _HEADER.size:
            raise KerncapError(f"{src} is not a kerncap pack file (no {MAGIC.decode()} header)",
                               "pass a file written by `kerncap pack`; if it was one, copy it again or re-pack")
        _, version = _HEADER.unpack(head)
        if version > PACK_VERSION:
            raise KerncapError(f"{src} has pack format version {version}; this kerncap reads {PACK_VERSION}",
                               "upgrade kerncap to unpack it")
        frame = _read_frame_header(f, total - f.tell())
        if frame is None or frame[0] != INDEX_NAME:
            raise _corrupt(src, entry, "the index is not the first entry")
        if frame[1] > max_frame_bytes(MAX_INDEX_BYTES):
            raise _corrupt(src, entry, f"the index claims {frame[1]} compressed bytes, more than an index can be")
        index = _read_index(src, _bounded_decompress(_read_exact(f, frame[1]), MAX_INDEX_BYTES))
        files = {f"files/{e['path']}": e for e in index["entries"] if e["type"] == "file"}
        blobs = {f"blobs/{b['hash']}": b for b in index["blobs"]}
        blobs_dir = PurePosixPath(index["blobs_dir"])
        _check_space(src, tree.root, index, total, limits)
        tree.dir_fd(blobs_dir, create=True)
        for e in index["entries"]:
            if e["type"] == "dir":
                tree.dir_fd(e["path"], create=True)
        chunks = _Chunks(src, tree, index)
        payloads = _Payloads()
        result = PackResult(path=tree.root)
        while True:
            entry = f"(the entry after {entry})"
            if (frame := _read_frame_header(f, total - f.tell())) is None:
                break
            entry, size = frame
            e = files.pop(entry, None) or blobs.pop(entry, None)
            if e is None:
                raise _corrupt(src, entry, "not in the index (or listed twice)")
            if "hash" in e:
                chunks.check()
                rel, mode, mtime = blobs_dir / f"{e['hash']}.bin", 0o644, None
            else:
                rel, mode, mtime = PurePosixPath(e["path"]), e["mode"], e["mtime"]
            out = tree.create(rel, mode=mode)
            try:
                digest = payloads.stream(f, size, e["size"], out)
            except BaseException:
                tree.discard(out)
                raise
            if digest != e.get("xxh64", e.get("hash")):
                tree.discard(out)
                raise _corrupt(src, entry, "content does not match its hash in the index")
            tree.commit(out, mode=mode, mtime=mtime)
            if "hash" in e:
                result.blobs += 1
            else:
                result.files += 1
            result.stored += e["size"]
        missing = [*files, *blobs]
        if missing:
            raise _corrupt(src, missing[0], f"missing, and {len(missing) - 1} entries after it (truncated)")
        chunks.check()  # a pack without chunks: its manifest must need none
    except _Truncated as exc:
        raise _corrupt(src, exc.entry or entry, f"{exc} (truncated?)") from None
    except TreeError as exc:
        raise _corrupt(src, entry, f"{exc.path} is {exc.why}") from None
    except (zstd.ZstdError, UnicodeDecodeError, struct.error) as exc:
        raise _corrupt(src, entry, str(exc)) from None
    # Directory modes last: a read-only directory is made read-only only after it was filled.
    for e in reversed(index["entries"]):
        if e["type"] == "dir":
            tree.set_dir(e["path"], mode=e["mode"], mtime=e["mtime"])
    result.logical = Capture.open(tree.root).logical_bytes
    return result


def _read_index(src: Path, raw: bytes) -> dict[str, Any]:
    try:
        index = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise _corrupt(src, INDEX_NAME, f"not valid JSON ({exc})") from None
    if not isinstance(index, dict) or index.get("format") != PACK_FORMAT:
        raise _corrupt(src, INDEX_NAME, "not a kerncap pack index")
    if not isinstance(index.get("format_version"), int) or index["format_version"] > PACK_VERSION:
        raise KerncapError(f"{src} has pack format version {index.get('format_version')}; this kerncap reads {PACK_VERSION}",
                           "upgrade kerncap to unpack it")
    found = problem(index, PACK_INDEX)
    if found:
        raise _corrupt(src, INDEX_NAME, f"field {found}")
    seen: set[str] = set()
    _check_relative(src, index["blobs_dir"])
    blobs_dir = PurePosixPath(index["blobs_dir"])
    for i, e in enumerate(index["entries"]):
        _check_relative(src, e["path"])
        if blobs_dir in PurePosixPath(e["path"]).parents:
            # Only the pack's own chunks go there (restored from blobs/<h>): an entry there
            # would leave the capture's chunk directory holding something no manifest uses.
            raise _corrupt(src, INDEX_NAME, f"entry {e['path']!r} lies in the capture's chunk directory "
                                            f"{blobs_dir.as_posix()}, which holds only the pack's chunks")
        if e["type"] == "symlink":
            raise _corrupt(src, INDEX_NAME, f"entry {e['path']!r} is a symbolic link; a pack holds only files and "
                                            "directories (a link could lead out of the target directory)")
        needed = ("mode", "mtime", "size", "xxh64") if e["type"] == "file" else ("mode", "mtime")
        missing = [k for k in needed if k not in e]
        if missing:
            raise _corrupt(src, INDEX_NAME, f"field entries[{i}].{missing[0]} is missing")
        key = PurePosixPath(e["path"]).as_posix()
        if key in seen:
            raise _corrupt(src, INDEX_NAME, f"entry {e['path']!r} is listed twice")
        seen.add(key)
        e["path"] = key
        e["mode"], e["mtime"] = e["mode"] & 0o7777, float(e["mtime"])
    files = {e["path"] for e in index["entries"] if e["type"] == "file"}
    for e in index["entries"]:
        under = next((str(p) for p in PurePosixPath(e["path"]).parents if str(p) in files), None)
        if under is not None:  # a file cannot hold entries: one of the two is not what `pack` wrote
            raise _corrupt(src, INDEX_NAME, f"entry {e['path']!r} lies under {under!r}, which the index lists as a "
                                            "file (a path cannot be both a file and a directory)")
    manifest = (PurePosixPath(index["blobs_dir"]).parent / "manifest.json").as_posix()
    for e in index["entries"]:
        if e["path"] == manifest and e["type"] == "file" and e["size"] > MAX_MANIFEST_BYTES:
            raise _refused(src, f"its manifest {manifest} declares {human_bytes(e['size'])}, more than a "
                                f"manifest can be ({human_bytes(MAX_MANIFEST_BYTES)})")
    return index


def _bounded_decompress(frame: bytes, limit: int) -> bytes:
    """A zstd frame's content, refusing more than `limit` bytes (a small damaged or
    hostile frame must not expand into gigabytes)."""
    reader = zstd.ZstdDecompressor().stream_reader(io.BytesIO(frame))
    out = bytearray()
    while piece := reader.read(min(PIECE, limit + 1 - len(out))):  # in pieces: nothing allocated up front
        out += piece
        if len(out) > limit:
            raise zstd.ZstdError(f"the index expands to more than {limit} bytes")
    return bytes(out)


def _check_space(src: Path, dest: Path, index: dict[str, Any], packed: int, limits: Limits) -> None:
    """Refuse before writing anything when the pack claims more than the limits allow or
    than fits."""
    total = sum(e.get("size", 0) for e in index["entries"] if e["type"] == "file")
    total += sum(b["size"] for b in index["blobs"])
    if total > MAX_UNPACKED_BYTES:
        raise _corrupt(src, INDEX_NAME, f"it claims {total} bytes, more than the {MAX_UNPACKED_BYTES} kerncap unpacks")
    why = limits.problem(total, packed)
    if why:
        raise _refused(src, why, limit=True)
    try:
        free = shutil.disk_usage(dest).free
    except OSError:
        return
    if total > free:
        raise KerncapError(f"{src} unpacks to {human_bytes(total)}; {dest.parent} has {human_bytes(free)} free",
                           "free space there, or unpack elsewhere with -o")


def _check_relative(src: Path, p: Any) -> None:
    """Entry paths stay inside the target directory and name something a file system can hold."""
    pp = PurePosixPath(p) if isinstance(p, str) else None
    if pp is None or not p or pp.is_absolute() or ".." in pp.parts or "\\" in p or str(pp) == ".":
        raise _corrupt(src, INDEX_NAME, f"entry path {p!r} would leave the target directory")
    if "\x00" in p or not _utf8(p) or any(len(part.encode()) > 255 for part in pp.parts):
        raise _corrupt(src, INDEX_NAME, f"entry path {p!r} is not a file name (a NUL byte, not UTF-8, or too long)")
