"""`kerncap extract` with a selection or several dispatches, against a fake app that
writes what the capture library writes (proc-<pid>.json sections, stop-request): the
request reaches the app's environment, a request the job cannot meet stops the app at
once with the reason, and NCCL's own kernels are refused."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from kerncap.cli import main
from kerncap.errors import KerncapError
from kerncap.capture.extract import dispatch_list, extract
from kerncap.capture.selection import Selection

APP = textwrap.dedent(
    r'''
    import json, os, sys, time
    out = os.environ["KERNCAP_OUT"]
    spec = json.loads(os.environ["FAKE_SPEC"])
    for var, value in spec.get("env", {}).items():
        assert os.environ.get(var) == value, (var, os.environ.get(var))
    proc = {"pid": os.getpid(), "errors": spec.get("errors", []), "target_matches": 0,
            "refused_kernels": spec.get("refused", []), "job": spec.get("job")}
    open(os.path.join(out, "proc-%d.json" % os.getpid()), "w").write(json.dumps(proc))
    if spec.get("stop"):
        open(os.path.join(out, "stop-request"), "w").write(spec["stop"])
    time.sleep(spec.get("sleep", 0))
    if spec.get("done"):  # reached only by an app that was not stopped
        open(spec["done"], "w").close()
    '''
)


@pytest.fixture
def app(tmp_path, monkeypatch):
    path = tmp_path / "app.py"
    path.write_text(APP)
    lib = tmp_path / "libkerncap_inject.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("KERNCAP_INJECT_LIB", str(lib))

    def run(spec, **kw):
        return extract("kc_tp_bias_act", [sys.executable, str(path)], output=tmp_path / "out",
                       env={"FAKE_SPEC": json.dumps(spec)}, output_sink=lambda s, d: None, timeout=60, **kw)

    return run


def test_dispatch_lists():
    assert dispatch_list(3) == [3] and dispatch_list("40,3,17,3") == [3, 17, 40] and dispatch_list([2, 1]) == [1, 2]
    with pytest.raises(KerncapError, match="not a number or a comma-separated list"):
        dispatch_list("3,x")
    with pytest.raises(KerncapError, match="is negative"):
        dispatch_list("3,-1")


def test_nccl_kernels_are_refused_before_the_app_starts(tmp_path):
    with pytest.raises(KerncapError) as e:
        extract("ncclDevKernel_AllReduce_Sum_f32_RING_LL", ["true"], output=tmp_path / "out")
    assert "NCCL's own kernels" in e.value.message and "peer ranks" in e.value.message
    assert not (tmp_path / "out").exists()


def test_conflicting_selection_stops_the_app_at_once(app, tmp_path, tmp_path_factory):
    msg = "--rank 1 is process 4242, not --pid 7"
    done = tmp_path_factory.mktemp("marks") / "app-ended"
    spec = {"sleep": 60, "done": str(done), "stop": msg, "errors": [{"kind": "selection_conflict", "message": msg}],
            "job": {"rank": 1, "rank_var": "RANK", "world_size": 2, "local_rank": 1, "selected": False, "why_not": "x"},
            "env": {"KERNCAP_RANK": "1", "KERNCAP_PID": "7", "KERNCAP_DISPATCH": "0"}}
    with pytest.raises(KerncapError) as e:
        app(spec, selection=Selection(rank=1, pid=7))
    assert not done.exists(), "the app must be stopped when the request cannot be met"
    assert e.value.message.startswith(msg) and "same process" in e.value.hint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.py", "libkerncap_inject.so"]


def test_a_pattern_that_matched_only_nccl_kernels(app):
    spec = {"refused": ["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgs4K)"],
            "env": {"KERNCAP_NVTX": "step", "KERNCAP_NVTX_MATCH": "substring"}}
    with pytest.raises(KerncapError) as e:
        app(spec, selection=Selection(nvtx="step"))
    assert "matches only NCCL's own kernels (ncclDevKernel_AllReduce_Sum_f32_RING_LL)" in e.value.message


def test_a_set_request_reaches_the_app(app):
    spec = {"env": {"KERNCAP_DISPATCH": "3,17", "KERNCAP_SET": "1", "KERNCAP_BUCKETS": "0"}}
    with pytest.raises(KerncapError, match="never ran"):
        app(spec, dispatch=[17, 3])
    spec = {"env": {"KERNCAP_SET": "1", "KERNCAP_BUCKETS": "1", "KERNCAP_KEEP_RUNNING": "0"}}
    with pytest.raises(KerncapError, match="never ran"):
        app(spec, buckets=True)


def test_cli_flags_parse(capsys):
    assert main(["extract", "k", "--nvtx-match", "glob", "--", "true"]) == 2  # usage
    assert "invalid choice" in capsys.readouterr().err


def test_cli_selection_flags_reach_the_app(app, tmp_path, monkeypatch, capsys):
    """`kerncap extract --nvtx --nvtx-match --rank --device` each reach the capture
    library's environment (mutation caught: --device parsed, then dropped from the
    selection the command builds, so every device's launches counted)."""
    app_py = tmp_path / "app.py"  # the fixture's fake app, which checks its environment
    env = {"KERNCAP_NVTX": "step", "KERNCAP_NVTX_MATCH": "regex", "KERNCAP_RANK": "0", "KERNCAP_DEVICE": "1"}
    monkeypatch.setenv("FAKE_SPEC", json.dumps({"env": env}))
    argv = ["extract", "kc_tp_bias_act", "--nvtx", "step", "--nvtx-match", "regex", "--rank", "0", "--device", "1",
            "-o", str(tmp_path / "out"), "--timeout", "60", "--", sys.executable, str(app_py)]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "never ran" in err and "AssertionError" not in err, err
