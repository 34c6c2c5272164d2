"""Verdicts and speedups an optimizer cannot game (issue 42), over the simulated replay
core on the committed axpy capture (tests/replay_sim.py: its time() restores, rotates the
inputs and checks every timed launch as native/replay/session.cpp does). The GPU suite
runs the same classes of variants as real cubins (tests/gpu/test_integrity_gpu.py).

* a timed launch that did not produce the expected state voids the timing: no speedup,
  named with its launch, `replay` and `replay --compare` exit 1, a build's row fails;
* the timing rotates over the captured input and K-1 perturbed ones, the same for the
  captured cubin and the variant;
* a dispatch that wrote nothing new gets a canary input, and a verdict none of whose
  inputs changed a byte is not a PASS.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from kerncap import cli
from kerncap.replay import differential as diff
from kerncap.reproducer.format import Capture
from kerncap.session.options import BuildRequest, CompareRequest
from kerncap.session.session import Session

import replay_sim as sim


def _first_launch_only():
    """A variant that computes on its first launch in the process and returns at once on
    every later one (its "done" flag lives where nothing restores it)."""
    calls = {"n": 0}

    def kernel(m, s):
        calls["n"] += 1
        if calls["n"] == 1:
            sim.axpy(m, s)
        return 0.01  # and looks five times faster

    return kernel


def _remembers_inputs():
    """A variant that keeps each output keyed on its input and replays it when the input
    comes again, in state it owns (the core resets it before every launch)."""

    def kernel(m, s):
        key = m.f32(0).tobytes()[:64]
        cached = s.own.get(key)
        if cached is not None:
            m.f32(1)[:] = cached
            return 0.01
        sim.axpy(m, s)
        s.own[key] = m.f32(1).copy()
        return None

    return kernel


def _noop(_m, _s):
    return 0.01


def _pads(m, s):
    """Right output, plus a 'done' mark in the padding of a region's last page."""
    sim.axpy(m, s)
    s.padding = 64


def _one_sign_off(m, s):
    """Right output but for one element of y whose sign is flipped: one byte and one
    element unlike the expected state."""
    sim.axpy(m, s)
    y = m.f32(1)
    y[5] = -y[5] if y[5] != 0 else np.float32(1.0)
    return 0.01


@pytest.fixture
def reproducer(tmp_path, monkeypatch):
    return sim.axpy_reproducer(tmp_path, monkeypatch, {
        "captured": sim.axpy, "same.cubin": sim.axpy, "lazy.cubin": _first_launch_only(),
        "cache.cubin": _remembers_inputs(), "noop.cubin": _noop,
        "pads.cubin": _pads, "one.cubin": _one_sign_off})


def test_a_variant_that_stops_working_after_its_first_launch_has_a_void_timing(reproducer, capsys):
    lazy = reproducer.parent / "lazy.cubin"
    assert cli.main(["replay", str(reproducer), "--compare", str(lazy), "--rounds", "5"]) == 1
    out = capsys.readouterr().out
    assert "VOID (wrong output)" in out and "no speedup is reported" in out
    assert "fastest significant" not in out
    with Session(reproducer) as s:
        c = s.compare(CompareRequest(cubins=(str(lazy),), rounds=5))
    v = c.programs[1]
    assert v.void and v.interval is None
    r, k, _j, n = v.check.failures[0]
    assert (r, k) == (0, 0) and n > 0  # the first timed launch already left y unwritten (its first was a warm-up)
    assert not c.programs[0].void and c.programs[0].check.checked == 5 * 10


def test_a_void_timing_is_no_speedup_and_no_pass_in_a_build_row(reproducer):
    with Session(reproducer) as s:
        out = s.measure(reproducer.parent / "lazy.cubin", BuildRequest(perturb=0, rounds=5))
    # validation ran it once, after its first launch in the process: it did nothing there either
    assert out.speedup is None and out.significant is None
    assert out.validation == "fail" and "timing void: launch" in out.detail


def test_plain_replay_checks_its_launches_and_exits_1_when_void(reproducer, capsys):
    assert cli.main(["replay", str(reproducer), "--cubin", str(reproducer.parent / "same.cubin")]) == 0
    assert "check: all 20 timed launches checked on the captured input" in capsys.readouterr().out
    assert cli.main(["replay", str(reproducer), "--cubin", str(reproducer.parent / "noop.cubin"), "--json"]) == 1
    check = json.loads(capsys.readouterr().out)["check"]
    assert check["void"] and check["checked"] == 20 and len(check["failures"]) == 20


def test_a_launch_that_left_a_single_byte_unlike_the_expected_state_voids_the_timing(reproducer, capsys):
    """The smallest difference is a failure: every timed launch of a variant one byte (one
    element) off is named, `replay` exits 1 and `replay --compare` reports no speedup."""
    one = reproducer.parent / "one.cubin"
    assert cli.main(["replay", str(reproducer), "--cubin", str(one), "--json"]) == 1
    check = json.loads(capsys.readouterr().out)["check"]
    assert check["void"] and check["checked"] == 20 and len(check["failures"]) == 20
    assert {n for *_, n in check["failures"]} == {1}
    assert cli.main(["replay", str(reproducer), "--cubin", str(one)]) == 1
    assert "launch 1 of round 1 (the captured input) left 1 byte(s) or element(s)" in capsys.readouterr().out
    with Session(reproducer) as s:
        c = s.compare(CompareRequest(cubins=(str(one),), rounds=5))
    assert c.programs[1].void and c.programs[1].interval is None and not c.programs[0].void


