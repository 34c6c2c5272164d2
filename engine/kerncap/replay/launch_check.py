"""The check after every timed launch (docs/replay.md, "Guarantees").

A timing is a claim about a program that does the captured kernel's work. The replay core
follows every timed launch, outside the timed interval, with a GPU compare of what the
launch wrote against the expected state of the input it ran on (the captured post-state,
or the captured kernel's own output on a perturbed input): a launch that returned early,
wrote the wrong bytes or reused an earlier result is seen there. A timing with one such
launch is void: it is never reported as a speedup, and the launch is named.

The server answers `(input, differing)` per timed launch; this module turns those into a
`LaunchCheck` and its words. Inputs are numbered as the timing rotated over them: 0 is the
captured input, j the j-th perturbed one (the same perturbations `validate --perturb`
draws, from the same seed).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence


def input_name(j: int) -> str:
    return "the captured input" if j == 0 else f"perturbed input {j}"


@dataclass
class LaunchCheck:
    """What the check of one program's timed launches found."""

    checked: int = 0                 # timed launches checked
    inputs: int = 1                  # distinct inputs the launches rotated over
    # (round, launch within the round, input, differing bytes or elements) of each failing launch
    failures: list[tuple[int, int, int, int]] = field(default_factory=list)
    per_launch: int = 0              # launches per round (to number a failing one overall)

    @classmethod
    def from_rounds(cls, rounds: Sequence[Sequence[Sequence[int]]], inputs: int) -> "LaunchCheck":
        """From the server's per-round lists of `[input, differing]` (one per timed launch)."""
        failures = [(r, k, int(j), int(n)) for r, launches in enumerate(rounds)
                    for k, (j, n) in enumerate(launches) if n]
        per = max((len(x) for x in rounds), default=0)
        return cls(sum(len(x) for x in rounds), inputs, failures, per)

    @property
    def void(self) -> bool:
        return bool(self.failures)

    def first(self) -> str:
        """"launch 3 of round 2 (perturbed input 1): 4,096 bytes differ"."""
        r, k, j, n = self.failures[0]
        return f"launch {k + 1} of round {r + 1} ({input_name(j)}) left {n:,} byte(s) or element(s) unlike the " \
               "expected state"

    def text(self) -> str:
        on = f"{self.inputs} inputs" if self.inputs > 1 else "the captured input"
        if not self.checked:
            return "timed launches not checked"
        if not self.void:
            return f"all {self.checked} timed launches checked on {on}: each wrote the expected bytes"
        return f"VOID: {self.wrong()}"

    def wrong(self) -> str:
        """"3 of 50 timed launches did not produce the expected state; first: …"."""
        return (f"{len(self.failures)} of {self.checked} timed launches did not produce the expected state; "
                f"first: {self.first()}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["void"] = self.void
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "LaunchCheck | None":
        if not d:
            return None
        return cls(int(d.get("checked", 0)), int(d.get("inputs", 1)),
                   [tuple(int(x) for x in f) for f in d.get("failures", [])], int(d.get("per_launch", 0)))
