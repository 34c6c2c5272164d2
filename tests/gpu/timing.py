"""Speedup checks that require a margin beyond the noise of the measurement itself."""

from __future__ import annotations

from pathlib import Path

MIN_GAIN = 0.02  # a variant must be at least 2 % faster, and more than twice the noise


def assert_faster(rc, base: Path | None, fast: Path, *, rounds: int = 3, iterations: int = 50,
                  label: str = "") -> float:
    """Interleave `rounds` replays of each cubin in one replay server; the noise is the
    spread of each cubin's own medians across rounds. The edit must gain more than
    max(MIN_GAIN, 2 x noise) over the best baseline median. Returns the speedup."""
    medians: dict[str, list[float]] = {"base": [], "fast": []}
    for _ in range(rounds):
        for name, cubin in (("base", base), ("fast", fast)):
            medians[name].append(rc.replay(cubin=cubin, iterations=iterations, warmup=5).median_ms)
    noise = max((max(m) - min(m)) / min(m) for m in medians.values())
    b, f = min(medians["base"]), min(medians["fast"])
    gain = 1 - f / b
    need = max(MIN_GAIN, 2 * noise)
    print(f"{label}: base {b * 1e3:.2f} us, edited {f * 1e3:.2f} us ({b / f:.2f}x, gain {gain:.1%}); "
          f"noise {noise:.1%} over {rounds} interleaved rounds, margin needed {need:.1%}; medians {medians}")
    assert gain > need, (f"{label}: the edit gains {gain:.1%}, within the noise (needs > {need:.1%}): "
                         f"medians {medians}")
    return b / f
