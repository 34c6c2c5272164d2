"""bench/scale.py without a GPU: its defaults, disk planning and refusal, the size
accounting, the figures table, and the order of its steps (the first capture is gone
before the second is made; nothing is left behind), with the GPU steps faked."""

from __future__ import annotations

import ast
import json
import os
from collections import namedtuple
from pathlib import Path

import pytest

from bench_module import load_bench

REPO = Path(__file__).resolve().parents[1]
GB = 1e9


@pytest.fixture(scope="module")
def scale():
    return load_bench("scale")


def app_defaults() -> dict[str, object]:
    """The argparse defaults of testapps/python/moe_scale.py (it imports torch: read, not run)."""
    tree = ast.parse((REPO / "testapps" / "python" / "moe_scale.py").read_text())
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flag = node.args[0].value
            for kw in node.keywords:
                if kw.arg == "default":
                    out[flag.lstrip("-").replace("-", "_")] = ast.literal_eval(kw.value)
    return out


def test_defaults_match_the_app_and_hold_20_to_24_gb(scale):
    args = scale.parse_args([])
    app = app_defaults()
    for key in ("layers", "experts", "d_model", "d_ff", "tokens"):
        assert getattr(args, key) == app[key], f"--{key}: bench {getattr(args, key)}, app {app[key]}"
    weights = scale.weight_bytes(args.layers, args.experts, args.d_model, args.d_ff)
    assert 20 * GB <= weights <= 24 * GB
    assert scale.disk_plan(weights)["peak"] <= scale.GOAL_PEAK_GB * GB


def test_app_command_passes_the_model_through(scale):
    args = scale.parse_args(["--layers", "2", "--experts", "4", "--d-model", "256", "--d-ff", "512", "--tokens", "64"])
    cmd = scale.app_command(args)
    assert cmd[1].endswith("moe_scale.py")
    assert cmd[2:] == ["--layers", "2", "--experts", "4", "--d-model", "256", "--d-ff", "512", "--tokens", "64"]
    assert scale.app_command(args, layers=1)[2:4] == ["--layers", "1"]


def test_refusal_names_the_numbers_and_the_ways_out(scale):
    plan = scale.disk_plan(scale.weight_bytes(24, 8, 4096, 7168))
    assert scale.refusal(int(plan["need"]) + 1, plan, Path("/data")) is None
    message = scale.refusal(30 * 10**9, plan, Path("/data"))
    assert "30.0 GB free under /data" in message and f"{plan['need'] / GB:.1f} GB" in message
    assert "--ignore-disk-check" in message and "--layers" in message and "--dir" in message


