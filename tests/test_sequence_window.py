"""The sequence window of the injection library (native/capture/inject.cpp, sequence_*.cpp)
over the stand-in libcuda of tests/test_entry_hooks.py, attached to the entry points:
which NVTX range instance or dispatch opens the window, what a process reports when none
opens, and that a window whose capture cannot start says so by name and lets the app's
threads go on (every launch still reaches the driver and kerncap's count). The stand-in
has no snapshot or cubin calls, so the window fails at its start here; the GPU suite
captures real windows (tests/gpu/test_sequences.py), and the window's rules are unit
tested in tests/test_sequence_units.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures" / "entry_hooks"))
import entry_build as B  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and B.HEADERS and B.CXX and B.CC),
    reason="needs Linux, a C/C++ compiler and the CUDA / CUPTI headers (toolkit or Triton's wheel)",
)


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    from kerncap.core.native import entry_library, inject_library
    from kerncap.errors import KerncapError

    try:
        entry, inject = entry_library(), inject_library()
    except KerncapError:
        entry = inject = None
    if entry is None:
        pytest.skip("kerncap was installed without its native parts")
    d = tmp_path_factory.mktemp("seqwin")
    try:
        drv = B.fake_driver(d / "drv")
        apps = {"inject_app": B.inject_app(d), "nvtx_app": B.nvtx_app(d)}
    except B.BuildError as exc:
        pytest.fail(str(exc))
    return {"entry": entry, "inject": inject, "drv": drv, **apps}


def _run(libs, tmp_path: Path, app: str, *args: str, **env: str) -> dict:
    out = tmp_path / "run"
    out.mkdir()
    full = {**os.environ, "LD_PRELOAD": str(libs["entry"]), "LD_LIBRARY_PATH": str(libs["drv"]),
            "KERNCAP_MODE": "capture", "KERNCAP_OUT": str(out), "KERNCAP_KEEP_RUNNING": "1",
            "KERNCAP_INTERCEPT": "entry", **env}
    if "KERNCAP_NVTX" in env:
        full["NVTX_INJECTION64_PATH"] = str(libs["inject"])
    p = B.run([str(libs[app]), str(libs["inject"]), *args], env=full)
    assert p.returncode == 0 and "done" in p.stdout, p.stdout + p.stderr
    assert not (out / "capture.lock").exists() and not any(out.glob("capture*")), sorted(out.iterdir())
    (report,) = out.glob("proc-*.json")
    return json.loads(report.read_text())


def test_an_nvtx_instance_opens_the_window_at_its_first_launch(libs, tmp_path):
    """nvtx_app: step/layer.4 is instance 0 of 'layer', step/layer.5 instance 1. The window
    of instance 1 opens at its first launch and fails at its start (no snapshot calls in
    the stand-in): named, the lock given back, the app's later launches all counted."""
    proc = _run(libs, tmp_path, "nvtx_app", KERNCAP_SEQUENCE="nvtx", KERNCAP_NVTX="layer", KERNCAP_DISPATCH="1")
    seq = proc["sequence"]
    assert (seq["mode"], seq["state"], seq["instances_seen"]) == ("nvtx", "failed", 2)
    assert seq["path"] == "step/layer.5"
    (error,) = [e for e in proc["errors"] if e["kind"] == "capture_failed"]
    assert "the sequence of NVTX range instance 1 matching 'layer' failed at its start" in error["message"]
    assert "cuCtxGetDevice" in error["message"]
    assert proc["launches"] == 8  # every launch of the app reached the driver and the count


def test_a_range_that_never_opens_is_reported_with_the_instances_seen(libs, tmp_path):
    proc = _run(libs, tmp_path, "nvtx_app", KERNCAP_SEQUENCE="nvtx", KERNCAP_NVTX="layer", KERNCAP_DISPATCH="3")
    (error,) = [e for e in proc["errors"] if e["kind"] == "sequence_unopened"]
    assert error["message"] == "no instance 3 of an NVTX range matching 'layer' began (2 instance(s) seen)"
    assert proc["sequence"]["state"] == "waiting"
    assert {"step/layer.4", "step/layer.5"} <= set(proc["nvtx"]["paths"])  # what the engine lists, closest first


def test_a_run_opens_at_dispatch_n_of_its_kernel_and_lets_the_threads_go(libs, tmp_path):
    """inject_app with 4 launching threads: the run from dispatch 1 of target opens at that
    launch, holding the others; its failure at the start releases them (all 4 x 2000
    launches counted, the app ends)."""
    proc = _run(libs, tmp_path, "inject_app", "4", "2000", KERNCAP_SEQUENCE="run", KERNCAP_KERNEL="target",
                KERNCAP_DISPATCH="1", KERNCAP_SEQ_COUNT="3")
    (error,) = [e for e in proc["errors"] if e["kind"] == "capture_failed"]
    assert "the sequence from dispatch 1 of 'target' failed at its start" in error["message"]
    assert proc["sequence"]["state"] == "failed" and proc["sequence"]["launches"] == 0
    assert proc["launches"] == 7 + 4 * 2000
    assert proc["target_matches"] == 2  # dispatches 0 and 1: a capture that gave up stops counting


def test_a_run_bounded_by_a_kernel_counts_it_in_every_process(libs, tmp_path):
    """KERNCAP_SEQ_UNTIL=other: a process counts the launches of the run's end kernel (the
    engine names the process a run's end ran in when it crosses processes)."""
    proc = _run(libs, tmp_path, "inject_app", KERNCAP_SEQUENCE="run", KERNCAP_KERNEL="target", KERNCAP_DISPATCH="100",
                KERNCAP_SEQ_UNTIL="other")
    assert proc["sequence"]["until_seen"] == 2 and proc["sequence"]["state"] == "waiting"


@pytest.mark.parametrize("env, words", [
    ({"KERNCAP_SEQUENCE": "loop"}, "KERNCAP_SEQUENCE='loop' is not nvtx, graph or run"),
    ({"KERNCAP_SEQUENCE": "run"}, "needs KERNCAP_SEQ_COUNT or KERNCAP_SEQ_UNTIL"),
    ({"KERNCAP_SEQUENCE": "nvtx"}, "KERNCAP_SEQUENCE=nvtx needs KERNCAP_NVTX"),
    ({"KERNCAP_SEQUENCE": "run", "KERNCAP_SEQ_COUNT": "0"}, "KERNCAP_SEQ_COUNT='0' is not a positive integer"),
    ({"KERNCAP_SEQUENCE": "graph", "KERNCAP_SEQ_COUNT": "3"}, "bound a run (KERNCAP_SEQUENCE=run) only"),
])
def test_a_configuration_that_makes_no_window_is_named(libs, tmp_path, env, words):
    proc = _run(libs, tmp_path, "inject_app", KERNCAP_KERNEL="target", **env)
    (error,) = proc["errors"]
    assert error["kind"] == "config" and words in error["message"]
