"""Error paths of `kerncap extract`, driven by a fake app: a small Python script that
writes the per-process report (proc-<pid>.json) into $KERNCAP_OUT the way the capture
library does, then behaves as told (fail, crash, hang, spawn a child)."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kerncap.capture.extract import closest_kernel_names, extract
from kerncap.errors import KerncapError, NativeUnavailable, UsageError

FAKE_APP = textwrap.dedent(
    r'''
    import json, os, subprocess, sys, time
    out = os.environ["KERNCAP_OUT"]
    spec = json.loads(os.environ.get("FAKE_SPEC", "{}"))
    if spec.get("marker"):
        open(spec["marker"], "w").write(str(os.getpid()))
    if spec.get("env_dump"):
        seen = {k: os.environ.get(k) for k in ("KERNCAP_INTERCEPT", "LD_PRELOAD")}
        open(spec["env_dump"], "w").write(json.dumps(seen))
    if spec.get("child_pidfile"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open(spec["child_pidfile"], "w").write(str(child.pid))
    if spec.get("partial"):
        d = os.path.join(out, "capture.partial-%d" % os.getpid())
        os.makedirs(d)
        open(os.path.join(d, "INCOMPLETE"), "w").close()
        open(os.path.join(d, "interposer.log"), "w").write("kerncap: snapshot of region 2 started\n")
    if "proc" in spec:
        report = {"pid": os.getpid(), "ppid": os.getppid(), "command": json.loads(os.environ["KERNCAP_COMMAND"]),
                  "mode": os.environ["KERNCAP_MODE"], "errors": [], "launches": 0, "kernels_seen": {},
                  "target_matches": 0, "captured": False, "capture_dir": None}
        report.update(spec["proc"])
        tmp = os.path.join(out, ".proc-%d.json.tmp" % os.getpid())
        open(tmp, "w").write(json.dumps(report))
        os.rename(tmp, os.path.join(out, "proc-%d.json" % os.getpid()))
    for line in spec.get("stderr", []):
        print(line, file=sys.stderr)
    sys.stderr.flush()
    if spec.get("sleep"):
        time.sleep(spec["sleep"])
    if spec.get("signal"):
        os.kill(os.getpid(), spec["signal"])
    sys.exit(spec.get("exit", 0))
    '''
)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Returns run(spec, **extract_kwargs) -> extract(...) with the fake app."""
    app = tmp_path / "fake_app.py"
    app.write_text(FAKE_APP)
    lib = tmp_path / "libkerncap_inject.so"
    lib.write_bytes(b"")  # only its existence is checked; there is no CUDA here
    monkeypatch.setenv("KERNCAP_INJECT_LIB", str(lib))

    def run(spec, kernel="add_kernel", **kwargs):
        kwargs.setdefault("output", tmp_path / "out" / "repro")
        kwargs.setdefault("timeout", 30)
        env = {"FAKE_SPEC": json.dumps(spec)}
        return extract(kernel, [sys.executable, str(app)], env=env, output_sink=lambda s, d: None, **kwargs)

    return run


def _assert_nothing_left(out: Path):
    assert not out.exists(), f"{out} was left behind"
    assert not list(out.parent.glob(f"{out.name}.run-*")) if out.parent.exists() else True


SEEN = {
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, float*)": 40,
    "add_kernel": 5,
    "gemm_kernel_128x128": 3,
    "addmm_epilogue": 2,
    "triton_poi_fused_add_0": 7,
    "softmax_warp_forward": 1,
}


def test_never_launched_lists_closest_names(fake, tmp_path):
    out = tmp_path / "out" / "repro"
    with pytest.raises(KerncapError) as e:
        fake({"proc": {"kernels_seen": SEEN, "launches": 58}}, kernel="add_kernal", output=out)
    msg = e.value.message
    assert "'add_kernal' (--match substring) never ran" in msg
    listed = [line.strip() for line in msg.splitlines()[1:]]
    assert listed[0].startswith("add_kernel  (5 launches)")
    assert len(listed) == 5
    assert "kerncap profile" in e.value.hint
    _assert_nothing_left(out)
    assert not (tmp_path / "out").exists(), "parent created for the output must be removed on failure"


def test_closest_names_prefers_substring_and_similarity():
    names = list(SEEN)
    assert closest_kernel_names("gemm", names)[0] == "gemm_kernel_128x128"
    assert closest_kernel_names("vectorized_elementwise", names)[0].startswith("void at::native::vectorized")
    assert closest_kernel_names("fused_add", names, n=1) == ["triton_poi_fused_add_0"]
    assert len(closest_kernel_names("x", names, n=3)) == 3


def test_app_failure_reports_status_and_stderr_tail(fake, tmp_path):
    lines = [f"line {i}" for i in range(100)] + ["Traceback (most recent call last):", "RuntimeError: boom"]
    with pytest.raises(KerncapError) as e:
        fake({"proc": {"kernels_seen": SEEN}, "stderr": lines, "exit": 3})
    msg = e.value.message
    assert "exited with status 3" in msg
    assert "RuntimeError: boom" in msg
    assert "line 10\n" not in msg  # only the tail
    _assert_nothing_left(tmp_path / "out" / "repro")


