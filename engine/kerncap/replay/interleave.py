"""Timing several cubins of one reproducer against each other on one resident replay
server: `rounds` rounds, each replaying every candidate for `iterations` launches in
turn, so that a drift of the GPU's clocks or of the machine touches all of them alike.
Each candidate's median is over all its launches; the ratio is against the first
candidate (normally the captured cubin)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kerncap.replay.client import ReplayClient
from kerncap.replay.results import percentile


@dataclass
class Timed:
    cubin: str | None          # None: the captured cubin
    median_ms: float
    min_ms: float
    spread_pct: float          # (p90 - p10) / median over all launches
    launches: int
    speedup: float | None = None  # first candidate's median / this median

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Comparison:
    candidates: list[Timed]
    rounds: int
    iterations: int
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "iterations": self.iterations, "notes": self.notes,
                "candidates": [c.to_dict() for c in self.candidates]}


def compare(client: ReplayClient, cubins: list[str | Path | None], *, iterations: int = 20, rounds: int = 5,
            warmup: int = 3, flush_l2: bool = False) -> Comparison:
    """Interleaved timing of `cubins` (None stands for the captured cubin)."""
    if not cubins:
        raise ValueError("nothing to compare")
    times: list[list[float]] = [[] for _ in cubins]
    notes: list[str] = []
    for _ in range(rounds):
        for i, cubin in enumerate(cubins):
            r = client.replay(cubin=cubin, iterations=iterations, warmup=warmup, flush_l2=flush_l2)
            times[i] += r.times_ms
            notes += [n for n in r.notes if n not in notes]
    out = []
    for cubin, t in zip(cubins, times):
        median = percentile(t, 50)
        spread = (percentile(t, 90) - percentile(t, 10)) / median * 100 if median > 0 else 0.0
        out.append(Timed(cubin=None if cubin is None else str(cubin), median_ms=median, min_ms=min(t),
                         spread_pct=spread, launches=len(t)))
    first = out[0].median_ms
    for c in out:
        c.speedup = first / c.median_ms if c.median_ms > 0 else None
    return Comparison(candidates=out, rounds=rounds, iterations=iterations, notes=notes)
