"""bench/overhead.py without a GPU: runs faked on a machine that flips between a fast
and a slow CPU state (as the H200 machines do, docs/facts.md §28; the calibration loop
slows more than the launch loop). The raw medians cannot see a 1 % cost; the table of
steady fast-state runs recovers it and counts the runs it leaves out; --from-json prints
the same tables again from the saved per-run values. And the test apps' calibration."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from bench_module import load_bench

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def overhead():
    return load_bench("overhead")


COST = {"plain": 1.0, "armed": 1.004, "profiling": 1.15}


def fake_machine(seed: int):
    rng = random.Random(seed)

    def run_once(mode, command, workdir):
        slow = rng.random() < 0.4  # the state this run landed in
        loop = 2.0 * (1.25 if slow else 1.0) * COST[mode] * rng.uniform(0.995, 1.005)
        change = rng.choice([1.0, 1.0, 1.0, 0.55])  # one run in four changes state mid-loop
        return {"wall": loop + 4.0, "loop": loop, "cpu": loop + 5.0, "cal": 0.0075 * (1.8 if slow else 1.0),
                "cal_change": change}

    return run_once


def run_bench(overhead, monkeypatch, argv):
    monkeypatch.setattr(sys, "argv", ["overhead.py"] + argv)
    overhead.main()


def test_steady_state_table_sees_through_speed_states(overhead, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(overhead, "run_once", fake_machine(1))
    out = tmp_path / "o.json"
    run_bench(overhead, monkeypatch, ["--repeat", "21", "--modes", "armed,profiling", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "steady fast-state runs only" in printed
    res = json.loads(out.read_text())["results"]
    for mode, cost in COST.items():
        r = res[mode]
        assert len(r["loop_s"]) == len(r["cal_s"]) == len(r["cal_change"]) == 21, "per-run values saved"
        assert 0 < r["steady_runs"] < 21
        assert r["loop_steady_ratio"] == pytest.approx(cost, abs=0.01)
    assert res["armed"]["met_steady"] is True and res["profiling"]["met_steady"] is False
    lo, hi = res["armed"]["loop_interval"]
    assert hi - lo > 0.1, "the raw medians straddle the two states"

    again = tmp_path / "again.json"
    run_bench(overhead, monkeypatch, ["--from-json", str(out), "--json", str(again)])
    tables = capsys.readouterr().out
    assert tables.replace(str(again), str(out)) == printed, "the saved per-run values give the same tables"
    assert json.loads(again.read_text())["results"]["armed"]["loop_steady_ratio"] == res["armed"]["loop_steady_ratio"]


def test_apps_without_a_calibration_get_only_the_raw_table(overhead, monkeypatch, capsys):
    run = fake_machine(2)

    def uncalibrated(mode, command, workdir):
        return {**run(mode, command, workdir), "cal": 0.0, "cal_change": 1.0}

    monkeypatch.setattr(overhead, "run_once", uncalibrated)
    monkeypatch.setattr(overhead, "build_testapps", lambda d: d)
    run_bench(overhead, monkeypatch, ["--app", "cuda", "--repeat", "3", "--modes", "armed"])
    printed = capsys.readouterr().out
    assert "armed" in printed and "steady" not in printed


def test_cpu_speed_ns_is_positive_and_makes_no_cuda_call(monkeypatch):
    sys.path.insert(0, str(REPO / "testapps" / "python"))
    try:
        import kc_testapp
    finally:
        sys.path.remove(str(REPO / "testapps" / "python"))
    assert "torch" not in kc_testapp.__dict__
    assert kc_testapp.cpu_speed_ns(reps=2, n=1000) > 0