def test_app_killed_by_signal(fake):
    with pytest.raises(KerncapError) as e:
        fake({"signal": int(signal.SIGSEGV)})
    assert "killed by signal SIGSEGV" in e.value.message


def test_other_cupti_subscriber(fake):
    err = {"kind": "cupti_subscriber", "message": "cuptiSubscribe: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"}
    with pytest.raises(KerncapError) as e:
        fake({"proc": {"errors": [err]}})
    assert "another CUPTI subscriber" in e.value.message
    assert "MULTIPLE_SUBSCRIBERS" in e.value.message
    assert "torch.profiler" in e.value.hint and "Nsight" in e.value.hint


def test_cupti_subscriber_at_the_dispatch_is_named(fake):
    """Through entry points kerncap subscribes to CUPTI only at the dispatch, to read the
    cubin: the target matched, and the other client is still what stopped the capture."""
    err = {"kind": "cupti_subscriber", "message": "cuptiSubscribe failed: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"}
    with pytest.raises(KerncapError) as e:
        fake({"proc": {"errors": [err], "target_matches": 1}})
    assert "another CUPTI subscriber" in e.value.message
    assert "torch.profiler" in e.value.hint


def test_intercept_reaches_the_app_and_a_typo_is_refused_before_anything_starts(fake, tmp_path, monkeypatch):
    dump, out = tmp_path / "env.json", tmp_path / "out" / "repro"
    (tmp_path / "libkerncap_entry.so").write_bytes(b"")  # the injection library's sibling
    with pytest.raises(KerncapError):  # the fake app writes no report
        fake({"env_dump": str(dump)}, intercept="entry", output=out)
    seen = json.loads(dump.read_text())
    assert seen["KERNCAP_INTERCEPT"] == "entry"
    assert seen["LD_PRELOAD"].split(":")[0] == str(tmp_path / "libkerncap_entry.so")
    _assert_nothing_left(out)
    dump.unlink()
    for kwargs in ({"intercept": "entries"}, {}):
        if not kwargs:
            monkeypatch.setenv("KERNCAP_INTERCEPT", "CUPTI")
        with pytest.raises(UsageError) as e:
            fake({"env_dump": str(dump)}, output=out, **kwargs)
        assert "is not an interception path" in e.value.message and "entry" in e.value.hint
        assert not dump.exists(), "the app must not start"
        assert not (tmp_path / "out").exists()
    (tmp_path / "libkerncap_entry.so").unlink()
    with pytest.raises(KerncapError, match="libkerncap_entry.so was not built") as e:
        fake({"env_dump": str(dump)}, intercept="entry", output=out)
    assert "KERNCAP_INTERCEPT=cupti" in e.value.hint
    assert not dump.exists() and not (tmp_path / "out").exists(), "refused before anything was created"


def test_disk_error_names_path_and_errno(fake, tmp_path):
    err = {"kind": "disk", "message": "write /x/capture.partial-7/blobs/ab.bin: No space left on device"}
    with pytest.raises(KerncapError) as e:
        fake({"proc": {"errors": [err], "target_matches": 1}})
    assert "No space left on device" in e.value.message
    assert "blobs/ab.bin" in e.value.message
    assert "not harmed" in e.value.message
    _assert_nothing_left(tmp_path / "out" / "repro")


def test_cuda_graph_refusal_names_the_reason(fake):
    err = {"kind": "graph_refused", "message": "executable graph #2: the executable graph holding the target was "
           "replayed on two streams at once"}
    with pytest.raises(KerncapError) as e:
        fake({"proc": {"errors": [err], "target_matches": 1}})
    assert "two streams at once" in e.value.message and "#2" in e.value.message
    assert "docs/graphs.md" in e.value.hint


def test_unreached_dispatch_says_what_the_graphs_did(fake):
    err = {"kind": "graph_unreached", "message": "executable graph #1 (graph API, 1 target node(s)) was instantiated "
           "but never launched"}
    with pytest.raises(KerncapError) as e:
        fake({"proc": {"errors": [err], "target_matches": 0}})
    assert "instantiated but never launched" in e.value.message
    assert "never ran" in e.value.message


def test_capture_failed_is_reported(fake):
    err = {"kind": "capture_failed", "message": "cuMemcpyDtoHAsync on region 3 (0x7f0000000000, 4 MiB): illegal address"}
    with pytest.raises(KerncapError) as e:
        fake({"proc": {"errors": [err], "target_matches": 1}})
    assert "cuMemcpyDtoHAsync on region 3" in e.value.message


def test_too_few_dispatches(fake):
    with pytest.raises(KerncapError) as e:
        fake({"proc": {"kernels_seen": SEEN, "target_matches": 2}}, dispatch=5)
    assert "only 2 time(s)" in e.value.message
    assert "between 0 and 1" in e.value.hint


