"""Helpers shared by the bench scripts (not a test module; pytest never collects bench/)."""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTAPPS = REPO / "testapps"
PYAPPS = TESTAPPS / "python"

if importlib.util.find_spec("kerncap") is None:  # prefer the installed package: it has the native parts
    sys.path.insert(0, str(REPO / "engine"))


def build_testapps(build_dir: Path) -> Path:
    """Configure and build testapps/ into `build_dir` (incremental); exits with the log on failure."""
    for step in (
        ["cmake", "-S", str(TESTAPPS), "-B", str(build_dir), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"],
        ["ninja", "-C", str(build_dir)],
    ):
        proc = subprocess.run(step, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"building the test apps failed: {' '.join(step)}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return build_dir


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def median(values: list[float]) -> float:
    return statistics.median(values)


def bootstrap(statistic, *samples: list[float], draws: int = 2000, seed: int = 0,
              coverage: float = 0.90) -> tuple[float, float]:
    """Bootstrap interval of statistic(*samples): each sample resampled with replacement
    `draws` times (seeded, so a rerun on the same numbers prints the same)."""
    import random

    rng = random.Random(seed)
    values = sorted(statistic(*(rng.choices(x, k=len(x)) for x in samples)) for _ in range(draws))
    tail = (1 - coverage) / 2
    return values[int(tail * (draws - 1))], values[int((1 - tail) * (draws - 1))]


def ratio_interval(values: list[float], base: list[float], **kw) -> tuple[float, float]:
    """Bootstrap interval of median(values) / median(base), both sides resampled."""
    return bootstrap(lambda v, b: statistics.median(v) / statistics.median(b), values, base, **kw)


def diff_interval(values: list[float], base: list[float], **kw) -> tuple[float, float]:
    """Bootstrap interval of median(values) - median(base), both sides resampled."""
    return bootstrap(lambda v, b: statistics.median(v) - statistics.median(b), values, base, **kw)


def median_interval(values: list[float], **kw) -> tuple[float, float]:
    """Bootstrap interval of the median of `values`."""
    return bootstrap(statistics.median, values, **kw)


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*headers))
    print(line.format(*("-" * w for w in widths)))
    for row in rows:
        print(line.format(*row))


def write_json(path: str | None, data: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {path}")


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


ABBA = "appa"  # the paired measure's block order, repeated: armed, pass-through, pass-through, armed


def abba_order(n_blocks: int) -> str:
    """Modes of `n_blocks` blocks in the paired measure's order ('a' armed, 'p' pass-through)."""
    return "".join(ABBA[i % 4] for i in range(n_blocks))


def paired_cost(blocks: list[tuple[str, float]], per_block: int, *, skip: int = 1, draws: int = 2000, seed: int = 0,
                coverage: float = 0.90) -> dict:
    """The dispatcher's cost per launch from one process's paired blocks.

    `blocks` are (mode, seconds-or-ns) in run order, modes in ABBA order (abba_order):
    each group of four (a p p a) gives one estimate, the mean of its two adjacent
    differences a - p, in which a linear drift of the machine's speed cancels. Returns
    the median of those estimates per launch (same unit as the values, / `per_block`),
    its bootstrap interval over the groups (median_interval), the per-group estimates,
    the median ratio a / p, the medians of each mode per launch and the number of groups.
    The first `skip` groups are dropped (warm-up: caches, the driver's first launches)."""
    modes = "".join(m for m, _ in blocks)
    if modes != abba_order(len(blocks)):
        raise ValueError(f"blocks are not in ABBA order: {modes[:16]}...")
    groups = [blocks[i:i + 4] for i in range(0, len(blocks) - 3, 4)][skip:]
    if not groups:
        raise ValueError(f"{len(blocks)} blocks make no complete a-p-p-a group after skipping {skip}")
    est = [((g[0][1] - g[1][1]) + (g[3][1] - g[2][1])) / 2 / per_block for g in groups]
    ratios = [(g[0][1] + g[3][1]) / (g[1][1] + g[2][1]) for g in groups]
    return {
        "per_launch": statistics.median(est),
        "interval": median_interval(est, draws=draws, seed=seed, coverage=coverage),
        "estimates": est,
        "ratio": statistics.median(ratios),
        "armed_per_launch": statistics.median([v for g in groups for m, v in g if m == "a"]) / per_block,
        "passthrough_per_launch": statistics.median([v for g in groups for m, v in g if m == "p"]) / per_block,
        "groups": len(groups),
    }


def parse_blocks(text: str, key: str = "cpu_ns") -> list[tuple[str, float]]:
    """The `block=<i> mode=<a|p> ... <key>=<n>` lines a paired app prints, in order."""
    out = []
    for line in text.splitlines():
        if not line.startswith("block="):
            continue
        fields = dict(f.split("=", 1) for f in line.split())
        out.append((fields["mode"], float(fields[key])))
    return out

