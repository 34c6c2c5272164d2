"""A reproducer's editable sources: the files under `<reproducer>/source/` that
`kerncap recompile` builds from (CUDA C++ translation unit and headers, or a Triton
kernel.py). Listing, reading and writing them for front ends without an editor (the
MCP server): every path stays inside source/, writes are atomic, text only."""

from __future__ import annotations

import hashlib
import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

from kerncap.errors import KerncapError, UsageError

SOURCE_DIR = "source"
MAX_SOURCE_BYTES = 4 << 20
# Records kerncap writes beside the sources: listed, but not to be edited by hand.
RECORDS = {"build.json", "triton.json"}
# What is not a source although it lies under source/: hidden files and directories, and
# editors' droppings (vim swap, backup and write-probe files, emacs locks, temp renames,
# patch leftovers) and kerncap's own lock. The one definition: listing, the history's
# fingerprint and the workbench's watcher all ask is_source_file.
IGNORED_SUFFIXES = (".swp", ".swx", ".swo", "~", ".tmp", ".orig")
IGNORED_NAMES = frozenset({"4913", "build.json.lock"})


@dataclass(frozen=True)
class SourceFile:
    path: str        # relative to <reproducer>/source/, with forward slashes
    size: int
    editable: bool   # False for kerncap's own records (build.json, the Triton spec)


def source_root(reproducer: str | os.PathLike) -> Path:
    root = Path(reproducer) / SOURCE_DIR
    if not root.is_dir():
        raise KerncapError(f"{reproducer} has no editable sources ({root} does not exist)",
                           "extract with --source-dir (CUDA C++), or capture a Triton kernel, to get source/")
    # A reproducer from someone else may hold source/ as a link to anywhere: reads and
    # writes through it would leave the reproducer.
    if root.is_symlink() or not root.resolve().is_relative_to(Path(reproducer).resolve()):
        raise UsageError(f"{root} is a symbolic link (to {root.resolve()}): its sources would lie outside "
                         f"{reproducer}", "replace the link by the directory itself, or unpack the reproducer again")
    return root


def is_source_file(path: str | os.PathLike, root: str | os.PathLike | None = None) -> bool:
    """Whether the file `path` is one of the sources; with `root` (the source/ directory)
    a hidden directory between the two counts too."""
    p = Path(path)
    if root is not None and p.is_relative_to(root):
        p = p.relative_to(root)
    parts = p.parts if root is not None else (p.name,)
    return bool(p.name) and not (any(part.startswith(".") for part in parts) or p.name in IGNORED_NAMES
                                 or p.name.endswith(IGNORED_SUFFIXES))


def source_fingerprint(source_dir: str | os.PathLike) -> str:
    """A hash of every source file under `source_dir` (paths and bytes): equal
    fingerprints mean an unchanged source."""
    source_dir = Path(source_dir)
    digest = hashlib.sha256()
    for path in sorted(source_dir.rglob("*")):
        if not is_source_file(path, source_dir):
            continue
        try:
            data = path.read_bytes() if path.is_file() else None
        except OSError:  # removed or replaced while we looked (an editor saving): not part of this state
            continue
        if data is not None:
            digest.update(str(path.relative_to(source_dir)).encode() + b"\0" + data + b"\0")
    return digest.hexdigest()


def list_sources(reproducer: str | os.PathLike) -> list[SourceFile]:
    root = source_root(reproducer)
    out = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and is_source_file(path, root):
            rel = path.relative_to(root).as_posix()
            out.append(SourceFile(rel, path.stat().st_size, editable=Path(rel).name not in RECORDS))
    return out


def source_path(reproducer: str | os.PathLike, name: str) -> Path:
    """The file `name` (relative to source/) of the reproducer; refuses anything that
    leaves source/ (absolute paths, `..`, symlinks out)."""
    root = source_root(reproducer).resolve()
    rel = Path(name)
    if not name or "\x00" in name or rel.is_absolute() or ".." in rel.parts:
        raise UsageError(f"source file {name!r} must be a path relative to {root}, without '..' or a NUL",
                         "list the files with list_sources")
    path = (root / rel).resolve()
    if not path.is_relative_to(root):
        raise UsageError(f"source file {name!r} leads outside {root} (a symbolic link?)",
                         "edit the files inside the reproducer's source/")
    return path


def read_source(reproducer: str | os.PathLike, name: str) -> str:
    path = source_path(reproducer, name)
    try:  # opened without blocking, then looked at: a FIFO there must not hang the reader
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise KerncapError(f"{path} does not exist", "list the files with list_sources") from None
    with open(fd, encoding="utf-8") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO or a device)"
            raise KerncapError(f"{path} is {what}, not a source file kerncap can read",
                               "replace it by the source file, or list the files with list_sources")
        if st.st_size > MAX_SOURCE_BYTES:
            raise KerncapError(f"{path} is larger than {MAX_SOURCE_BYTES >> 20} MiB", "edit it with a local editor")
        try:
            return f.read()
        except UnicodeDecodeError:
            raise KerncapError(f"{path} is not UTF-8 text", "only text sources can be read this way") from None


def write_source(reproducer: str | os.PathLike, name: str, text: str) -> SourceFile:
    """Replace (or create) a source file atomically; kerncap's records are refused."""
    path = source_path(reproducer, name)
    if path.name in RECORDS:
        raise UsageError(f"{path.name} is kerncap's record of how to build, not a source",
                         "edit the kernel's source files; pin Triton options with recompile's config instead")
    data = text.encode("utf-8")
    if len(data) > MAX_SOURCE_BYTES:
        raise UsageError(f"the new {name} is larger than {MAX_SOURCE_BYTES >> 20} MiB", "write a smaller file")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_bytes(data)
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    root = source_root(reproducer).resolve()
    return SourceFile(path.relative_to(root).as_posix(), len(data), editable=True)
