"""What `kerncap prune` (and `extract --prune`) did, as an object, a one-line summary
and the JSON record kept in reproducer.json under "prune". No numpy here: `kerncap info`
renders the record without loading the closure code."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kerncap import __version__
from kerncap.core.units import human_bytes


def by_reason_text(by_reason: dict[str, Any]) -> str:
    """"kept for arguments: 5 regions (20.0 MiB); memory operations: 1 (4.0 MiB)": what the
    closure kept per kind of reason (kerncap.prune.roots.KINDS), logical bytes; "" when a
    record predates the tally."""
    parts = []
    for kind, t in by_reason.items():
        t = t if isinstance(t, dict) else {}
        n, size = int(t.get("regions", 0)), human_bytes(int(t.get("logical", 0)))
        parts.append(f"{kind}: {n}{' regions' if not parts else ''} ({size})")
    return "kept for " + "; ".join(parts) if parts else ""


@dataclass
class PruneReport:
    path: Path                      # the reproducer that was pruned
    kept: str                       # "pruned" | "full"
    reason: str                     # why the full reproducer was kept ("" when pruned)
    regions_full: int
    regions_pruned: int             # the closure's regions (also when the full reproducer was kept)
    logical_full: int               # sum of region sizes
    logical_pruned: int
    stored_full: int                # bytes of the distinct non-null chunks
    stored_pruned: int
    seconds: dict[str, float] = field(default_factory=lambda: {"closure": 0.0, "write": 0.0, "validate": 0.0})
    validated: bool = False         # the pruned reproducer replayed byte-exact against the capture
    output: Path | None = None      # where the pruned reproducer is (the original path once swapped in)
    reasons: dict[int, str] = field(default_factory=dict)  # region id -> why the closure holds it
    # kind of reason (kerncap.prune.roots.KINDS) -> {"regions": n, "logical": bytes} of the closure
    by_reason: dict[str, dict[str, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    time: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    @property
    def ratio(self) -> float:
        """stored_full / stored_pruned: how many times smaller the pruned payload is."""
        if self.stored_pruned:
            return self.stored_full / self.stored_pruned
        return 1.0 if not self.stored_full else math.inf

    def _sizes(self) -> str:
        smaller = "nothing left to store" if math.isinf(self.ratio) else f"{self.ratio:.1f}x smaller"
        return (f"{self.regions_full} -> {self.regions_pruned} regions "
                f"({human_bytes(self.logical_full)} -> {human_bytes(self.logical_pruned)} logical), "
                f"{human_bytes(self.stored_full)} -> {human_bytes(self.stored_pruned)} stored ({smaller})")

    def summary(self) -> str:
        if self.kept != "pruned":
            return (f"kept the full reproducer ({self.regions_full} regions, {human_bytes(self.stored_full)} "
                    f"stored): {self.reason}")
        if self.validated:
            return f"pruned {self._sizes()}, validated byte-exact in {self.seconds.get('validate', 0.0):.1f} s"
        return (f"pruned {self._sizes()} into {self.output}; NOT validated: run `kerncap validate {self.output}` "
                "on a GPU before relying on it")

    def by_reason_text(self) -> str:
        return by_reason_text(self.by_reason)

    def to_json(self) -> dict[str, Any]:
        ratio = self.ratio
        return {
            "kept": self.kept, "reason": self.reason, "validated": self.validated,
            "regions_full": self.regions_full, "regions_pruned": self.regions_pruned,
            "logical_full": self.logical_full, "logical_pruned": self.logical_pruned,
            "stored_full": self.stored_full, "stored_pruned": self.stored_pruned,
            "ratio": "inf" if math.isinf(ratio) else round(ratio, 3),
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "output": str(self.output) if self.output is not None else None,
            "reasons": {str(k): v for k, v in sorted(self.reasons.items())},
            "by_reason": {k: dict(v) for k, v in self.by_reason.items()},
            "notes": list(self.notes), "time": self.time, "tool_version": __version__,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any], path: str | Path = "") -> "PruneReport":
        """The report of a reproducer.json "prune" record (for `kerncap info`)."""
        return cls(
            path=Path(path), kept=d.get("kept", "?"), reason=d.get("reason", ""),
            regions_full=int(d.get("regions_full", 0)), regions_pruned=int(d.get("regions_pruned", 0)),
            logical_full=int(d.get("logical_full", 0)), logical_pruned=int(d.get("logical_pruned", 0)),
            stored_full=int(d.get("stored_full", 0)), stored_pruned=int(d.get("stored_pruned", 0)),
            seconds={k: float(v) for k, v in (d.get("seconds") or {}).items()},
            validated=bool(d.get("validated")), output=Path(d["output"]) if d.get("output") else None,
            reasons={int(k): v for k, v in (d.get("reasons") or {}).items()},
            by_reason={str(k): {"regions": int(v.get("regions", 0)), "logical": int(v.get("logical", 0))}
                       for k, v in (d.get("by_reason") or {}).items() if isinstance(v, dict)},
            notes=list(d.get("notes") or []), time=d.get("time", ""),
        )
