"""Timing in the GPU tests is printed, never asserted on: bench/speedups.py judges the
speedups and the rates of significant verdicts against baselines measured in the same
run. What the tests assert is that a comparison ran the programs it was asked to,
interleaved, every round, each variant with an interval around its speedup."""

from __future__ import annotations

from pathlib import Path

ROUNDS = 6
ITERATIONS = 20


def check_comparison(c, cubins, rounds: int) -> None:
    assert c.baseline.cubin is None and [p.cubin for p in c.variants] == [str(Path(x).resolve()) for x in cubins]
    for p in c.programs:
        assert len(p.rounds) == rounds and min(p.times) > 0, p.label
    for p in c.variants:
        assert p.interval is not None and p.interval.low <= p.interval.speedup <= p.interval.high, (p.label, p.interval)


def print_comparison(rc, cubins: list[Path], *, label: str = ""):
    """The captured cubin and `cubins` timed in one replay server, printed and checked."""
    from kerncap.replay.significance import format_comparison

    c = rc.compare_timing(list(cubins), rounds=ROUNDS, iterations=ITERATIONS)
    print(f"{label}:\n{format_comparison(c)}")
    check_comparison(c, cubins, ROUNDS)
    for p in c.programs:
        assert all(len(r) == ITERATIONS for r in p.rounds), p.label
    return c
