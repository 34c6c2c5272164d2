"""Local `#include "..."` tracing: the headers of the source tree a file pulls in."""

from __future__ import annotations

import os
import re
from pathlib import Path

_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)


def within(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def trace_includes(start: Path, root: Path, include_dirs: list[Path], max_depth: int = 64) -> list[Path]:
    """Headers under `root` reached from `start` through includes, breadth first.

    Quote includes resolve against the including file's directory, then the -I dirs;
    angle includes against the -I dirs only. Headers outside `root` (system, CUDA)
    are not followed.
    """
    found: list[Path] = []
    seen = {start.resolve()}
    frontier = [start]
    for _depth in range(max_depth):
        nxt = []
        for current in frontier:
            for kind, name in _INCLUDE.findall(read_text(current)):
                dirs = ([current.parent] if kind == '"' else []) + include_dirs
                for d in dirs:
                    candidate = Path(os.path.normpath(d / name))
                    if candidate.is_file():
                        resolved = candidate.resolve()
                        if resolved not in seen and within(resolved, root):
                            seen.add(resolved)
                            found.append(resolved)
                            nxt.append(resolved)
                        break
        if not nxt:
            break
        frontier = nxt
    return found


def includers(header: Path, root: Path, candidates: list[Path], include_dirs: list[Path]) -> list[Path]:
    """The files among `candidates` whose include closure holds `header`."""
    header = header.resolve()
    return [c for c in candidates if header in trace_includes(c, root, include_dirs)]
