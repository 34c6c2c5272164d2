"""A content-addressed chunk store shared by the captures of a workspace.

    <workspace>/store/objects/<h[:2]>/<h>.zst   one zstd frame holding one chunk

`<h>` is the chunk's XXH64 (seed 0, 16 hex digits), the same name the capture gives
it under `capture/blobs/<h>.bin`, so a second capture of the same app adds only the
chunks that changed. All-zero chunks are never stored: they are `null` in manifests,
and here `put` returns None for them and `get(None, n)` gives n zero bytes.

Writes go to a hidden temp file next to the object and are renamed into place, so an
interrupted write never leaves a visible partial object, and two writers of one
object are harmless (same name, same bytes; the later `os.replace` changes nothing).
Reads decompress and check length and hash: a corrupt object is an error, never data.
"""

from __future__ import annotations

import errno
import io
import json
import os
import stat
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, TypeVar

import xxhash
import zstandard as zstd

from kerncap.core.fsio import make_dirs, remove_dead_temps, write_atomic
from kerncap.core.schema import check
from kerncap.errors import CaptureFormatError, KerncapError
from kerncap.reproducer.schemas import STORED_JSON
from kerncap.reproducer.workspace import DEFAULT_WORKSPACE

DEFAULT_STORE = DEFAULT_WORKSPACE / "store"
ZSTD_LEVEL = 3
PIECE = 4 << 20  # bytes decompressed and hashed at a time


def chunk_hash(data: bytes) -> str:
    return xxhash.xxh64_hexdigest(data)


def is_zero(data: bytes) -> bool:
    return data == bytes(len(data))


def compress(data: bytes) -> bytes:
    # A compressor object is not safe to share between threads; making one is cheap.
    return zstd.ZstdCompressor(level=ZSTD_LEVEL, threads=-1).compress(data)


def max_frame_bytes(length: int) -> int:
    """The largest zstd frame a chunk of `length` bytes can compress to (ZSTD_compressBound, with room)."""
    return length + (length >> 7) + 1024


K = TypeVar("K")


def compress_in_order(items: Iterable[tuple[K, bytes]], workers: int | None = None) -> Iterator[tuple[K, bytes, bytes]]:
    """(key, data, compressed) for each (key, data), in input order. Several chunks are
    compressed at once in threads (zstd releases the GIL: one 4 MiB chunk is a single
    zstd job, so threads=-1 alone leaves most cores idle); at most 2 x workers chunks
    are held in memory."""
    workers = workers or min(16, os.cpu_count() or 1)
    with ThreadPoolExecutor(workers, thread_name_prefix="kerncap-zstd") as pool:
        pending: deque = deque()
        for key, data in items:
            pending.append((key, data, pool.submit(compress, data)))
            if len(pending) >= 2 * workers:
                key, data, fut = pending.popleft()
                yield key, data, fut.result()
        while pending:
            key, data, fut = pending.popleft()
            yield key, data, fut.result()


