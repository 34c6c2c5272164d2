"""bench/apply_cost.py's arithmetic (the GPU part runs on the H200: docs/facts.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench_module import load_bench


def test_per_launch_leaves_out_the_first_block_and_takes_the_median():
    b = load_bench("apply_cost")
    text = "switch=absent\nblock=0 mode=n wall_ns=9 cpu_ns=99999\nblock=1 mode=n wall_ns=9 cpu_ns=2048\n" \
           "block=2 mode=n wall_ns=9 cpu_ns=4096\nblock=3 mode=n wall_ns=9 cpu_ns=3072\nlaunch_paired: done\n"
    assert b.per_launch(text, 1024) == 3.0


def test_rounds_alternate_the_order_of_the_ways():
    b = load_bench("apply_cost")
    assert b.order(3) == [b.WAYS, tuple(reversed(b.WAYS)), b.WAYS]


def test_costs_are_differences_from_the_armed_path():
    b = load_bench("apply_cost")
    samples = {"armed": [1000.0, 1010.0, 990.0, 1005.0], "substituted": [1050.0, 1060.0, 1040.0, 1055.0],
               "armed+check": [1100.0, 1110.0, 1090.0, 1105.0], "checked": [1200.0, 1210.0, 1190.0, 1205.0]}
    c = b.costs(samples)
    assert c["armed"]["per_launch_ns"] == 1002.5 and "added_ns" not in c["armed"]
    assert c["substituted"]["added_ns"] == 50.0 and c["substituted"]["low"] <= 50.0 <= c["substituted"]["high"]
    assert c["checked"]["added_ns"] == 200.0 and c["armed+check"]["added_ns"] == 100.0


def test_the_output_of_a_checked_apply_splits_into_its_two_runs():
    b = load_bench("apply_cost")
    one = "switch=absent\narmed=full\nblock=0 mode=n wall_ns=1 cpu_ns=10\nlaunch_paired: kernel\n"
    two = one.replace("cpu_ns=10", "cpu_ns=20")
    assert b.split_runs("noise\n" + one + two) == [one, two]


def test_apply_speedup_prints_a_speedup_with_its_interval_or_says_none():
    b = load_bench("apply_speedup")
    assert b.interval({"speedup": 1.0941, "low": 1.0921, "high": 1.0972}) == "1.094x [1.092-1.097]"
    assert b.interval({"speedup": 1.2, "low": None, "high": None}) == "1.200x"
    assert b.interval(None) == "n/a" and b.interval({"speedup": None}) == "n/a"


def test_apply_speedup_finds_the_launch_floor_and_replays_warm_under_cupti(monkeypatch, tmp_path):
    """The floor is read wherever the compare document holds it; the replay under CUPTI
    gets --warm-l2 only when asked (a plain replay times the cold, captured input alone)."""
    b = load_bench("apply_speedup")
    assert b.found("floor_ms", {"comparison": {"programs": [], "floor_ms": 0.0027}}) == 0.0027
    assert b.found("floor_ms", [{"x": 1}, {"y": {"floor_ms": 2}}]) == 2 and b.found("floor_ms", {"a": 1}) is None
    seen = []

    def fake(*args):
        seen.append(args)
        out = Path(args[args.index("--output") + 1])
        out.write_text('{"kernels": [{"name": "k", "total_ns": 1000, "calls": 10}]}')
        return 0, {}, 0.0

    monkeypatch.setattr(b, "kerncap", fake)
    assert b.replay_under_cupti(tmp_path, "k", None, 10, warm=True) == 100.0
    assert b.replay_under_cupti(tmp_path, "k", tmp_path / "v.cubin", 10, warm=False) == 100.0
    assert "--warm-l2" in seen[0] and "--warm-l2" not in seen[1] and "--cubin" in seen[1]


def test_apply_speedup_runs_the_app_in_the_modes_asked_and_refuses_the_rest(monkeypatch, capsys):
    """--idle and --no-memset reach smooth as its modes after the launch count (facts §52);
    a negative idle or a mode for the Triton app is refused before anything runs."""
    b = load_bench("apply_speedup")

    def parsed(*argv):
        monkeypatch.setattr(sys, "argv", ["apply_speedup.py", *argv])
        return b.parse_args()

    app = ["/b/smooth", "4194304"]
    assert b.applied(app, parsed()) == app
    assert b.applied(app, parsed("--launches", "50")) == [*app, "50"]
    assert b.applied(app, parsed("--idle", "0", "--no-memset")) == [*app, "5", "idle=0", "nomemset"]
    assert b.applied(app, parsed("--alloc", "vmm", "--idle", "20")) == [*app, "5", "vmm", "idle=20"]
    for argv, says in ((["--idle", "-1"], "0 or more"), (["--app", "triton", "--no-memset"], "the CUDA app's")):
        with pytest.raises(SystemExit):
            parsed(*argv)
        assert says in capsys.readouterr().err


def test_apply_speedup_per_launch_time_is_the_median_over_runs():
    b = load_bench("apply_speedup")
    timing = {"kernel_ms": [[8.6, 8.7, 8.8], [7.6, 7.5, 7.7]], "kernel_calls": [[100, 100, 100], [100, 100, 100]]}
    assert b.per_launch_us(timing) == pytest.approx((87.0, 76.0))
    assert b.per_launch_us({"kernel_ms": [[], []], "kernel_calls": [[], []]}) is None and b.per_launch_us({}) is None
