"""Listing the captures of a workspace (`kerncap list`, the workbench)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kerncap.core.fsio import find_leftovers, is_leftover_name
from kerncap.core.units import short_kernel_name
from kerncap.errors import KerncapError
from kerncap.reproducer.format import Capture
from kerncap.reproducer.history import summary as history_summary
from kerncap.reproducer.payloads import check_payloads
from kerncap.reproducer.sets import is_set
from kerncap.reproducer.workspace import DEFAULT_WORKSPACE, Workspace


def find_reproducers(root: Path) -> list[Path]:
    """Reproducer directories (holding capture/) at or one level under `root`; a
    reproducer set (kerncap.reproducer.sets) there, or `root` itself, contributes its members."""
    root = Path(root)
    if (root / "capture").is_dir():
        return [root]
    if not root.is_dir():
        return []
    if is_set(root):
        return _members(root)
    # A killed kerncap's staging copies (<name>.partial-<pid>, …) are leftovers, not reproducers.
    found = []
    for p in sorted(root.iterdir()):
        if is_leftover_name(p.name):
            continue
        if (p / "capture").is_dir():
            found.append(p)
        elif is_set(p):
            found += _members(p)
    return found


def _members(set_dir: Path) -> list[Path]:
    return sorted((m for m in (set_dir / "members").glob("*") if (m / "capture").is_dir()),
                  key=lambda m: int(m.name) if m.name.isdigit() else -1)


def list_captures(root: str | Path = DEFAULT_WORKSPACE, extra: Sequence[str | Path] = (), *,
                  verify: bool = False) -> list[dict[str, Any]]:
    """One plain dict per reproducer under <root>/reproducers/ and under each of `extra`
    (a reproducer, or a directory of them), newest first. An unreadable capture is
    listed with its `error` instead of being skipped, so the user sees it."""
    seen: set[Path] = set()
    rows = []
    stale = []
    for base in [Workspace(Path(root)).reproducers_dir, *map(Path, extra)]:
        for repro in find_reproducers(base):
            if repro.resolve() not in seen:
                seen.add(repro.resolve())
                rows.append(describe_reproducer(repro, verify=verify))
        if base.is_dir() and not (base / "capture").is_dir():
            stale += [left for left in find_leftovers(base) if left.path.resolve() not in seen]
    rows.sort(key=lambda r: r.get("time") or "", reverse=True)
    for left in stale:  # named on rows of their own, with what to do
        seen.add(left.path.resolve())
        rows.append({"path": str(left.path), "kernel": None, "mangled": None, "command": None, "time": None,
                     "logical": None, "stored": None, "in_store": False, "validation": None, "variants": 0,
                     "payloads": None, "error": left.advice(), "leftover": True})
    return rows


def describe_reproducer(repro: Path, *, verify: bool = False) -> dict[str, Any]:
    """One row; a reproducer that cannot be read has `error`, one whose payloads are
    missing or damaged has `payloads` saying which (hashes too with `verify`)."""
    row: dict[str, Any] = {"path": str(repro), "kernel": None, "mangled": None, "command": None, "time": None,
                           "logical": None, "stored": None, "in_store": False, "validation": None, "variants": 0,
                           "payloads": None, "error": None}
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
        payloads = check_payloads(cap, verify=verify)
        row["payloads"] = "ok" if payloads.ok else payloads.summary()
    except KerncapError as exc:
        row["error"] = exc.message
    except OSError as exc:
        row["error"] = f"{repro}: {exc}"
    except Exception as exc:  # one broken reproducer must not hide the others' rows
        row["error"] = f"{type(exc).__name__}: {exc} (a kerncap bug: please report it)"
    row.update(history_summary(repro))  # the baseline's verdict in history.json, if any
    return row