class Store:
    def __init__(self, root: str | os.PathLike = DEFAULT_STORE, *, fsync: bool = False):
        self.root = Path(root)
        self.fsync = fsync
        self._cleaned: set[Path] = set()

    @property
    def objects_dir(self) -> Path:
        return self.root / "objects"

    def object_path(self, h: str) -> Path:
        if len(h) != 16 or any(c not in "0123456789abcdef" for c in h):
            raise KerncapError(f"{h!r} is not a chunk hash (16 lower-case hex digits)", "pass a hash from a manifest")
        return self.objects_dir / h[:2] / f"{h}.zst"

    # -- writing -------------------------------------------------------------------------
    def put(self, data: bytes) -> str | None:
        """Store one chunk; its hash, or None for an all-zero chunk (never stored)."""
        if is_zero(data):
            return None
        h = chunk_hash(data)
        path = self.object_path(h)
        if not path.exists():  # a second writer of the same object skips the work
            self._write_atomic(path, compress(data))
        return h

    def _write_atomic(self, path: Path, payload: bytes) -> int:
        make_dirs(path.parent, f"create the store directory {path.parent}")
        if path.parent not in self._cleaned:  # what a killed writer left here (once per directory and run)
            self._cleaned.add(path.parent)
            remove_dead_temps(path.parent)
        # Hidden, unique per writer: concurrent writers never share a temp file, and a
        # writer killed mid-way leaves only a dot-file that no reader looks at.
        return write_atomic(path, payload, what=f"write store object {path}", fsync=self.fsync)

    def add(self, chunks: Iterable[tuple[str, int]], read: Callable[[str, int], bytes]) -> tuple[int, int]:
        """Import chunks given as (hash, length), reading each with `read(hash, length)`
        (which verifies it) only when the store lacks it; (objects added, bytes added)."""
        missing = ((h, read(h, n)) for h, n in chunks if not self.has(h))
        added_objects = added_bytes = 0
        for h, _, payload in compress_in_order(missing):
            path = self.object_path(h)
            if not path.exists():  # another writer may have stored it meanwhile
                added_objects += 1
                added_bytes += self._write_atomic(path, payload)
        return added_objects, added_bytes

    # -- reading -------------------------------------------------------------------------
    def has(self, h: str) -> bool:
        return self.object_path(h).is_file()

    def get(self, h: str | None, length: int) -> bytes:
        """The chunk's bytes, verified; None is an elided zero chunk."""
        if h is None:
            return bytes(length)
        out = io.BytesIO()
        self.stream_into(h, length, out)
        return out.getvalue()

    def stream_into(self, h: str, length: int, out: BinaryIO) -> None:
        """Write the chunk's bytes to `out`, decompressed and hashed in pieces; a damaged
        object raises CaptureFormatError (what reached `out` then is to be discarded)."""
        path = self.object_path(h)
        hint = f"delete {path} and add a capture holding this chunk again"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise CaptureFormatError(f"store object {path} is missing", "add the capture that uses it to the store again") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise CaptureFormatError(f"store object {path} is a symbolic link; the store holds only plain files",
                                         hint) from None
            raise CaptureFormatError(f"cannot read store object {path} ({exc.strerror})", "check the store's permissions") from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            # Only plain files the store wrote: a link could lead out of the store (or be
            # changed through its other name), a FIFO or device would block the read.
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                what = "a hard link" if stat.S_ISREG(st.st_mode) else "not a regular file"
                raise CaptureFormatError(f"store object {path} is {what}; the store holds only plain files", hint)
            if st.st_size > max_frame_bytes(length):
                raise CaptureFormatError(f"store object {path} is {st.st_size} bytes, too large for a {length}-byte chunk", hint)
            digest = xxhash.xxh64()
            n = 0
            try:
                head = f.read(18)  # a frame header holds the content size: refuse a wrong one before decompressing
                declared = zstd.frame_content_size(head) if head else -1
                if declared != length:
                    raise zstd.ZstdError(f"frame declares {declared} bytes, expected {length}")
                f.seek(0)
                reader = zstd.ZstdDecompressor().stream_reader(f, read_size=1 << 20, read_across_frames=False,
                                                               closefd=False)
                while piece := reader.read(min(PIECE, length + 1 - n)):
                    n += len(piece)
                    if n > length:
                        break
                    digest.update(piece)
                    out.write(piece)
            except OSError as exc:
                raise CaptureFormatError(f"cannot read store object {path} ({exc.strerror})", "check the store's permissions") from None
            except zstd.ZstdError as exc:
                raise CaptureFormatError(f"store object {path} is corrupt ({exc})", hint) from None
        if n != length:
            raise CaptureFormatError(f"store object {path} holds {'more than ' if n > length else ''}{n} bytes, "
                                     f"expected {length} (corrupt)", hint)
        if digest.hexdigest() != h:
            raise CaptureFormatError(f"store object {path} does not match its hash (corrupt)", hint)

    def objects(self) -> Iterator[Path]:
        """Visible object files (temp files of writers in progress are hidden)."""
        if self.objects_dir.is_dir():
            yield from (p for p in self.objects_dir.glob("??/*.zst") if not p.name.startswith("."))

    def size(self) -> int:
        """Bytes the store's objects take on disk."""
        return sum(p.stat().st_size for p in self.objects())


# -- the marker of a reproducer whose payloads moved here (`kerncap store`) ---------------

MARKER = "stored.json"
MARKER_FORMAT = "kerncap-stored"


def marker_path(capture_root: Path) -> Path:
    return Path(capture_root) / MARKER


def store_of(capture_root: Path) -> Store | None:
    """The store a capture's payloads were moved to, or None (payloads are local)."""
    path = marker_path(capture_root)
    if not path.exists() and not path.is_symlink():
        return None
    hint = "restore it, or rerun `kerncap store` on the original reproducer"
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > 1 << 20:
            raise CaptureFormatError(f"{path} is not a store marker (not a small regular file)", hint)
        record = json.loads(path.read_bytes())
    except OSError as exc:
        raise CaptureFormatError(f"cannot read {path} ({exc.strerror})", hint) from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CaptureFormatError(f"{path} is not valid JSON ({exc})", hint) from None
    check(record, STORED_JSON, path, hint)
    return Store(record["store"])
