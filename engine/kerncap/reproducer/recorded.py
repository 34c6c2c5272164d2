"""The variants the workbench recorded in a reproducer's `history.json` (written by
kerncap_tui.history: one entry per build, id 0 the captured cubin, each with its
median, validation verdict and cubin path relative to the reproducer), read for
`kerncap check`, which re-validates and re-times the best of them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kerncap.errors import CaptureFormatError

HISTORY_FILE = "history.json"


@dataclass(frozen=True)
class RecordedVariant:
    id: int                  # 0: the captured cubin
    cubin: str | None        # relative to the reproducer; None for the captured cubin
    median_ms: float | None  # as the workbench measured it
    validation: str          # pass | fail | error | skipped
    note: str = ""

    @property
    def label(self) -> str:
        return "baseline" if self.id == 0 else f"v{self.id}"


def recorded_variants(reproducer: str | Path) -> list[RecordedVariant]:
    """Every variant of `<reproducer>/history.json` (none when the file is absent)."""
    path = Path(reproducer) / HISTORY_FILE
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text())
        entries = data.get("variants") or []
        out = []
        for v in entries:
            median = v.get("median_ms")
            out.append(RecordedVariant(id=int(v["id"]), cubin=v.get("cubin") or None,
                                       median_ms=float(median) if isinstance(median, (int, float)) else None,
                                       validation=str(v.get("validation") or "skipped"), note=str(v.get("note") or "")))
        return out
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CaptureFormatError(f"{path} is unreadable ({type(exc).__name__}: {exc})",
                                 "move it away to check the reproducer without its variant history") from None


def best_variant(reproducer: str | Path) -> RecordedVariant | None:
    """The fastest recorded variant (not the captured cubin) that passed validation and
    whose cubin is still there; None when there is none."""
    root = Path(reproducer)
    passing = [v for v in recorded_variants(root)
               if v.id != 0 and v.validation == "pass" and v.median_ms is not None and _inside(root, v.cubin)]
    return min(passing, key=lambda v: (v.median_ms, v.id), default=None)


def _inside(root: Path, cubin: str | None) -> bool:
    """A recorded cubin that exists inside the reproducer (history.json travels with
    shared reproducers: a path out of it is not followed)."""
    if not cubin:
        return False
    path = (root / cubin).resolve()
    return path.is_file() and path.is_relative_to(root.resolve())
