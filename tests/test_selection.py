"""Selection requests and the messages for bad input (kerncap.capture.selection), from the
per-process reports the capture library writes (their "job", "nvtx" and "selection"
sections and error kinds: native/capture/job_identity.cpp, nvtx_ranges.cpp, inject.cpp).
The GPU suite (tests/gpu/test_selection.py, test_multigpu.py) produces them for real."""

from __future__ import annotations

import pytest

from kerncap.errors import KerncapError
from kerncap.capture.selection import Selection, closest, diagnose, job_summary, processes_note

TARGET = "kernel 'nv_tagged' (--match substring)"


def proc(pid, *, rank=None, world=None, selected=True, why_not="", errors=(), nvtx=None, selection=None):
    p = {"pid": pid, "errors": [{"kind": k, "message": m} for k, m in errors]}
    if rank is not None or not selected:
        p["job"] = {"rank": -1 if rank is None else rank, "rank_var": "RANK" if rank is not None else "",
                    "world_size": -1 if world is None else world, "local_rank": -1, "selected": selected,
                    "why_not": why_not}
    if nvtx is not None:
        p["nvtx"] = nvtx
    if selection is not None:
        p["selection"] = selection
    return p


def test_requests_are_checked_before_the_app_starts():
    Selection(nvtx="a/b", nvtx_match="regex", rank=1, device=0).check()
    with pytest.raises(KerncapError, match="not a valid regular expression"):
        Selection(nvtx="(", nvtx_match="regex").check()
    with pytest.raises(KerncapError, match="unknown --nvtx-match"):
        Selection(nvtx="a", nvtx_match="glob").check()
    with pytest.raises(KerncapError, match="--rank -1 is negative"):
        Selection(rank=-1).check()
    with pytest.raises(KerncapError, match="--nvtx is empty"):
        Selection(nvtx="").check()


def test_settings_and_description():
    s = Selection(nvtx="layer.5", rank=1, pid=42, device=0)
    assert s.settings() == {"KERNCAP_NVTX": "layer.5", "KERNCAP_NVTX_MATCH": "substring", "KERNCAP_RANK": "1",
                            "KERNCAP_PID": "42", "KERNCAP_DEVICE": "0"}
    assert s.describe() == "in NVTX ranges matching 'layer.5', rank 1, process 42, device 0"
    assert Selection().empty and Selection().settings() == {} and diagnose(Selection(), [proc(1)], TARGET) is None


def test_nvtx_pattern_never_seen_lists_names_closest_first():
    nvtx = {"pattern": "forward.S2048/layer.5", "calls_seen": True, "target_in_range": 0, "target_outside": 16,
            "names": ["forward.S1024", "forward.S256", "layer.5", "step.0", "window"],
            "paths": ["step.1/forward.S1024/layer.5", "step.0/forward.S256/layer.0"]}
    err = diagnose(Selection(nvtx="forward.S2048/layer.5"), [proc(7, nvtx=nvtx)], TARGET)
    lines = err.message.splitlines()
    assert "ran 16 time(s), none inside a range matching it" in lines[0]
    listed = [line.strip() for line in lines[1:]]
    assert listed[0] == "step.1/forward.S1024/layer.5"  # the closest path first
    assert listed.index("forward.S1024") < listed.index("window")
    assert "domain:name" in err.hint


def test_nvtx_never_seen_at_all_and_a_match_that_is_not_the_reason():
    none = {"pattern": "x", "calls_seen": False, "target_in_range": 0, "target_outside": 3, "names": [], "paths": []}
    err = diagnose(Selection(nvtx="x"), [proc(7, nvtx=none)], TARGET)
    assert "saw no NVTX range at all" in err.message and "first CUDA call" in err.hint
    inside = dict(none, calls_seen=True, target_in_range=2)
    assert diagnose(Selection(nvtx="x"), [proc(7, nvtx=inside)], TARGET) is None


