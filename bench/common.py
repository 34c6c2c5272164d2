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


def ratio_interval(values: list[float], base: list[float], *, draws: int = 2000, seed: int = 0,
                   coverage: float = 0.90) -> tuple[float, float]:
    """Bootstrap interval of median(values) / median(base): both sides resampled with
    replacement `draws` times (seeded, so a rerun on the same numbers prints the same)."""
    import random

    rng = random.Random(seed)
    ratios = sorted(statistics.median(rng.choices(values, k=len(values)))
                    / statistics.median(rng.choices(base, k=len(base))) for _ in range(draws))
    tail = (1 - coverage) / 2
    return ratios[int(tail * (draws - 1))], ratios[int((1 - tail) * (draws - 1))]


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