def test_a_dispatch_one_past_the_last_is_too_few_not_an_unexplained_miss(fake):
    """--dispatch N of a kernel that ran exactly N times (dispatches 0..N-1): the same
    "ran only N time(s)" as any later dispatch, never "matched N dispatches but no capture"."""
    for dispatch, valid in ((2, "between 0 and 1"), (1, "between 0 and 0")):
        with pytest.raises(KerncapError) as e:
            fake({"proc": {"kernels_seen": SEEN, "target_matches": dispatch}}, dispatch=dispatch)
        assert f"only {dispatch} time(s)" in e.value.message and f"--dispatch {dispatch}" in e.value.message
        assert "no capture was written" not in e.value.message
        assert valid in e.value.hint


def test_unfinished_capture_shows_interposer_log(fake):
    with pytest.raises(KerncapError) as e:
        fake({"proc": {"target_matches": 1}, "partial": True, "signal": int(signal.SIGKILL)})
    assert "did not finish" in e.value.message
    assert "snapshot of region 2 started" in e.value.message


def test_no_process_loaded_the_library(fake):
    with pytest.raises(KerncapError) as e:
        fake({})
    assert "no process" in e.value.message and "proc-*.json" in e.value.message


def test_timeout_kills_the_whole_process_group(fake, tmp_path):
    pidfile = tmp_path / "child.pid"
    with pytest.raises(KerncapError) as e:
        fake({"proc": {}, "child_pidfile": str(pidfile), "sleep": 60}, timeout=1.0)
    assert "did not finish within --timeout 1 s" in e.value.message
    child = int(pidfile.read_text())
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"child {child} of the app survived the timeout")
    _assert_nothing_left(tmp_path / "out" / "repro")


def test_unwritable_output_is_refused_before_the_app_starts(fake, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    marker = tmp_path / "started"
    with pytest.raises(KerncapError) as e:
        fake({"marker": str(marker)}, output=blocker / "repro")
    assert str(blocker) in e.value.message
    assert "not started" in e.value.hint
    assert not marker.exists()


def test_nonempty_output_is_refused_and_untouched(fake, tmp_path):
    out = tmp_path / "repro"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    marker = tmp_path / "started"
    with pytest.raises(KerncapError) as e:
        fake({"marker": str(marker)}, output=out)
    assert "not empty" in e.value.message and "--force" in e.value.hint
    assert (out / "mine.txt").read_text() == "keep"
    assert not marker.exists()


def test_command_not_found(tmp_path, monkeypatch):
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("KERNCAP_INJECT_LIB", str(lib))
    with pytest.raises(KerncapError) as e:
        extract("k", ["definitely-not-a-command-kc"], output=tmp_path / "o")
    assert "command not found: definitely-not-a-command-kc" in e.value.message
    with pytest.raises(KerncapError) as e:
        extract("k", ["./nope.sh"], output=tmp_path / "o", cwd=tmp_path)
    assert "command not found: ./nope.sh" in e.value.message
    assert not (tmp_path / "o").exists()


def test_native_library_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNCAP_INJECT_LIB", str(tmp_path / "missing.so"))
    with pytest.raises(NativeUnavailable) as e:
        extract("k", [sys.executable, "-c", "pass"], output=tmp_path / "o")
    assert "missing.so" in e.value.message
    assert not (tmp_path / "o").exists()


def test_bad_pattern_and_dispatch(fake):
    with pytest.raises(KerncapError, match="not a valid regular expression"):
        fake({}, kernel="add(", match="regex")
    with pytest.raises(KerncapError, match="unknown --match"):
        fake({}, match="fuzzy")
    with pytest.raises(KerncapError, match="negative"):
        fake({}, dispatch=-1)


def test_a_kernel_that_ran_is_never_said_to_have_never_ran(fake):
    """Issue 44: `--match exact gemm_fusion_dot` whose only launches outside graphs were
    XLA's autotuner runs (not dispatches) said the kernel "never ran", listing it with its
    30 launches. Now it says it ran, and why none counted."""
    seen = {"gemm_fusion_dot": 30, "RedzoneAllocatorKernelImpl": 4}
    with pytest.raises(KerncapError) as e:
        fake({"proc": {"kernels_seen": seen, "target_matches": 0,
                       "not_counted": {"autotuner": 30, "recorded_into_graphs": 0}}},
             kernel="gemm_fusion_dot", match="exact")
    msg = e.value.message
    assert "never ran" not in msg, msg
    assert "'gemm_fusion_dot' (--match exact) ran in" in msg and "gemm_fusion_dot (30 launches)" in msg, msg
    assert "30 were XLA autotuner candidate runs" in msg, msg
    assert "docs/graphs.md" in e.value.hint


@pytest.mark.parametrize("kernel, match, ran", [
    ("_Z6targetv", "exact", True),       # exact compares the demangled name kernels_seen holds
    ("target", "exact", False),          # exact is the whole name
    ("tar", "substring", True),
    ("^targ.t", "regex", True),
])
def test_which_launches_of_the_pattern_ran_follows_the_match_mode(kernel, match, ran):
    from kerncap.capture.extract import _runs_of

    procs = [{"kernels_seen": {"target()": 3, "other()": 2}}]
    assert bool(_runs_of(kernel, match, procs)) is ran