def test_the_timing_rotates_over_the_captured_and_perturbed_inputs(reproducer, monkeypatch):
    seen: list[bytes] = []

    def recording(m, s):
        seen.append(m.f32(0).tobytes())
        sim.axpy(m, s)

    monkeypatch.setitem(sim.KERNELS, "captured", recording)
    with Session(reproducer) as s:
        c = s.compare(CompareRequest(cubins=(str(reproducer.parent / "cache.cubin"),), rounds=5, inputs=3))
    assert c.inputs == 3 and len(set(seen)) == 3  # the captured x and two perturbed ones
    cap = Capture.open(reproducer)
    x = cap.regions[0]
    assert cap.read_bytes(x.pre, x.size)[:len(seen[0])] in seen
    # a cache in state the variant owns is reset before every launch: it never hits, and
    # every launch wrote what the captured kernel writes on that input
    v = c.programs[1]
    assert not v.void and v.check.checked == 50 and v.check.inputs == 3


def test_one_input_is_the_plain_single_input_timing_and_says_so(reproducer):
    with Session(reproducer) as s:
        c = s.compare(CompareRequest(cubins=(str(reproducer.parent / "same.cubin"),), rounds=5, inputs=1))
    from kerncap.replay.significance import format_comparison

    assert c.inputs == 1 and "on the captured input only" in format_comparison(c)


def _scale(m, _s):
    """y = 2x: writes its output from its input alone."""
    m.f32(1)[:] = np.float32(2) * m.f32(0)


def _written_nothing(repro):
    """The capture of a dispatch of _scale whose output already held what it wrote
    ("written: none"): region 1's pre- and post-state are both 2x."""
    import xxhash

    cap = Capture.open(repro)
    x = np.frombuffer(cap.read_bytes(cap.regions[0].pre, cap.regions[0].size), np.float32)
    y = (np.float32(2) * x).tobytes()
    h = xxhash.xxh64_hexdigest(y)
    (repro / "capture" / "blobs" / f"{h}.bin").write_bytes(y)
    path = repro / "capture" / "manifest.json"
    m = json.loads(path.read_text())
    m["regions"][1].update(pre=[h], post=[h], written=False)
    path.write_text(json.dumps(m))
    sim.KERNELS.update({"captured": _scale, "same.cubin": _scale})


def test_a_dispatch_that_wrote_nothing_new_is_judged_on_a_canary_input(reproducer):
    _written_nothing(reproducer)
    noop = diff.validate_reproducers([reproducer], reproducer.parent / "noop.cubin", diff.ValidateRequest())
    assert noop.verdict == "fail"
    canary = noop.inputs[1]
    assert canary.input.startswith("canary input (regions 1 filled with 0xA5)") and canary.status == "fail"
    assert canary.changed_bytes and noop.inputs[0].changed_bytes == 0
    good = diff.validate_reproducers([reproducer], reproducer.parent / "same.cubin", diff.ValidateRequest())
    assert good.verdict == "pass" and good.discriminates and good.short() == "exact · canary"



def test_the_summary_counts_a_canary_input_apart_from_the_perturbed_ones(reproducer):
    """A dispatch that wrote nothing new, validated with --perturb 2: the captured input,
    the canary input and two perturbed ones, each counted once under its own name."""
    _written_nothing(reproducer)
    r = diff.validate_reproducers([reproducer], reproducer.parent / "same.cubin", diff.ValidateRequest(perturb=2))
    assert [i.input.split(" (")[0] for i in r.inputs] == ["captured input", "canary input", "perturbation 1",
                                                          "perturbation 2"]
    assert r.verdict == "pass", diff.format_report(r)
    assert r.summary() == "PASS on 4 inputs of 1 reproducer (1 captured + 2 perturbed + 1 canary)"
    assert r.to_dict()["summary"] == r.summary() and r.short() == "exact · p2 · canary"
    alone = diff.validate_reproducers([reproducer], reproducer.parent / "same.cubin", diff.ValidateRequest())
    assert alone.summary() == "PASS on 2 inputs of 1 reproducer (1 captured + 0 perturbed + 1 canary)"


def test_a_verdict_that_cannot_tell_a_noop_from_the_kernel_is_not_a_pass(reproducer):
    """No input on which the captured kernel changed a byte: inconclusive, and said why."""
    _written_nothing(reproducer)
    path = reproducer / "capture" / "manifest.json"
    m = json.loads(path.read_text())
    for p in m["params"]:
        p.pop("pointer", None)  # no parameter reaches memory: no canary can be placed
    path.write_text(json.dumps(m))
    r = diff.validate_reproducers([reproducer], reproducer.parent / "noop.cubin", diff.ValidateRequest())
    assert r.verdict == "inconclusive" and r.exit_status == 3 and not r.discriminates
    assert "NOT DISCRIMINATING" in r.summary() and "a kernel that does nothing would pass" in r.summary()
    assert r.short().endswith("no-op passes") and r.to_dict()["discriminates"] is False
    assert "no write set could be established" in " ".join(r.reproducers[0].notes)


def test_a_variant_that_writes_into_the_padding_of_a_page_fails(reproducer):
    """Bytes outside every region but inside its mapped page: compared with what the captured
    kernel leaves there (nothing), and zeroed before every launch."""
    r = diff.validate_reproducers([reproducer], reproducer.parent / "pads.cubin", diff.ValidateRequest())
    assert r.verdict == "fail"
    (bad,) = r.inputs[0].failures
    assert bad.kind == "padding" and bad.mismatched_bytes == 64 and "outside every region" in bad.name
    assert "padding of mapped pages" in diff.format_report(r)
    assert diff.validate_reproducers([reproducer], reproducer.parent / "same.cubin", diff.ValidateRequest()).passed
