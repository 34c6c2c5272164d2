"""Where in a reproducer's source/ the captured kernel is defined: the file and line the
Source pane opens at (not the translation unit's top, which may only include it).

CUDA: the `__global__` definition of the kernel's base name (kerncap.sources.grep), the
files the cubin's line table names first. Triton: `def <name>(` in source/kernel.py."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kerncap.errors import KerncapError
from kerncap.reproducer.record import read_record
from kerncap.sources.grep import find_definitions
from kerncap.sources.names import base_name


@dataclass(frozen=True)
class KernelSite:
    path: Path
    line: int  # 1-based


def locate_kernel(root: Path, kernel: dict) -> KernelSite | None:
    """The captured kernel's definition under root/source, or None when not found."""
    source = Path(root) / "source"
    if not source.is_dir():
        return None
    name = kernel.get("name") or ""
    demangled = kernel.get("demangled") or name
    triton = _triton_site(source, name)
    if triton is not None:
        return triton
    base = base_name(demangled) if demangled else ""
    if not base:
        return None
    hits = find_definitions(source, base)
    if not hits:
        return None
    preferred = _line_table_files(root)
    hits.sort(key=lambda h: (0 if _rel(h.file, source) in preferred else 1, str(h.file), h.line))
    return KernelSite(hits[0].file, hits[0].line)


def _triton_site(source: Path, name: str) -> KernelSite | None:
    pattern = re.compile(rf"^[ \t]*def\s+{re.escape(name)}\s*\(", re.M)
    for path in sorted(source.glob("*.py")):
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        m = pattern.search(text)
        if m:
            return KernelSite(path, text.count("\n", 0, m.start()) + 1)
    return None


def _line_table_files(root: Path) -> set[str]:
    try:
        files = (read_record(root).get("sources") or {}).get("line_table_files") or []
    except KerncapError:
        return set()
    return {f for f in files if isinstance(f, str)}


def _rel(path: Path, source: Path) -> str:
    try:
        return str(path.relative_to(source))
    except ValueError:
        return str(path)
