"""`kerncap replay` / `kerncap validate`: arguments, output and exit status, with the
replay client replaced by a recorder (the GPU suite runs the real one)."""

import json

import pytest
from kerncap import cli
from kerncap import api
from kerncap.replay.results import RegionCheck, ReplayResult, ValidationResult


class FakeClient:
    calls: list = []
    validation: ValidationResult | None = None

    def __init__(self, path, device=0):
        FakeClient.calls.append(("open", str(path), device))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        FakeClient.calls.append(("close",))

    def replay(self, **kw):
        FakeClient.calls.append(("replay", kw))
        return ReplayResult.from_times([0.5, 0.6, 0.4], warmup=kw["warmup"], flush_l2=kw["flush_l2"],
                                       cubin=kw["cubin"] and str(kw["cubin"]))

    def validate(self, **kw):
        FakeClient.calls.append(("validate", kw))
        return FakeClient.validation


@pytest.fixture(autouse=True)
def fake_client(monkeypatch):
    FakeClient.calls = []
    FakeClient.validation = ValidationResult(passed=True, mode="exact", regions=[region(0)])
    monkeypatch.setattr(api, "ReplayClient", FakeClient)


def region(i, bad=0):
    return RegionCheck(kind="region", id=i, name=f"region {i}", base=0x7F0000000000 + i * 4096, size=4096,
                       dtype=None, mismatched_bytes=bad, mismatched_elements=None, max_abs_err=None,
                       max_rel_err=None, first_mismatches=[(0, 1, 2)] if bad else [], unexpected_write=False)


def test_replay_defaults_and_text(tmp_path, capsys):
    assert cli.main(["replay", str(tmp_path)]) == 0
    assert FakeClient.calls[1] == ("replay", {"cubin": None, "iterations": 20, "warmup": 3, "flush_l2": False})
    out = capsys.readouterr().out
    assert "median 500.00 us" in out and "spread" in out


def test_replay_options_and_json(tmp_path, capsys):
    cubin = tmp_path / "v.cubin"
    cubin.write_bytes(b"\x7fELF")
    assert cli.main(["replay", str(tmp_path), "--cubin", str(cubin), "-n", "3", "--warmup", "0", "--flush-l2",
                     "--device", "1", "--json"]) == 0
    assert FakeClient.calls[0] == ("open", str(tmp_path), 1)
    assert FakeClient.calls[1][1] == {"cubin": cubin, "iterations": 3, "warmup": 0, "flush_l2": True}
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


def test_validate_pass_exit_zero(tmp_path, capsys):
    assert cli.main(["validate", str(tmp_path)]) == 0
    assert FakeClient.calls[1] == ("validate", {"cubin": None, "atol": None, "rtol": None, "dtype": None,
                                                "dtypes": {}})
    assert "PASS" in capsys.readouterr().out


def test_validate_fail_exit_one_and_report(tmp_path, capsys):
    FakeClient.validation = ValidationResult(passed=False, mode="exact", regions=[region(0), region(1, bad=5)])
    assert cli.main(["validate", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL (1 of 2 differ)" in out and "region 1" in out and "5 bytes differ" in out


def test_validate_tolerance_arguments(tmp_path, capsys):
    assert cli.main(["validate", str(tmp_path), "--atol", "1e-3", "--rtol", "0.01", "--dtype", "fp16",
                     "--region-dtype", "3=bf16", "--region-dtype", "4=int32", "--json"]) == 0
    assert FakeClient.calls[1][1] == {"cubin": None, "atol": 1e-3, "rtol": 0.01, "dtype": "float16",
                                      "dtypes": {3: "bfloat16", 4: "int32"}}
    assert json.loads(capsys.readouterr().out)["passed"] is True


def test_region_dtypes_alone_ask_for_elementwise_checks(tmp_path):
    cli.main(["validate", str(tmp_path), "--region-dtype", "2=float64"])
    assert FakeClient.calls[1][1]["dtype"] == "float32" and FakeClient.calls[1][1]["dtypes"] == {2: "float64"}


@pytest.mark.parametrize("args,needle", [
    (["--dtype", "complex64"], "unsupported dtype 'complex64'"),
    (["--atol", "-1"], "must be >= 0"),
    (["--rtol", "nan"], "must be >= 0"),
    (["--region-dtype", "x=float32"], "expected REGION=DTYPE"),
])
def test_validate_rejects_bad_arguments(tmp_path, args, needle, capsys):
    assert cli.main(["validate", str(tmp_path), *args]) == 2
    assert needle in capsys.readouterr().err
