"""A reproducer's editable sources: the files under `<reproducer>/source/` that
`kerncap recompile` builds from (CUDA C++ translation unit and headers, or a Triton
kernel.py). Listing, reading and writing them for front ends without an editor (the
MCP server): every path stays inside source/, writes are atomic, text only."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from kerncap.errors import KerncapError, UsageError

SOURCE_DIR = "source"
MAX_SOURCE_BYTES = 4 << 20
# Records kerncap writes beside the sources: listed, but not to be edited by hand.
RECORDS = {"build.json", "triton.json"}


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
    return root


def list_sources(reproducer: str | os.PathLike) -> list[SourceFile]:
    root = source_root(reproducer)
    out = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and not any(p.startswith(".") for p in path.relative_to(root).parts):
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
    if not path.is_file():
        raise KerncapError(f"{path} does not exist", "list the files with list_sources")
    if path.stat().st_size > MAX_SOURCE_BYTES:
        raise KerncapError(f"{path} is larger than {MAX_SOURCE_BYTES >> 20} MiB", "edit it with a local editor")
    try:
        return path.read_text(encoding="utf-8")
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
