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
from kerncap.reproducer.record import read_record
from kerncap.reproducer.sets import is_set
from kerncap.reproducer.workspace import DEFAULT_WORKSPACE, Workspace


def find_reproducers(root: Path) -> list[Path]:
    """Reproducer directories (holding capture/) at or one level under `root`; a
    reproducer set (kerncap.reproducer.sets) there, or `root` itself, contributes its members."""
    root = Path(root)
    if _holds_capture(root):
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
        if _holds_capture(p):
            found.append(p)
        else:
            try:
                if is_set(p):
                    found += _members(p)
            except OSError:
                found.append(p)  # cannot be looked into: its row says why
    return found


def _holds_capture(p: Path) -> bool:
    """p holds capture/, or cannot be looked into (then its row names the error)."""
    try:
        return (p / "capture").is_dir()
    except OSError:
        return p.is_dir() if not p.is_symlink() else True


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
        try:
            found = find_reproducers(base)
        except OSError as exc:  # the directory itself cannot be read: one row says so
            found = []
            rows.append(_row(base) | {"error": f"cannot read {base} ({exc.strerror or exc})"})
        for repro in found:
            if repro.resolve() not in seen:
                seen.add(repro.resolve())
                rows.append(describe_reproducer(repro, verify=verify))
        if base.is_dir() and not _holds_capture(base):
            stale += [left for left in find_leftovers(base) if left.path.resolve() not in seen]
    rows.sort(key=lambda r: r.get("time") or "", reverse=True)
    for left in stale:  # named on rows of their own, with what to do
        seen.add(left.path.resolve())
        rows.append(_row(left.path) | {"error": left.advice(), "leftover": True})
    return rows


def _row(path: Path) -> dict[str, Any]:
    return {"path": str(path), "kernel": None, "mangled": None, "command": None, "time": None, "logical": None,
            "stored": None, "in_store": False, "validation": None, "variants": 0, "payloads": None, "error": None,
            "sequence": None, "problems": []}


def describe_reproducer(repro: Path, *, verify: bool = False) -> dict[str, Any]:
    """One row; a reproducer that cannot be read has `error`, one whose payloads are
    missing or damaged has `payloads` saying which (hashes too with `verify`)."""
    row = _row(repro)
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
        seq = cap.sequence
        if seq is not None:  # docs/sequences.md: its first launch's kernel stands in the manifest
            row.update(kernel=f"sequence ({seq.mode}): {len(seq.launches)} launches of {len(seq.kernels)} kernels",
                       sequence={"mode": seq.mode, "launches": len(seq.launches), "kernels": len(seq.kernels),
                                 "streams": len(seq.streams), "steps": len(seq.steps)})
        payloads = check_payloads(cap, verify=verify)
        row["payloads"] = "ok" if payloads.ok else payloads.summary()
    except KerncapError as exc:
        row["error"] = exc.message
    except OSError as exc:
        row["error"] = f"cannot read {exc.filename or repro} ({exc.strerror or exc})"
    except Exception as exc:  # one broken reproducer must not hide the others' rows
        row["error"] = f"{type(exc).__name__}: {exc} (a kerncap bug: please report it)"
    if row["error"] is None:
        history = history_summary(repro)  # the baseline's verdict in history.json, if any
        problems = [history.pop("problem")] if "problem" in history else []
        try:
            read_record(repro)
        except KerncapError as exc:  # the capture reads, its record does not: listed, and said (exit 3)
            problems.insert(0, exc.message + (f"; {exc.hint}" if exc.hint else ""))
        row.update(history, problems=problems)
    return row
