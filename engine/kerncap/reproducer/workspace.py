"""The workspace: where `kerncap profile` keeps profiles and `kerncap extract` puts
reproducers when no --output is given.

    <workspace>/profiles/<timestamp>.json
    <workspace>/reproducers/<kernel>-<timestamp>/
    <workspace>/store/                     chunk store shared by the captures (kerncap.reproducer.store)
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_WORKSPACE = Path("kerncap-workspace")


def timestamp() -> str:
    """Local time, sortable and safe in file names."""
    return time.strftime("%Y%m%d-%H%M%S")


def safe_name(text: str, limit: int = 48) -> str:
    """A file-name-safe short form of a kernel name or pattern."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._") or "kernel"
    return name[:limit]


@dataclass(frozen=True)
class Workspace:
    root: Path = DEFAULT_WORKSPACE

    @property
    def profiles_dir(self) -> Path:
        return self.root / "profiles"

    @property
    def reproducers_dir(self) -> Path:
        return self.root / "reproducers"

    def new_profile_path(self) -> Path:
        return _unique(self.profiles_dir / f"{timestamp()}.json")

    def new_reproducer_path(self, kernel: str) -> Path:
        return _unique(self.reproducers_dir / f"{safe_name(kernel)}-{timestamp()}")

    def profiles(self) -> list[Path]:
        """Saved profiles, newest first."""
        if not self.profiles_dir.is_dir():
            return []
        return sorted(self.profiles_dir.glob("*.json"), key=_taken_order, reverse=True)


def _taken_order(path: Path) -> tuple[str, int]:
    """A profile's name in the order it was taken: `<timestamp>-2.json` (the second of one
    second, see _unique) after `<timestamp>.json`, which plain name order puts last."""
    m = re.fullmatch(r"(\d{8}-\d{6})(?:-(\d+))?", path.stem)
    return (m.group(1), int(m.group(2) or 1)) if m else (path.stem, 0)


def _unique(path: Path) -> Path:
    """`path`, or `path` with -2, -3, … appended if it is taken (two runs in one second)."""
    if not path.exists():
        return path
    for n in range(2, 10_000):
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
        if not candidate.exists():
            return candidate
    raise FileExistsError(path)
