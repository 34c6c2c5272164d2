"""Shared by the Python test applications: the report file and the done marker.

The GPU tests need the device addresses of an app's tensors (they move on every run).
When KC_TESTAPP_REPORT names a file, an app writes them there as JSON *before* it
launches the target kernel, so the report exists even when the capturing process exits
right after the capture. When KC_TESTAPP_DONE names a file, the app creates it at its
normal end.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def write_report(**values) -> None:
    path = os.environ.get("KC_TESTAPP_REPORT")
    if not path:
        return
    out = {}
    for key, value in values.items():
        out[key] = value.data_ptr() if hasattr(value, "data_ptr") else value
    tmp = Path(path + ".tmp")
    tmp.write_text(json.dumps(out, indent=1, sort_keys=True))
    tmp.replace(path)


def cpu_speed_ns(reps: int = 5, n: int = 200_000) -> int:
    """Nanoseconds of a fixed pure-Python loop, the fastest of `reps` (~10 ms each): how
    fast this machine's CPU runs right now. The H200 machines switch between speed states
    ~30 % apart within seconds (docs/facts.md §28); bench/overhead.py divides each run's
    times by this, taken just before and after the app's timed loop. No CUDA call in it,
    so kerncap cannot change it."""
    best = None
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        acc = 0
        for i in range(n):
            acc += i & 7
        dt = time.perf_counter_ns() - t0
        best = dt if best is None else min(best, dt)
    return best


def mark_done() -> None:
    path = os.environ.get("KC_TESTAPP_DONE")
    if path:
        Path(path).touch()