def test_dir_sizes_counts_hard_links_once(scale, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(b"1" * 10000)
    os.link(tmp_path / "a" / "x.bin", tmp_path / "y.bin")
    (tmp_path / "z.txt").write_text("abc")
    sizes = scale.dir_sizes(tmp_path)
    assert sizes["apparent"] == 10003 and sizes["files"] == 2
    assert sizes["du"] >= 10000


FULL_RESULTS = {
    "weights_bytes": 22.5 * GB,
    "plain": {"wall_s": 14.0, "to_dispatch_s": 10.0},
    "first": {"wall_s": 22.0, "to_dispatch_s": 11.0, "capture_seconds": {"pre": 6.0, "post": 3.0, "total": 9.0},
              "disk": {"du": 22.6 * GB, "apparent": 22.6 * GB}, "bytes": {"logical": 23 * GB, "stored": 22.6 * GB},
              "regions": 80},
    "prune": {"kept": "pruned", "ratio": 40.0, "stored_full": 22.6 * GB, "stored_pruned": 0.56 * GB,
              "validated": True, "seconds": {"closure": 0.5, "write": 1.0, "validate": 3.0}},
    "store_first": {"bytes": 18 * GB}, "second": {"wall_s": 21.0}, "store_second": {"bytes": 0.1 * GB},
    "disk": {"peak_bytes": 41 * GB},
}


def goal_rows(rows):
    return {r[0]: r for r in rows if r[2]}


def test_figures_all_goals_met(scale):
    rows = goal_rows(scale.figures(FULL_RESULTS))
    assert len(rows) == 6
    assert all(r[3] == "ok" for r in rows.values()), rows
    assert rows["extract overhead (wall - plain to dispatch)"][1] == "12.0 s"
    assert rows["store: second / first"][1] == "0.56 %"


def test_figures_missing_or_failing_steps_are_missed(scale):
    missing = {"weights_bytes": 1.9 * GB, "prune": {"error": "kerncap.prune.pruner is not part of this kerncap build"}}
    rows = goal_rows(scale.figures(missing))
    assert all(r[3] == "MISSED" for r in rows.values()), rows
    assert rows["prune"][1].startswith("kerncap.prune.pruner is not")
    kept_full = dict(FULL_RESULTS, prune={**FULL_RESULTS["prune"], "kept": "full"})
    rows = scale.figures(kept_full)
    assert goal_rows(rows)["prune: stored full / pruned"][3] == "MISSED"
    assert goal_rows(rows)["pruned reproducer validates byte-exact"][3] == "MISSED"
    assert [r[1] for r in rows if r[0] == "prune kept"] == ["full: no reason given"]
    nothing_left = dict(FULL_RESULTS, prune={**FULL_RESULTS["prune"], "ratio": "inf"})
    assert goal_rows(scale.figures(nothing_left))["prune: stored full / pruned"][1].startswith("infx")


@pytest.fixture
def fake_steps(scale, monkeypatch):
    """The GPU steps replaced: extract writes a directory, the rest record the order."""
    calls = []
    report = {"target_kernel": "moe_scale_expert_ffn", "target_dispatch": 46, "second_kernel": "silu",
              "second_dispatch": 23}

    def run_plain(command, workdir, label, timeout):
        calls.append(("plain", label, command[3]))
        return {"wall_s": 1.0, "to_weights_s": 0.5, "to_dispatch_s": 0.8, "to_forward_s": 0.9, "report": report}

    def run_extract(kernel, dispatch, command, output, workdir, label, timeout):
        calls.append(("extract", label, kernel, dispatch, sorted(p.name for p in workdir.iterdir())))
        (output / "capture").mkdir(parents=True)
        (output / "capture" / "blob.bin").write_bytes(b"x" * 4096)
        return {"wall_s": 2.0, "pattern": kernel, "dispatch": dispatch, "disk": scale.dir_sizes(output)}

    def add_to_store(store, reproducer):
        calls.append(("store", reproducer.name))
        return {"objects": 1, "bytes": 100 if reproducer.name == "first" else 2, "seconds": 0.0}

    def run_prune(reproducer):
        calls.append(("prune", reproducer.name))
        return {"kept": "pruned", "ratio": 20.0, "validated": True}

    for name, fn in (("run_plain", run_plain), ("run_extract", run_extract), ("add_to_store", add_to_store),
                     ("run_prune", run_prune)):
        monkeypatch.setattr(scale, name, fn)
    return calls


def test_steps_delete_the_first_capture_before_the_second_and_clean_up(scale, fake_steps, tmp_path, capsys):
    out = tmp_path / "scale.json"
    scale.main(["--layers", "2", "--dir", str(tmp_path / "work"), "--json", str(out)])
    kinds = [c[:2] for c in fake_steps]
    assert kinds == [("plain", "warmup"), ("plain", "plain"), ("extract", "first"), ("store", "first"),
                     ("prune", "first"), ("extract", "second"), ("store", "second")]
    assert fake_steps[0][2] == "1" and fake_steps[1][2] == "2", "warm-up with one layer, then the asked size"
    assert fake_steps[2][2:4] == ("moe_scale_expert_ffn", 46) and fake_steps[5][2:4] == ("silu", 23)
    assert "first" not in fake_steps[5][4], "the first capture still existed when the second was made"
    assert list((tmp_path / "work").iterdir()) == [], "the bench left files behind"
    data = json.loads(out.read_text())
    assert data["results"]["store_second"]["bytes"] == 2 and data["results"]["disk"]["log"]
    printed = capsys.readouterr().out
    assert "[disk] first capture deleted" in printed and "store: second / first" in printed


def test_refuses_to_start_without_space_and_leaves_nothing(scale, fake_steps, tmp_path, monkeypatch):
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(scale.shutil, "disk_usage", lambda path: Usage(64 * 2**30, 50 * 2**30, 14 * 2**30))
    with pytest.raises(SystemExit) as exit_:
        scale.main(["--dir", str(tmp_path / "work")])
    assert "needs about" in str(exit_.value.code)
    assert fake_steps == [] and list((tmp_path / "work").iterdir()) == []


def test_a_failed_step_still_prints_the_table_and_cleans_up(scale, fake_steps, tmp_path, monkeypatch, capsys):
    def failing_extract(*args, **kwargs):
        raise scale.StepFailed("extract moe_scale_expert_ffn --dispatch 46: the app exited with status 1")

    monkeypatch.setattr(scale, "run_extract", failing_extract)
    with pytest.raises(SystemExit) as exit_:
        scale.main(["--layers", "2", "--dir", str(tmp_path / "work")])
    assert "stopped early" in str(exit_.value.code)
    assert "extract overhead" in capsys.readouterr().out
    assert list((tmp_path / "work").iterdir()) == []
