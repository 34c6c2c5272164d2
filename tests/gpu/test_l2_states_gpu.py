"""The L2 state a timed launch starts from (docs/replay.md, "The L2 before each launch"):
--flush-l2 (cold), the default (as the restores leave it) and --warm-l2 (the kernel's
memory read just before, as an app that has just produced it leaves it). axpy_inplace over
2 Mi floats (16 MiB, inside the L2) is memory-bound, so a warm L2 must time clearly
faster than a flushed one; every launch is still checked, and a comparison carries the
state into its document and text."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .apps import AppSpec, app_env

pytestmark = pytest.mark.gpu

SMALL_AXPY = AppSpec("axpy_inplace", "axpy_inplace", writes=("y",), reads=("x",), args=(str(1 << 21),))


@pytest.fixture(scope="module")
def small_axpy(testapps_build, tmp_path_factory):
    from kerncap.capture.extract import extract

    work = tmp_path_factory.mktemp("small_axpy")
    result = extract(SMALL_AXPY.kernel, SMALL_AXPY.command(testapps_build), output=work / "reproducer",
                     timeout=SMALL_AXPY.timeout, env=app_env(SMALL_AXPY, work))
    return result.reproducer_dir


def test_a_warm_l2_times_a_memory_bound_kernel_faster_than_a_flushed_one(small_axpy):
    from kerncap.replay.client import ReplayClient

    with ReplayClient(small_axpy) as rc:
        runs = {name: rc.replay(iterations=50, warmup=5, **kw)
                for name, kw in (("flushed", {"flush_l2": True}), ("default", {}), ("warm", {"warm_l2": True}))}
    for name, r in runs.items():
        print(f"{name}: median {r.median_ms * 1000:.2f} us, spread {r.spread_pct:.1f} %, check {r.check}")
        assert r.check and not r.check.get("void"), (name, r.check)
    assert runs["warm"].warm_l2 and not runs["warm"].flush_l2 and runs["flushed"].flush_l2
    assert runs["warm"].median_ms < 0.85 * runs["flushed"].median_ms


def test_compare_with_a_warm_l2_checks_every_launch_and_says_so(small_axpy, variant_cubins):
    proc = subprocess.run([sys.executable, "-m", "kerncap", "replay", str(small_axpy), "--compare",
                           str(variant_cubins / "axpy_fast.cubin"), "--rounds", "5", "--warm-l2", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["warm_l2"] is True and doc["flush_l2"] is False
    assert all(not p["void"] and p["check"]["checked"] for p in doc["programs"]), doc["programs"]
    assert doc["programs"][1]["interval"]["speedup"] > 0
    both = subprocess.run([sys.executable, "-m", "kerncap", "replay", str(small_axpy), "--flush-l2", "--warm-l2"],
                          capture_output=True, text=True, timeout=120)
    assert both.returncode == 2 and "opposite L2 states" in both.stderr and "Traceback" not in both.stderr
