"""`kerncap replay` / `kerncap validate`: arguments, output and exit status, with the
replay client replaced by a recorder (the GPU suite runs the real one)."""

import json
from pathlib import Path

import numpy as np
import pytest
import replay_sim as sim

from kerncap import cli
from kerncap.replay import client as client_mod
from kerncap.replay.results import ReplayResult


class FakeClient:
    calls: list = []

    timeouts: list = []

    def __init__(self, path, device=0, timeout=None, **_ignored):
        FakeClient.calls.append(("open", str(path), device))
        FakeClient.timeouts.append(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        FakeClient.calls.append(("close",))

    def replay(self, **kw):
        FakeClient.calls.append(("replay", kw))
        return ReplayResult.from_times([0.5, 0.6, 0.4], warmup=kw["warmup"], flush_l2=kw["flush_l2"],
                                       cubin=kw["cubin"] and str(kw["cubin"]))



@pytest.fixture(autouse=True)
def fake_client(monkeypatch):
    FakeClient.calls = []
    FakeClient.timeouts = []
    monkeypatch.setattr(client_mod, "ReplayClient", FakeClient)  # what every session opens


def test_replay_defaults_and_text(tmp_path, capsys):
    assert cli.main(["replay", str(tmp_path)]) == 0
    assert FakeClient.calls[1] == ("replay", {"cubin": None, "iterations": 20, "warmup": 3, "flush_l2": False})
    out = capsys.readouterr().out
    assert "median 500.00 us" in out and "spread" in out


def test_replay_timeout_reaches_the_replay_server_client(tmp_path, capsys):
    """`--timeout S` without --ncu: the client kills a server that takes longer than S to
    answer (tests/test_replay_client.py; on the GPU a variant that spins forever,
    tests/gpu/test_hang_gpu.py). Without it there is no limit."""
    assert cli.main(["replay", str(tmp_path), "--timeout", "7.5"]) == 0
    assert cli.main(["replay", str(tmp_path)]) == 0
    assert FakeClient.timeouts == [7.5, None]


def test_replay_options_and_json(tmp_path, capsys):
    cubin = tmp_path / "v.cubin"
    cubin.write_bytes(b"\x7fELF")
    assert cli.main(["replay", str(tmp_path), "--cubin", str(cubin), "-n", "3", "--warmup", "0", "--flush-l2",
                     "--device", "1", "--json"]) == 0
    assert FakeClient.calls[0] == ("open", str(tmp_path), 1)
    assert FakeClient.calls[1][1] == {"cubin": str(cubin), "iterations": 3, "warmup": 0, "flush_l2": True}
    doc = json.loads(capsys.readouterr().out)
    assert doc["times_ms"] == [0.5, 0.6, 0.4] and doc["flush_l2"] is True


@pytest.mark.parametrize("args", [["--iterations", "0"], ["--warmup", "-1"], ["--iterations", "x"]])
def test_replay_rejects_bad_counts(tmp_path, args, capsys):
    assert cli.main(["replay", str(tmp_path), *args]) == 2
    assert "replay: error: argument" in capsys.readouterr().err


def test_missing_variant_is_named_before_any_server_starts(tmp_path, capsys):
    assert cli.main(["validate", str(tmp_path), "--cubin", str(tmp_path / "missing.cubin")]) == 3
    err = capsys.readouterr().err
    assert f"variant cubin {tmp_path / 'missing.cubin'} does not exist" in err and "kerncap recompile" in err
    assert FakeClient.calls == []


# -- validate: the replay core simulated in numpy on the committed axpy capture ------------


def axpy(m, _s):
    y = m.f32(1)
    y[:] = y + np.float32(0.5) * m.f32(0)


def off_by_one(m, s):
    axpy(m, s)
    m.f32(1)[5] += np.float32(1)


@pytest.fixture
def axpy_repro(tmp_path, monkeypatch):
    repro = sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": axpy, "good.cubin": axpy, "bad.cubin": off_by_one})
    return repro


def test_validate_pass_exit_zero(axpy_repro, capsys):
    assert cli.main(["validate", str(axpy_repro)]) == 0
    out = capsys.readouterr().out
    assert "captured cubin: PASS on 1 input of 1 reproducer" in out and "deterministic (3 runs identical)" in out
    assert "ok    region 1" in out


def test_validate_fail_exit_one_and_report(axpy_repro, capsys):
    assert cli.main(["validate", str(axpy_repro), "--cubin", str(axpy_repro.parent / "bad.cubin")]) == 1
    out = capsys.readouterr().out
    assert "FAIL on 1 input" in out and "FAIL  region 1" in out and "bytes differ" in out


def test_validate_perturbed_json_keeps_the_region_list(axpy_repro, capsys):
    assert cli.main(["validate", str(axpy_repro), "--cubin", str(axpy_repro.parent / "good.cubin"), "--perturb", "2",
                     "--seed", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["passed"] is True and doc["summary"].startswith("PASS on 3 inputs")
    assert [r["id"] for r in doc["regions"] if r["kind"] == "region"] == [0, 1] and doc["seed"] == 3


def test_validate_tolerance_arguments_reach_the_checks(axpy_repro, capsys):
    assert cli.main(["validate", str(axpy_repro), "--cubin", str(axpy_repro.parent / "bad.cubin"), "--atol", "2",
                     "--region-dtype", "0=float32", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mode"] == "tolerance" and {r["id"]: r["dtype"] for r in doc["regions"]} == {0: "float32", 1: "float32"}


def test_region_dtypes_alone_ask_for_elementwise_checks(axpy_repro, capsys):
    cli.main(["validate", str(axpy_repro), "--region-dtype", "1=float32", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["mode"] == "tolerance" and doc["regions"][1]["dtype"] == "float32"


def test_validate_of_two_reproducers_checks_both_and_gives_one_verdict(axpy_repro, capsys):
    """Several DIRs (reproducers of one kernel) are all checked, each on its own input, in
    one verdict; two are as many as several (mutation caught: only a third DIR made it
    several, two were checked on the first alone)."""
    import shutil

    second = axpy_repro.parent / "axpy-2"
    shutil.copytree(axpy_repro, second)
    good = str(axpy_repro.parent / "good.cubin")
    assert cli.main(["validate", str(axpy_repro), str(second), "--cubin", good, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["reproducer"] for d in doc["reproducers"]] == [str(axpy_repro), str(second)]
    assert doc["summary"].startswith("PASS on 2 inputs")
    assert cli.main(["validate", str(axpy_repro), str(second), "--cubin", good]) == 0
    assert "PASS on 2 inputs of 2 reproducers" in capsys.readouterr().out


def test_validate_runs_every_dir_on_the_device_named(axpy_repro, monkeypatch, capsys):
    """`--device N` picks the GPU for one DIR and for several alike: every reproducer's
    replay server opens on GPU N. Mutation caught: several DIRs ran on GPU 0 whatever
    --device said."""
    import shutil

    opened = []

    class OnDevice(sim.InProcessClient):
        def __init__(self, capture_dir, device=0, **kw):
            p = Path(capture_dir)
            opened.append((p.parent.name if p.name == "capture" else p.name, device))
            super().__init__(capture_dir, device, **kw)

    monkeypatch.setattr("kerncap.replay.client.ReplayClient", OnDevice)
    second = axpy_repro.parent / "axpy-2"
    shutil.copytree(axpy_repro, second)
    assert cli.main(["validate", str(axpy_repro), "--device", "1", "--json"]) == 0
    assert opened and set(opened) == {("axpy", 1)}, opened
    capsys.readouterr()
    opened.clear()
    assert cli.main(["validate", str(axpy_repro), str(second), "--device", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"].startswith("PASS on 2 inputs")
    assert {name for name, _ in opened} == {"axpy", "axpy-2"} and {d for _, d in opened} == {1}, opened


@pytest.mark.parametrize("args,needle", [
    (["--perturb", "0"], "--perturb 0: the number of perturbed inputs must be between 1 and 1000"),
    (["--perturb", "100000"], "--perturb 100000: the number of perturbed inputs must be between 1 and 1000"),
    (["--perturb", "2", "--keep", "7"], "--keep 7: the capture has no region 7"),
    (["--keep", "1"], "--keep needs --perturb K"),
])
def test_validate_bad_perturbation_arguments(axpy_repro, args, needle, capsys):
    assert cli.main(["validate", str(axpy_repro), *args]) == 2  # the command line must change
    assert needle in capsys.readouterr().err



def test_keep_takes_region_0_and_refuses_a_negative_one(axpy_repro, capsys):
    """--keep's bound is "from 0": region 0 (the first, often the input) can be kept; -1
    is a usage error naming the bound. Mutation caught: a repeatable option's minimum
    itself refused."""
    assert cli.main(["validate", str(axpy_repro), "--cubin", str(axpy_repro.parent / "good.cubin"), "--perturb", "2",
                     "--keep", "0", "--seed", "3", "--json"]) == 0
    [doc] = json.loads(capsys.readouterr().out)["reproducers"]
    assert any(line.startswith("not perturbed: region 0 ") and line.endswith("kept (--keep)") for line in doc["plan"])
    assert [line for line in doc["plan"] if line.startswith("perturbed: ")][0].startswith("perturbed: region 1 ")
    assert cli.main(["validate", str(axpy_repro), "--perturb", "2", "--keep", "-1"]) == 2
    assert "argument --keep: must be >= 0 (got -1)" in capsys.readouterr().err

@pytest.mark.parametrize("args,needle", [
    (["--dtype", "complex64"], "unsupported dtype 'complex64'"),
    (["--atol", "-1"], "must be >= 0"),
    (["--rtol", "nan"], "must be >= 0"),
    (["--region-dtype", "x=float32"], "expected REGION=DTYPE"),
])
def test_validate_rejects_bad_arguments(tmp_path, args, needle, capsys):
    assert cli.main(["validate", str(tmp_path), *args]) == 2
    assert needle in capsys.readouterr().err