def test_rank_beyond_the_world_size():
    msg = "--rank 5 but the job's world size is 2 (ranks 0-1, process 11 is rank 0)"
    procs = [proc(11, rank=0, world=2, selected=False, errors=[("rank_out_of_range", msg)]),
             proc(12, rank=1, world=2, selected=False, errors=[("rank_out_of_range", msg)])]
    err = diagnose(Selection(rank=5), procs, TARGET)
    assert err.message.startswith(msg) and "the app was stopped" in err.message
    assert "pid 11 rank 0, pid 12 rank 1 (world size 2)" in err.hint


def test_a_job_without_rank_variables():
    procs = [proc(11, selected=False, why_not="process 11 has no rank variable",
                  errors=[("no_rank", "process 11 sets none of RANK, ...")])]
    err = diagnose(Selection(rank=0), procs, TARGET)
    assert "no process of the job sets a rank variable" in err.message and "torchrun" in err.hint


def test_a_rank_the_job_does_not_have():
    procs = [proc(11, rank=0), proc(12, rank=2, selected=False, why_not="process 12 is rank 2 (RANK)")]
    err = diagnose(Selection(rank=1), procs, TARGET)
    assert "ranks seen: 0, 2" in err.message


def test_rank_and_pid_that_disagree():
    msg = "--rank 0 is process 11, not --pid 1"
    err = diagnose(Selection(rank=0, pid=1), [proc(11, rank=0, selected=False,
                                                    errors=[("selection_conflict", msg)])], TARGET)
    assert err.message.startswith(msg) and "same process" in err.hint


def test_a_pid_that_is_no_process_of_the_app():
    err = diagnose(Selection(pid=99), [proc(11, selected=False, why_not="process 11 is not --pid 99")], TARGET)
    assert "--pid 99: no CUDA process of the app has that pid (pids seen: 11)" in err.message


def test_a_device_the_target_never_ran_on():
    sel = {"device": 3, "off_device": 12, "target_devices": [0, 1]}
    err = diagnose(Selection(device=3), [proc(11, selection=sel)], TARGET)
    assert "never on device 3 (it ran on device(s) 0, 1)" in err.message



def test_a_kernel_that_ran_on_the_chosen_device_too_is_not_blamed_on_the_device():
    """--device 1 and the kernel ran 12 times on device 0 and also on device 1: the device
    is not why nothing was captured (diagnose returns None, and the NVTX selection is
    looked at next), so no message may say it never ran there. Mutation caught: any
    off-device launch read as "never on device N"."""
    sel = {"device": 1, "off_device": 12, "target_devices": [0, 1]}
    assert diagnose(Selection(device=1), [proc(11, selection=sel)], TARGET) is None
    nvtx = {"pattern": "step", "calls_seen": False, "target_in_range": 0, "target_outside": 3, "names": [],
            "paths": []}
    err = diagnose(Selection(device=1, nvtx="step"), [proc(11, selection=sel, nvtx=nvtx)], TARGET)
    assert "saw no NVTX range at all" in err.message and "device" not in err.message
    # not on the chosen device at all: that is the reason
    err = diagnose(Selection(device=2), [proc(11, selection=sel)], TARGET)
    assert "never on device 2 (it ran on device(s) 0, 1)" in err.message

def test_job_summary_and_excluded_processes():
    procs = [proc(11, rank=0, world=2, selected=False, why_not="process 11 is rank 0 (RANK)"), proc(12, rank=1, world=2)]
    assert job_summary(procs) == "2 process(es): pid 11 rank 0, pid 12 rank 1 (world size 2)"
    assert processes_note(procs) == "1 process(es) not selected: process 11 is rank 0 (RANK)"
    assert job_summary([proc(1)]) == ""


def test_closest_prefers_containing_then_similar():
    names = ["layer.5", "layer.50", "attn", "forward.S1024/layer.5"]
    assert closest("layer.5", names)[:2] == ["layer.5", "forward.S1024/layer.5"]
    assert closest("atn", names)[0] == "attn"
