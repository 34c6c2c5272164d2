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
"""

from __future__ import annotations

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

import zstandard as zstd

from kerncap import __version__
from kerncap.core.fsio import find_leftovers, fs_error, is_leftover_name, remove_quietly, temp_name
from kerncap.core.schema import problem
from kerncap.errors import KerncapError
from kerncap.reproducer.format import Capture, capture_chunks
from kerncap.reproducer.schemas import PACK_INDEX
from kerncap.reproducer.store import chunk_hash, compress, compress_in_order, decompress

PACK_FORMAT = "kerncap-pack"
PACK_VERSION = 1
INDEX_NAME = "kcap-pack.json"
MAX_INDEX_BYTES = 256 << 20
MAX_UNPACKED_BYTES = 1 << 44
SUFFIX = ".kcap"
MAGIC = b"KCAPPACK"
_HEADER = struct.Struct("<8sI")
_NAME_LEN = struct.Struct("<H")
_PAYLOAD_LEN = struct.Struct("<Q")


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
    root = Path(directory)
    if not root.is_dir():
        raise KerncapError(f"{root} is not a directory", "pass a reproducer directory (what `kerncap extract` wrote)")
    cap = Capture.open(root)  # refuses incomplete or foreign directories
    out = Path(output) if output is not None else default_pack_path(root)
    if out.exists() and not force:
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


def _payloads(root: Path, entries: list[dict], cap: Capture, chunks: dict[str, int]) -> Iterator[tuple[str, bytes]]:
    """(frame name, raw bytes) of every file, then every chunk."""
    for e in entries:
        if e["type"] == "file":
            data = (root / e["path"]).read_bytes()
            if len(data) != e["size"] or chunk_hash(data) != e["xxh64"]:
                raise KerncapError(f"{root / e['path']} changed while packing", "pack again when nothing writes to the reproducer")
            yield f"files/{e['path']}", data
    for h, n in chunks.items():
        yield f"blobs/{h}", cap.read_chunk(h, n)  # verifies length and hash: never pack a corrupt chunk


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
            st = path.lstat()
            meta = {"path": rel, "mode": stat.S_IMODE(st.st_mode), "mtime": st.st_mtime}
            if is_leftover_name(name):
                left_out.append(f"{rel} (a temporary file or copy of a kerncap command, running or interrupted)")
                if stat.S_ISDIR(st.st_mode):
                    dirnames.remove(name)
            elif stat.S_ISLNK(st.st_mode):
                left_out.append(f"{rel} (a symbolic link: unpack refuses links, so none are packed)")
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
                data = path.read_bytes()
                entries.append({**meta, "type": "file", "size": len(data), "xxh64": chunk_hash(data)})
    return entries, left_out


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


def _read_frame(f: BinaryIO, limit: int) -> tuple[str, bytes] | None:
    """The next (name, payload), or None at the end of the file."""
    head = f.read(_NAME_LEN.size)
    if not head:
        return None
    if len(head) != _NAME_LEN.size:
        raise _Truncated("file ends inside a frame header")
    name = _read_exact(f, _NAME_LEN.unpack(head)[0]).decode()
    try:
        (size,) = _PAYLOAD_LEN.unpack(_read_exact(f, _PAYLOAD_LEN.size))
        if size > limit:  # a damaged length must not make us read (or allocate) the whole file
            raise _Truncated(f"it claims {size} bytes, only {limit} are left in the file")
        return name, _read_exact(f, size)
    except _Truncated as exc:
        raise _Truncated(str(exc), name) from None


# -- unpacking ----------------------------------------------------------------------------


def unpack(pack_file: str | os.PathLike, output: str | os.PathLike | None = None) -> PackResult:
    src = Path(pack_file)
    out = Path(output) if output is not None else default_unpack_dir(src)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise KerncapError(f"{out} exists and is not empty", "pass -o with a new directory, or remove that one")
    partial = out.with_name(f"{out.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)  # a leftover of this pid's earlier, killed run
    try:
        f = open(src, "rb")
    except OSError as exc:
        raise KerncapError(f"cannot open {src} ({exc})", "check the path") from None
    try:
        with f:
            result = _extract(src, f, partial)
        os.rename(partial, out)  # onto an empty directory too (POSIX rename)
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise KerncapError(f"cannot unpack {src} into {out} ({exc})", "check free space and permissions") from None
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    result.path = out
    result.packed = src.stat().st_size
    result.notes = [left.advice() for left in find_leftovers(out.parent, out.name)]
    return result


def _corrupt(src: Path, entry: str, what: str) -> KerncapError:
    return KerncapError(f"{src} is corrupt or truncated at entry {entry!r}: {what}",
                        "the pack file is damaged; copy it again or pack the reproducer again (`kerncap pack DIR`)")


def _extract(src: Path, f: BinaryIO, dest: Path) -> PackResult:
    entry = INDEX_NAME
    total = src.stat().st_size
    try:
        head = f.read(_HEADER.size)
        if not head.startswith(MAGIC) or len(head) < _HEADER.size:
            raise KerncapError(f"{src} is not a kerncap pack file (no {MAGIC.decode()} header)",
                               "pass a file written by `kerncap pack`; if it was one, copy it again or re-pack")
        _, version = _HEADER.unpack(head)
        if version > PACK_VERSION:
            raise KerncapError(f"{src} has pack format version {version}; this kerncap reads {PACK_VERSION}",
                               "upgrade kerncap to unpack it")
        frame = _read_frame(f, total - f.tell())
        if frame is None or frame[0] != INDEX_NAME:
            raise _corrupt(src, entry, "the index is not the first entry")
        index = _read_index(src, _bounded_decompress(frame[1], MAX_INDEX_BYTES))
        files = {f"files/{e['path']}": e for e in index["entries"] if e["type"] == "file"}
        blobs = {f"blobs/{b['hash']}": b for b in index["blobs"]}
        blobs_dir = dest / index["blobs_dir"]
        _check_space(src, dest, index)
        dest.mkdir(parents=True)
        blobs_dir.mkdir(parents=True, exist_ok=True)
        for e in index["entries"]:
            if e["type"] == "dir":
                (dest / e["path"]).mkdir(parents=True, exist_ok=True)
        result = PackResult(path=dest)
        while True:
            entry = f"(the entry after {entry})"
            if (frame := _read_frame(f, total - f.tell())) is None:
                break
            entry, payload = frame
            e = files.pop(entry, None) or blobs.pop(entry, None)
            if e is None:
                raise _corrupt(src, entry, "not in the index (or listed twice)")
            size = e["size"]
            data = decompress(payload, size)
            if len(data) != size or chunk_hash(data) != e.get("xxh64", e.get("hash")):
                raise _corrupt(src, entry, "content does not match its hash in the index")
            if "hash" in e:
                (blobs_dir / f"{e['hash']}.bin").write_bytes(data)
                result.blobs += 1
            else:
                path = dest / e["path"]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                os.chmod(path, e["mode"])
                os.utime(path, (e["mtime"], e["mtime"]))
                result.files += 1
            result.stored += size
        missing = [*files, *blobs]
        if missing:
            raise _corrupt(src, missing[0], f"missing, and {len(missing) - 1} entries after it (truncated)")
    except _Truncated as exc:
        raise _corrupt(src, exc.entry or entry, f"{exc} (truncated?)") from None
    except (zstd.ZstdError, UnicodeDecodeError, struct.error) as exc:
        raise _corrupt(src, entry, str(exc)) from None
    # Directory modes last: a read-only directory is made read-only only after it was filled.
    for e in reversed(index["entries"]):
        if e["type"] == "dir":
            os.chmod(dest / e["path"], e["mode"])
            os.utime(dest / e["path"], (e["mtime"], e["mtime"]))
    result.logical = Capture.open(dest).logical_bytes
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
    for p in [index["blobs_dir"], *(e["path"] for e in index["entries"])]:
        _check_relative(src, p)
    for i, e in enumerate(index["entries"]):
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
        e["mode"], e["mtime"] = e["mode"] & 0o7777, float(e["mtime"])
    return index


def _bounded_decompress(frame: bytes, limit: int) -> bytes:
    """A zstd frame's content, refusing more than `limit` bytes (a small damaged or
    hostile frame must not expand into gigabytes)."""
    reader = zstd.ZstdDecompressor().stream_reader(io.BytesIO(frame))
    data = reader.read(limit + 1)
    if len(data) > limit:
        raise zstd.ZstdError(f"the index expands to more than {limit} bytes")
    return data


def _check_space(src: Path, dest: Path, index: dict[str, Any]) -> None:
    """Refuse before writing anything when the pack claims more than fits."""
    total = sum(e.get("size", 0) for e in index["entries"] if e["type"] == "file")
    total += sum(b["size"] for b in index["blobs"])
    if total > MAX_UNPACKED_BYTES:
        raise _corrupt(src, INDEX_NAME, f"it claims {total} bytes, more than the {MAX_UNPACKED_BYTES} kerncap unpacks")
    try:
        free = shutil.disk_usage(dest.parent).free
    except OSError:
        return
    if total > free:
        raise KerncapError(f"{src} unpacks to {total} bytes; {dest.parent} has {free} free",
                           "free space there, or unpack elsewhere with -o")


def _check_relative(src: Path, p: Any) -> None:
    """Entry paths stay inside the target directory."""
    pp = PurePosixPath(p) if isinstance(p, str) else None
    if pp is None or not p or pp.is_absolute() or ".." in pp.parts or "\\" in p or str(pp) == ".":
        raise _corrupt(src, INDEX_NAME, f"entry path {p!r} would leave the target directory")
