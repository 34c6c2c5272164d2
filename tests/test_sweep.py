"""`kerncap sweep` on the CPU: configs files, a Triton reproducer's configs compiled for
real (Triton compiles sm_90 cubins without a GPU) and validated and timed by the replay
server's stand-in (tests/fake_replay_server.py), cubin variants, and a compile error
reported on its entry. The GPU suite sweeps ≥ 32 configs on 1 and 2 H200s
(tests/gpu/test_sweep_gpu.py, bench/sweep_scaling.py)."""

from __future__ import annotations

import json
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kerncap import api
from kerncap.cli import main
from kerncap.errors import UsageError
from test_triton_hook import app_dir, fake_inject  # noqa: F401  (fixtures)
from test_triton_reproducer import hook_run, reproducer  # noqa: F401  (fixtures)

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "captures"
FAKE = [sys.executable, str(HERE / "fake_replay_server.py")]


def fake() -> api.MeasureRequest:
    return api.MeasureRequest(iterations=5, warmup=1, server_cmd=FAKE)


def test_configs_files(tmp_path):
    lines = tmp_path / "c.txt"
    lines.write_text("# warps\nnum_warps=4\n\nnum_warps=8,num_stages=2  # more\n")
    assert api.load_sweep_configs(lines) == ["num_warps=4", "num_warps=8,num_stages=2"]
    js = tmp_path / "c.json"
    js.write_text(json.dumps(["num_warps=2", {"num_warps": 4, "BLOCK": 64}]))
    assert api.load_sweep_configs(js) == ["num_warps=2", "num_warps=4,BLOCK=64"]
    for text in ("", "# nothing\n", "[not json"):
        (tmp_path / "bad").write_text(text)
        with pytest.raises(UsageError):
            api.load_sweep_configs(tmp_path / "bad")
    with pytest.raises(UsageError):
        api.load_sweep_configs(tmp_path / "missing")


def test_sweep_of_cubin_variants(tmp_path, monkeypatch):
    repro = tmp_path / "axpy"
    shutil.copytree(FIXTURES / "axpy_small", repro)
    captured = next((repro / "capture" / "cubins").iterdir())
    slow = tmp_path / "slow.cubin"
    slow.write_bytes(captured.read_bytes() + b"\0")
    bad = tmp_path / "bad.cubin"
    bad.write_bytes(b"x")
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps({"captured": 0.010, "slow.cubin": 0.020}))
    monkeypatch.setenv("FAKE_FAIL", "bad.cubin")
    with api.open_fanout(backend="serial") as f:
        report = api.sweep(repro, f, variants=[captured, slow, bad], options=fake())
    assert [e.label for e in report.entries] == ["captured", captured.name, "slow.cubin", "bad.cubin"]
    by = {e.label: e for e in report.entries}
    assert by["slow.cubin"].status == "pass" and by["slow.cubin"].speedup == pytest.approx(0.5)
    assert by["bad.cubin"].status == "fail"
    assert report.exit_status == 0
    # measured where they lie: a sweep on this machine leaves the reproducer's variants/ as it was
    # (issue 26: it used to copy sweep-*.cubin there, also when nothing could run)
    assert not (repro / "variants").exists()
    assert [e.cubin for e in report.entries[1:]] == [str(captured), str(slow), str(bad)]
    with pytest.raises(Exception, match="does not exist"):
        api.sweep(repro, api.open_fanout(backend="serial"), variants=[tmp_path / "none.cubin"], options=fake())


@pytest.fixture
def triton_repro(request):
    pytest.importorskip("triton")
    pytest.importorskip("elftools")
    root, _capture, sources = request.getfixturevalue("reproducer")
    # what extract writes beside the capture: recompile picks the Triton path from it
    (root / "reproducer.json").write_text(json.dumps({"sources": sources, "triton": sources}))
    return root


