"""bench/overhead.py without a GPU: runs faked on a machine that flips between two CPU
speed states 33 % apart (as the H200 machines do, docs/facts.md §28). The raw medians
cannot see a 1 % cost; the calibrated table recovers it and leaves out the runs whose
speed changed during the loop. And the test apps' calibration itself."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def overhead():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        spec = importlib.util.spec_from_file_location("kerncap_bench_overhead", REPO / "bench" / "overhead.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "bench"))
    return module


COST = {"plain": 1.0, "armed": 1.01, "profiling": 1.15}


def fake_machine(seed: int):
    rng = random.Random(seed)

    def run_once(mode, command, workdir):
        speed = rng.choice([1.0, 1.33])  # the state this run landed in
        loop = 2.0 * speed * COST[mode] * rng.uniform(0.995, 1.005)
        change = rng.choice([1.0, 1.0, 1.0, 1.33])  # one run in four changes state mid-loop
        return {"wall": loop + 4.0 * speed, "loop": loop, "cpu": loop + 5.0 * speed, "cal": 0.01 * speed,
                "cal_change": change}

    return run_once


def test_calibrated_table_sees_through_speed_states(overhead, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(overhead, "run_once", fake_machine(1))
    out = tmp_path / "o.json"
    monkeypatch.setattr(sys, "argv", ["overhead.py", "--repeat", "15", "--modes", "armed,profiling", "--json", str(out)])
    overhead.main()
    printed = capsys.readouterr().out
    assert "divided by its CPU-speed calibration" in printed
    res = json.loads(out.read_text())["results"]
    for mode, cost in COST.items():
        r = res[mode]
        assert len(r["loop_cal_s"]) + r["switched"] == 15, "every run is kept or counted as left out"
        assert r["switched"] > 0
        assert r["loop_cal_ratio"] == pytest.approx(cost, abs=0.01)
    assert res["armed"]["met_calibrated"] is True
    lo, hi = res["armed"]["loop_interval"]
    assert hi - lo > 0.1, "the raw medians straddle the two states"


def test_apps_without_a_calibration_get_only_the_raw_table(overhead, monkeypatch, capsys):
    run = fake_machine(2)

    def uncalibrated(mode, command, workdir):
        return {**run(mode, command, workdir), "cal": 0.0, "cal_change": 1.0}

    monkeypatch.setattr(overhead, "run_once", uncalibrated)
    monkeypatch.setattr(sys, "argv", ["overhead.py", "--app", "cuda", "--repeat", "3", "--modes", "armed"])
    monkeypatch.setattr(overhead, "build_testapps", lambda d: d)
    overhead.main()
    printed = capsys.readouterr().out
    assert "armed" in printed and "calibration" not in printed


def test_cpu_speed_ns_is_positive_and_makes_no_cuda_call(monkeypatch):
    sys.path.insert(0, str(REPO / "testapps" / "python"))
    try:
        import kc_testapp
    finally:
        sys.path.remove(str(REPO / "testapps" / "python"))
    assert "torch" not in kc_testapp.__dict__
    assert kc_testapp.cpu_speed_ns(reps=2, n=1000) > 0
