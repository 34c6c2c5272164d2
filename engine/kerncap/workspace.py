"""The workspace: where `kerncap profile` keeps profiles and `kerncap extract` puts
reproducers when no --output is given.

    <workspace>/profiles/<timestamp>.json
    <workspace>/reproducers/<kernel>-<timestamp>/
    <workspace>/store/                     chunk store shared by the captures (kerncap.store)
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        return sorted(self.profiles_dir.glob("*.json"), reverse=True)


def _unique(path: Path) -> Path:
    """`path`, or `path` with -2, -3, … appended if it is taken (two runs in one second)."""
    if not path.exists():
        return path
    for n in range(2, 10_000):
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
        if not candidate.exists():
            return candidate
    raise FileExistsError(path)


# -- listing the captures of a workspace (`kerncap list`, the workbench) -------------------


def find_reproducers(root: Path) -> list[Path]:
    """Reproducer directories (holding capture/) at or one level under `root`; a
    reproducer set (kerncap.sets) there contributes its members."""
    root = Path(root)
    if (root / "capture").is_dir():
        return [root]
    if not root.is_dir():
        return []
    found = []
    for p in sorted(root.iterdir()):
        if (p / "capture").is_dir():
            found.append(p)
        elif (p / "set.json").is_file():
            found += sorted((m for m in (p / "members").glob("*") if (m / "capture").is_dir()),
                            key=lambda m: int(m.name) if m.name.isdigit() else -1)
    return found


def list_captures(root: str | Path = DEFAULT_WORKSPACE, extra: Sequence[str | Path] = ()) -> list[dict[str, Any]]:
    """One plain dict per reproducer under <root>/reproducers/ and under each of `extra`
    (a reproducer, or a directory of them), newest first. An unreadable capture is
    listed with its `error` instead of being skipped, so the user sees it."""
    seen: set[Path] = set()
    rows = []
    for base in [Workspace(Path(root)).reproducers_dir, *map(Path, extra)]:
        for repro in find_reproducers(base):
            if repro.resolve() not in seen:
                seen.add(repro.resolve())
                rows.append(describe_reproducer(repro))
    rows.sort(key=lambda r: r.get("time") or "", reverse=True)
    return rows


def describe_reproducer(repro: Path) -> dict[str, Any]:
    # Imported here: the workspace module stays importable without the capture reader's deps.
    from kerncap.capture.format import Capture
    from kerncap.errors import KerncapError
    from kerncap.profile import short_kernel_name

    row: dict[str, Any] = {"path": str(repro), "kernel": None, "mangled": None, "command": None, "time": None,
                           "logical": None, "stored": None, "in_store": False, "validation": None, "variants": 0,
                           "error": None}
    try:
        cap = Capture.open(repro)
        prov = cap.provenance
        command = prov.get("command")
        row.update(
            kernel=short_kernel_name(cap.kernel.get("demangled") or cap.kernel.get("name") or "?"),
            mangled=cap.kernel.get("name"),
            command=shlex.join(command) if isinstance(command, list) else command,
            time=prov.get("time"),
            logical=cap.logical_bytes,
            stored=cap.stored_bytes,
            in_store=(cap.root / "stored.json").is_file(),  # payloads in the workspace store (`kerncap store`)
        )
    except KerncapError as exc:
        row["error"] = exc.message
    except OSError as exc:
        row["error"] = f"{repro}: {exc}"
    row.update(_validation(repro))
    return row


def _validation(repro: Path) -> dict[str, Any]:
    """The baseline's validation from <repro>/history.json (written by the workbench), if any."""
    path = repro / "history.json"
    if not path.is_file():
        return {}
    try:
        variants = json.loads(path.read_text()).get("variants") or []
        baseline = next((v for v in variants if v.get("id") == 0), None)
        return {"validation": baseline.get("validation") if baseline else None, "variants": len(variants)}
    except (OSError, ValueError, AttributeError, TypeError):
        return {"validation": f"unreadable {path.name}"}