def test_sweep_of_triton_configs(triton_repro, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps({"captured": 0.010}))
    configs = ["num_warps=1", "num_warps=4,num_stages=3", "num_warps=3"]  # 3 warps: Triton refuses
    with api.open_fanout(backend="serial") as f:
        report = api.sweep(triton_repro, f, configs=configs, options=fake())
    by = {e.label: e for e in report.entries}
    assert by["num_warps=1"].status == "pass", by["num_warps=1"]
    assert by["num_warps=1"].compile_s > 0
    assert by["num_warps=1"].cubin.startswith("variants/") and (triton_repro / by["num_warps=1"].cubin).is_file()
    assert json.loads((triton_repro / by["num_warps=1"].cubin).with_suffix(".launch.json").read_text())["block"] == [32, 1, 1]
    assert by["num_warps=3"].status == "error" and by["num_warps=3"].message.startswith("compile:")
    assert not by["num_warps=3"].gpu_step
    assert report.best is not None and report.exit_status == 0
    junit = tmp_path / "s.xml"
    api.write_junit(report, junit)
    cases = {tc.get("name"): tc for tc in ET.parse(junit).getroot().iter("testcase")}
    assert cases["num_warps=3"].find("error") is not None and cases["num_warps=1"].find("error") is None
    text = api.format_sweep(report)
    assert "num_warps=4,num_stages=3" in text and "best:" in text


def test_sweep_cli_usage(tmp_path, capsys):
    shutil.copytree(FIXTURES / "axpy_small", tmp_path / "r")
    assert main(["sweep", str(tmp_path / "r")]) == 2
    assert "nothing to sweep" in capsys.readouterr().err
    assert main(["sweep", str(tmp_path / "r"), "--variants", str(tmp_path / "none.cubin")]) == 3
    assert main(["sweep", str(tmp_path / "nope"), "--config", "num_warps=4", "--backend", "serial"]) == 3
    # real engine on the CPU: the captured cubin cannot run here; every entry says so
    cubin = next((tmp_path / "r" / "capture" / "cubins").iterdir())
    assert main(["sweep", str(tmp_path / "r"), "--variants", str(cubin), "--backend", "serial", "--json"]) == 3
    out = json.loads(capsys.readouterr().out)
    assert all(e["status"] == "error" and e["gpu_step"] for e in out["entries"])


def test_a_sweep_whose_every_variant_fails_its_validation_exits_1(tmp_path, monkeypatch):
    """Variants ran and none passed: a verdict (exit status 1, as `check` and `validate`
    give), not "could not run" (3); the report's JSON and text say the same. Mutation
    caught: a failed validation counted as an entry that could not run."""
    repro = tmp_path / "axpy"
    shutil.copytree(FIXTURES / "axpy_small", repro)
    captured = next((repro / "capture" / "cubins").iterdir())
    wrong = []
    for name in ("wrong_a.cubin", "wrong_b.cubin"):
        wrong.append(tmp_path / name)
        wrong[-1].write_bytes(captured.read_bytes() + name.encode())
    monkeypatch.setenv("FAKE_FAIL", "wrong_")
    with api.open_fanout(backend="serial") as f:
        report = api.sweep(repro, f, variants=wrong, options=fake())
    assert [(e.label, e.status) for e in report.entries] == [("captured", "pass"), ("wrong_a.cubin", "fail"),
                                                              ("wrong_b.cubin", "fail")]
    assert report.best is None
    assert report.exit_status == 1 == report.to_dict()["exit_status"]
    assert "2 variant(s): 0 passed; best: none" in api.format_sweep(report)


def test_a_config_given_twice_is_swept_once(tmp_path, monkeypatch):
    """The same config from --configs and --config (or twice in a file) is compiled,
    validated and timed once, in the order first given: a sweep's entries are one per
    config. Mutation caught: duplicates kept (the config's entry listed, and counted,
    twice)."""
    repro = tmp_path / "axpy"
    shutil.copytree(FIXTURES / "axpy_small", repro)
    with api.open_fanout(backend="serial") as f:
        report = api.sweep(repro, f, configs=["num_warps=4", "num_warps=8", "num_warps=4"], options=fake())
    assert [e.label for e in report.entries] == ["captured", "num_warps=4", "num_warps=8"]
    assert len(report.variants) == 2 and "2 variant(s)" in api.format_sweep(report)
