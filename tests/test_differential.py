"""Validation you can trust, on the committed axpy capture (y += 0.5·x, in place) with
the replay core simulated in numpy (tests/replay_sim.py): determinism, the captured
input, perturbed inputs, several reproducers, and the bad inputs of issue 14. The GPU
suite runs the same paths on the real core (tests/gpu/test_trust_gpu.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from kerncap.errors import KerncapError
from kerncap.reproducer.format import Capture
from kerncap.replay import differential as diff
from kerncap.replay import perturb as pt

import replay_sim as sim


def validate_once(reproducer, cubin=None):
    """One launch checked against the captured post-state, through the reproducer's session."""
    from kerncap import api

    with api.open(reproducer, compile_worker=False) as s:
        return s.validate_once(cubin)

DEMO = Path(__file__).parents[1] / "kerncap_tui" / "demo" / "reproducer"
A = np.float32(0.5)


axpy, axpy_abs = sim.axpy, sim.axpy_abs


def cached(m, s):  # writes the captured output whatever the input
    y = m.f32(1)
    y[:] = np.frombuffer(bytes(s.post[s.index[1]]), dtype=np.float32)


def faulting(_m, _s):
    raise sim.sticky("cuStreamSynchronize on kernel _Z12axpy_inplacefPKfPfi of v.cubin failed: "
                     "CUDA_ERROR_ILLEGAL_ADDRESS (700)")


def indexes_with_x(m, s):  # the captured kernel faults on negative x (used as an index)
    if (m.f32(0) < 0).any():
        raise sim.sticky()
    axpy(m, s)


_noise = np.random.default_rng(5)


def noisy(m, _s):  # float atomics: the last bit of some elements varies from run to run
    y = m.f32(1)
    out = y + A * m.f32(0)
    flip = _noise.random(len(out)) < 0.2
    out[flip] = np.nextafter(out[flip], np.float32(np.inf))
    y[:] = out


def noisy_wrong(m, s):
    noisy(m, s)
    y = m.f32(1)
    y[:8] += np.float32(0.25)


@pytest.fixture
def reproducer(tmp_path, monkeypatch):
    return sim.axpy_reproducer(tmp_path, monkeypatch, {
        "captured": axpy, "same.cubin": axpy, "abs.cubin": axpy_abs, "cached.cubin": cached, "fault.cubin": faulting,
        "noisy.cubin": noisy, "noisy_wrong.cubin": noisy_wrong})


def validate(repro, cubin=None, **options) -> diff.TrustReport:
    dirs = repro if isinstance(repro, list) else [repro]
    cubin = None if cubin is None else dirs[0].parent / cubin
    return diff.validate_reproducers(dirs, cubin, diff.ValidateRequest(**options))


def test_captured_kernel_is_deterministic_and_recorded(reproducer):
    r = validate(reproducer)
    det = r.reproducers[0].determinism
    assert det.deterministic and det.runs == 3 and not det.capture_mismatch
    assert r.passed and r.summary() == "PASS on 1 input of 1 reproducer (1 captured + 0 perturbed)"
    record = json.loads((reproducer / "determinism.json").read_text())
    assert record["deterministic"] is True and record["gpu"]["name"] == "Simulated H200"
    assert diff.load_record(reproducer)["runs"] == 3


def test_correct_variant_passes_every_perturbed_input(reproducer):
    r = validate(reproducer, "same.cubin", perturb=4, seed=7)
    assert r.passed, diff.format_report(r)
    assert (r.perturb, r.seed) == (4, 7) and r.to_dict()["perturb"] == 4  # what ran, as --json says it
    assert r.summary() == "PASS on 5 inputs of 1 reproducer (1 captured + 4 perturbed)"
    assert r.short() == "exact · p4"
    text = diff.format_report(r)
    assert "perturbed: region 0 +0x0 (16 KiB float32): argument 1 `float const*`" in text
    assert "perturbed: region 1 +0x0 (16 KiB float32): argument 2 `float*`" in text
    assert "perturbation 2 (widened): pass [byte-exact]" in text



def test_a_perturbation_the_captured_kernels_outputs_ignore_proves_little(reproducer, monkeypatch):
    """Each perturbed input says how much it changed the captured kernel's outputs, the
    redrawn inputs themselves (x, region 0) not counted: axpy's y follows x, so they
    differ; a captured kernel that writes the captured y whatever its input changes
    nothing, and each perturbation says it proves little (x, redrawn, differs)."""
    r = validate(reproducer, "same.cubin", perturb=2)
    for i in r.inputs[1:]:
        assert i.notes[0].startswith("the captured kernel's outputs differ from the captured ones in "), i.notes
    monkeypatch.setitem(sim.KERNELS, "captured", cached)
    little = validate(reproducer, "cached.cubin", perturb=2)
    assert [i.status for i in little.inputs] == ["pass", "pass", "pass"]
    for i in little.inputs[1:]:
        assert i.notes[0] == "the captured kernel's outputs did not change on this input: it proves little", i.notes
    assert "it proves little" in diff.format_report(little)


def test_variant_relying_on_nonnegative_input_passes_the_capture_and_fails_widened_inputs(reproducer):
    r = validate(reproducer, "abs.cubin", perturb=4)
    status = {i.input: i.status for i in r.inputs}
    assert status["captured input"] == "pass"
    assert status["perturbation 1 (like the capture)"] == "pass"  # drawn inside [0, 4]: still no negatives
    assert status["perturbation 2 (widened)"] == "fail" and status["perturbation 4 (widened)"] == "fail"
    assert r.verdict == "fail" and r.exit_status == 1
    failing = r.inputs[2].failures
    assert [c.name for c in failing] == ["region 1"] and failing[0].mismatched_bytes > 0


def test_variant_whose_outputs_ignore_the_inputs_fails_perturbation(reproducer):
    r = validate(reproducer, "cached.cubin", perturb=2)
    assert r.inputs[0].status == "pass"
    assert [i.status for i in r.inputs[1:]] == ["fail", "fail"]


def test_a_server_that_dies_under_a_perturbed_input_is_a_baseline_fault(reproducer, monkeypatch):
    """A launch that takes the replay server down (the client's "died" error, as
    ReplayClient._died raises it; the next request starts a fresh server) is a fault of
    that input like a CUDA error is: the input is not covered, validation goes on.
    Mutation caught: is_fault knowing only the CUDA errors, so the death aborted validate."""
    class DiesOnTheFirstPerturbation(sim.InProcessClient):
        died = False

        def request(self, op, **args):
            if op == "reference" and args.get("fills") is not None and not DiesOnTheFirstPerturbation.died:
                DiesOnTheFirstPerturbation.died = True
                self.close()
                exc = KerncapError("replay server died during reference (killed by signal 11)", "")
                exc.kind = "died"
                raise exc
            return super().request(op, **args)

    monkeypatch.setattr("kerncap.replay.client.ReplayClient", DiesOnTheFirstPerturbation)
    r = validate(reproducer, "same.cubin", perturb=2)
    assert [i.status for i in r.inputs] == ["pass", "baseline fault", "pass"] and r.passed
    assert "replay server died" in r.inputs[1].notes[0]


def test_faulting_variant_is_a_failure_named_as_a_fault(reproducer):
    r = validate(reproducer, "fault.cubin")
    assert r.inputs[0].status == "variant fault" and r.verdict == "fail"
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in r.inputs[0].notes[0]


def test_perturbation_that_makes_the_captured_kernel_fault_is_reported_not_counted(reproducer, monkeypatch):
    monkeypatch.setitem(sim.KERNELS, "captured", indexes_with_x)
    monkeypatch.setitem(sim.KERNELS, "same.cubin", indexes_with_x)
    r = validate(reproducer, "same.cubin", perturb=4)
    status = [i.status for i in r.inputs]
    assert status == ["pass", "pass", "baseline fault", "pass", "baseline fault"]
    assert r.passed
    assert r.summary() == ("PASS on 3 inputs of 1 reproducer (1 captured + 2 perturbed); 2 perturbed inputs made "
                           "the captured kernel itself fault (not counted)")
    assert "--keep REGION" in r.inputs[2].notes[0]


def test_nondeterministic_kernel_gets_a_class_from_its_own_spread(reproducer, monkeypatch):
    monkeypatch.setitem(sim.KERNELS, "captured", noisy)
    ok = validate(reproducer, "noisy.cubin", perturb=2)
    det = ok.reproducers[0].determinism
    assert not det.deterministic and [s.region for s in det.regions] == [1]
    spread = det.regions[0]
    assert spread.dtype == "float32" and 0 < spread.max_abs < 1e-5 and spread.atol == 4 * spread.max_abs
    assert "NONDETERMINISTIC" in det.text() and "tolerance class atol" in det.text()
    assert ok.passed, diff.format_report(ok)
    assert ok.mode == "tolerance (nondeterministic)" and ok.short() == "nondet tol · p2"
    bad = validate(reproducer, "noisy_wrong.cubin", perturb=2)
    assert bad.verdict == "fail" and all(i.status == "fail" for i in bad.inputs)
    record = diff.load_record(reproducer)
    assert record["deterministic"] is False and record["regions"][0]["region"] == 1


def polluted(m, s):  # always the same, never the captured bytes (another stream wrote there)
    axpy(m, s)
    m.f32(1)[:4] = np.float32(-1)


def test_replay_that_differs_from_the_capture_only_deterministically_fails_after_more_runs(reproducer, monkeypatch):
    monkeypatch.setitem(sim.KERNELS, "captured", polluted)
    r = validate(reproducer)
    det = r.reproducers[0].determinism
    assert det.deterministic and det.runs == 3 * diff.ESCALATE and det.capture_mismatch == ["region 1"]
    assert "differs from the captured post-state in region 1" in det.text()
    assert r.verdict == "fail"


def test_two_identical_runs_unlike_the_capture_are_enough_to_run_again_one_is_not(reproducer, monkeypatch):
    """`--runs 2`, the fewest that can show the runs agree: a replay unlike the capture whose
    two runs agree is run 2 × ESCALATE times before it is called polluted; `--runs 1` shows
    no agreement, so it is not escalated. Mutation caught: escalating only above 2 runs."""
    monkeypatch.setitem(sim.KERNELS, "captured", polluted)
    two = validate(reproducer, runs=2).reproducers[0].determinism
    assert two.deterministic and two.runs == 2 * diff.ESCALATE and two.capture_mismatch == ["region 1"]
    assert f"deterministic ({2 * diff.ESCALATE} runs identical)" in two.text()
    one = validate(reproducer, runs=1).reproducers[0].determinism
    assert one.runs == 1 and "determinism not checked (--runs 1)" in one.text()


def test_nondeterministic_region_of_unknown_dtype_is_inconclusive_until_its_dtype_is_given(reproducer, monkeypatch):
    manifest = reproducer / "capture" / "manifest.json"
    m = json.loads(manifest.read_text())
    del m["kernel"]["demangled"]
    manifest.write_text(json.dumps(m))
    monkeypatch.setitem(sim.KERNELS, "captured", noisy)
    r = validate(reproducer, "noisy.cubin")
    assert r.verdict == "inconclusive" and r.exit_status == 3, diff.format_report(r)
    assert "its dtype is unknown, so it cannot be judged (--region-dtype 1=T)" in r.reproducers[0].determinism.text()
    given = validate(reproducer, "noisy.cubin", region_dtypes={1: "float32"}, dtype="float32", atol=1e-4)
    assert given.passed and given.mode == "tolerance"
    assert "exceeds atol" not in diff.format_report(given)
    # an atol below the kernel's own spread, no rtol: a correct variant may fail, and it is said
    tight = validate(reproducer, "noisy.cubin", region_dtypes={1: "float32"}, dtype="float32", atol=1e-12)
    assert "the captured kernel's own spread (max abs" in diff.format_report(tight)
    assert "exceeds atol 1e-12" in diff.format_report(tight)
    derived = validate(reproducer, "noisy.cubin", region_dtypes={1: "float32"})
    assert derived.reproducers[0].determinism.regions[0].dtype == "float32" and derived.passed


def test_keep_leaves_a_region_alone_and_a_missing_one_is_named(reproducer):
    r = validate(reproducer, "same.cubin", perturb=2, keep=(0,))
    assert "not perturbed: region 0 +0x0 (16 KiB float32): argument 1 `float const*`; kept (--keep)" in r.reproducers[0].plan
    with pytest.raises(KerncapError, match=r"--keep 9: the capture has no region 9") as err:
        validate(reproducer, "same.cubin", perturb=2, keep=(9,))
    assert "its regions are 0, 1" in err.value.hint


def test_one_sessions_validations_each_follow_their_own_keep(reproducer):
    """A session (the workbench's, one in MCP's pool) plans its perturbations once per
    request shape: a second validation with --keep 0 leaves region 0 alone, and a third
    without it perturbs region 0 again, on the same session."""
    from kerncap import api

    cubin = str(reproducer.parent / "same.cubin")
    kept = "not perturbed: region 0 +0x0 (16 KiB float32): argument 1 `float const*`; kept (--keep)"
    with api.open(reproducer, compile_worker=False) as s:
        plans = [s.validate(api.ValidateRequest(cubin=cubin, perturb=2, keep=keep)).reproducers[0].plan
                 for keep in ((), (0,), ())]
    assert [kept in p for p in plans] == [False, True, False], plans
    assert plans[0] == plans[2]


def test_reproducer_without_known_dtypes_says_so_and_validates_the_rest(reproducer):
    manifest = reproducer / "capture" / "manifest.json"
    m = json.loads(manifest.read_text())
    del m["kernel"]["demangled"]
    manifest.write_text(json.dumps(m))
    r = validate(reproducer, "same.cubin", perturb=8)
    rep = r.reproducers[0]
    assert r.passed and len(r.inputs) == 1
    assert any("no region could be perturbed" in n for n in rep.notes)
    assert "not perturbed: region 0 (16 KiB): no argument of known type points into it" in rep.plan
    assert "note: the kernel's parameter types are unknown (no demangled C++ signature, no Triton record)" in rep.plan


def test_region_dtype_makes_an_unknown_region_perturbable(reproducer):
    manifest = reproducer / "capture" / "manifest.json"
    m = json.loads(manifest.read_text())
    del m["kernel"]["demangled"]
    manifest.write_text(json.dumps(m))
    r = validate(reproducer, "abs.cubin", perturb=2, region_dtypes={0: "float32"})
    assert r.reproducers[0].plan[0].startswith("perturbed: region 0 +0x0 (16 KiB float32): --region-dtype 0=float32")
    assert r.verdict == "fail"  # widened x breaks the variant that assumed x >= 0


def test_several_reproducers_of_one_kernel(reproducer, tmp_path):
    second = tmp_path / "axpy2"
    shutil.copytree(reproducer, second)
    r = validate([reproducer, second], "same.cubin", perturb=2)
    assert r.summary() == "PASS on 6 inputs of 2 reproducers (2 captured + 4 perturbed)"


def test_several_reproducers_report_the_seed_that_drew_their_perturbed_inputs(reproducer, tmp_path):
    """`kerncap validate DIR DIR --seed S`: the report (its text and its JSON) names the seed
    the perturbed inputs were drawn from, so that the same inputs can be drawn again."""
    second = tmp_path / "axpy2"
    shutil.copytree(reproducer, second)
    r = validate([reproducer, second], "same.cubin", perturb=2, seed=7)
    assert r.passed and r.seed == 7 and r.to_dict()["seed"] == 7
    assert diff.format_report(r).count("perturbation plan (seed 7):") == 2


def test_reproducers_of_different_kernels_are_refused(reproducer):
    with pytest.raises(KerncapError, match="the reproducers hold different kernels"):
        validate([reproducer, DEMO])


@pytest.mark.parametrize("k", [0, -1, pt.MAX_PERTURBATIONS + 1])
def test_perturbation_count_must_be_sensible(k):
    with pytest.raises(KerncapError, match="must be between 1 and"):
        pt.check_count(k)



def test_a_build_records_what_the_validation_covered_and_the_interval(reproducer, monkeypatch):
    """What a History row holds (Session.measure, the step of every front end's build):
    the verdict, what it covered and the speedup's interval."""
    from kerncap.session.options import BuildRequest
    from kerncap.session.session import Session

    request = BuildRequest()
    with Session(reproducer) as s:
        base = s.measure(None, request)
        assert base.validation == "pass" and base.validation_detail == "exact" and base.speedup is None
        good = s.measure(reproducer.parent / "same.cubin", request)
        assert good.validation == "pass" and good.validation_detail == f"exact · p{request.perturb}"
        assert good.speedup_low <= 1.0 <= good.speedup_high and good.significant is False
        bad = s.measure(reproducer.parent / "abs.cubin", request)
        assert bad.validation == "fail" and "perturbation 2 (widened): fail (region 1)" in bad.detail


def test_a_build_times_only_inputs_the_captured_kernel_does_not_fault_on(reproducer, monkeypatch):
    """Validation says which perturbed inputs make the captured kernel itself fault
    (perturbations 2 and 4 here: widened x holds negatives, which it uses as indexes); the
    build's timing rotates over the captured input and perturbed ones and leaves exactly
    those out, so the variant is timed and passes."""
    from kerncap.session.options import BuildRequest
    from kerncap.session.session import Session

    monkeypatch.setitem(sim.KERNELS, "captured", indexes_with_x)
    monkeypatch.setitem(sim.KERNELS, "same.cubin", indexes_with_x)
    request = BuildRequest(perturb=4, inputs=3, rounds=5)
    with Session(reproducer) as s:
        out = s.measure(reproducer.parent / "same.cubin", request)
    assert [i.status for i in out.report.inputs] == ["pass", "pass", "baseline fault", "pass", "baseline fault"]
    assert out.validation == "pass", out.detail
    assert out.speedup is not None and out.speedup_low is not None  # timed, with its interval


def test_a_timing_that_skips_faulting_inputs_still_rotates_over_as_many(reproducer, monkeypatch):
    """`inputs` 3 with perturbations 2 and 4 left out (the captured kernel faults on them):
    the timing takes the next usable ones (1 and 3), so it still rotates over 3 inputs, the
    captured one and 2 perturbed, and none it was told to skip."""
    from kerncap.session.options import CompareRequest
    from kerncap.session.session import Session

    monkeypatch.setitem(sim.KERNELS, "captured", indexes_with_x)
    monkeypatch.setitem(sim.KERNELS, "same.cubin", indexes_with_x)
    with Session(reproducer) as s:
        c = s.compare(CompareRequest(cubins=(str(reproducer.parent / "same.cubin"),), rounds=5, inputs=3,
                                     skip=(1, 3)))
    assert c.inputs == 3, (c.inputs, c.notes)
    assert c.programs[-1].interval is not None


def test_a_variant_that_faults_only_on_a_perturbed_input_is_an_error_not_a_wrong_answer(reproducer, monkeypatch):
    """A variant that crashes on some perturbed inputs (negative x used as an index) and is
    right on the captured one, timed on the captured input alone: the History row says
    `error` (a crash, docs/cli.md: `build` exits 3), not `fail` (a wrong answer, exit 1),
    and the detail names the faulting inputs."""
    from kerncap.session.options import BuildRequest
    from kerncap.session.session import Session

    monkeypatch.setitem(sim.KERNELS, "same.cubin", indexes_with_x)  # the captured kernel stays axpy
    with Session(reproducer) as s:
        out = s.measure(reproducer.parent / "same.cubin", BuildRequest(perturb=4, inputs=1, rounds=5))
    assert [i.status for i in out.report.inputs] == ["pass", "pass", "variant fault", "pass", "variant fault"]
    assert out.report.verdict == "fail"  # the trust report's verdict; the row's is sharper
    assert out.validation == "error", (out.validation, out.detail)
    assert "perturbation 2 (widened): variant fault" in out.detail
    assert out.speedup is not None  # the captured input was timed


def test_the_seed_picks_the_perturbed_inputs(reproducer, monkeypatch):
    """`--seed` reaches the fills: the perturbed inputs the kernels see are the ones the
    plan draws for that seed (the same again for the same seed, others for another)."""
    seen: list[bytes] = []

    def recording(m, s):
        seen.append(m.f32(0).tobytes())  # x as this run found it
        axpy(m, s)

    monkeypatch.setitem(sim.KERNELS, "captured", recording)

    def inputs(seed):
        seen.clear()
        assert validate(reproducer, "same.cubin", perturb=2, seed=seed).passed
        return list(dict.fromkeys(seen))  # each distinct x, in the order the runs saw it

    seven, again, eight = inputs(7), inputs(7), inputs(8)
    assert len(seven) == 3 and seven == again  # the captured x, then perturbations 1 and 2
    assert seven[0] == eight[0] and not set(seven[1:]) & set(eight[1:])
    plan = pt.plan(Capture.open(reproducer))
    for k, x in enumerate(seven[1:]):  # what the plan draws for seed 7, perturbation k
        (fill,) = [f for f in plan.fills(7, k) if f["region"] == 0]
        assert x == pt.reference_fill(**fill)


def wrong_last(m, s):  # right everywhere but the last 4 elements of y, the capture's last region
    axpy(m, s)
    m.f32(1)[-4:] += np.float32(1)


def test_a_one_run_validation_compares_every_region_the_last_too(reproducer, monkeypatch):
    """`Session.validate_once` (one run against the captured post-state; the replay server's
    NativeSession.validate, also prune's and the sanitizer's check): a check per region,
    the last one included, and a variant wrong only there fails on it."""
    from kerncap import api

    (reproducer.parent / "wrong_last.cubin").write_bytes(b"wrong_last.cubin")
    monkeypatch.setitem(sim.KERNELS, "wrong_last.cubin", wrong_last)
    ok = validate_once(reproducer)
    assert [c.name for c in ok.regions] == ["region 0", "region 1"] and ok.passed
    bad = validate_once(reproducer, cubin=reproducer.parent / "wrong_last.cubin")
    assert not bad.passed and [c.name for c in bad.regions if not c.passed] == ["region 1"]
    assert min(at for at, *_ in bad.regions[-1].first_mismatches) >= 16384 - 16  # in the last 4 floats


def test_a_one_run_validation_with_a_dtype_alone_compares_element_wise(reproducer, monkeypatch):
    """`Session.validate_once(dtype=...)` with no atol/rtol: "byte-exact unless atol/rtol/
    dtype is given" (ReplayClient.validate), so the regions are compared element-wise in
    that dtype (tolerance 0), measuring the error; per-region dtypes cross the replay
    protocol and decide how their region reads. Mutation caught: the server's validate
    asking for element-wise checks on atol/rtol only, so a dtype alone compared byte-exact."""
    from kerncap import api

    (reproducer.parent / "wrong_last.cubin").write_bytes(b"wrong_last.cubin")
    monkeypatch.setitem(sim.KERNELS, "wrong_last.cubin", wrong_last)
    with api.open(reproducer, compile_worker=False) as s:
        cubin = reproducer.parent / "wrong_last.cubin"
        v = s.validate_once(cubin, dtype="float32")
        as_int = s.validate_once(cubin, atol=0.5, dtypes={1: "int32"})
        as_float = s.validate_once(cubin, atol=1.5, dtypes={1: "float32"})
    assert v.mode == "tolerance" and [c.dtype for c in v.regions] == ["float32", "float32"] and not v.passed
    (bad,) = [c for c in v.regions if not c.passed]
    assert bad.name == "region 1" and bad.mismatched_elements == 4 and bad.max_abs_err == pytest.approx(1.0)
    assert as_float.passed and [c.dtype for c in as_int.regions] == ["float32", "int32"] and not as_int.passed


def test_a_one_run_validation_reads_regions_of_unknown_type_in_the_dtype_given(reproducer, monkeypatch):
    """`validate_once(dtype=T)` on a capture whose parameter types are unknown (no demangled
    signature): every region is read as T, the default for a region kerncap knows nothing of
    ("else `default`, else float32"). A variant 1.0 off in 4 floats passes atol 1.5 read as
    float32 and fails it read as int32 (the bits differ by millions). Mutation caught: the
    server's region_dtypes ignoring the dtype given and reading float32."""
    from kerncap import api

    manifest = reproducer / "capture" / "manifest.json"
    m = json.loads(manifest.read_text())
    del m["kernel"]["demangled"]
    manifest.write_text(json.dumps(m))
    (reproducer.parent / "wrong_last.cubin").write_bytes(b"wrong_last.cubin")
    monkeypatch.setitem(sim.KERNELS, "wrong_last.cubin", wrong_last)
    cubin = reproducer.parent / "wrong_last.cubin"
    with api.open(reproducer, compile_worker=False) as s:
        as_int = s.validate_once(cubin, atol=1.5, dtype="int32")
        as_float = s.validate_once(cubin, atol=1.5, dtype="float32")
        as_double = s.validate_once(cubin, dtype="float64")
    assert [c.dtype for c in as_int.regions] == ["int32", "int32"] and not as_int.passed
    assert [c.dtype for c in as_float.regions] == ["float32", "float32"] and as_float.passed
    assert [c.dtype for c in as_double.regions] == ["float64", "float64"]


def test_the_timing_check_holds_a_varying_region_to_its_tolerance_class(reproducer, monkeypatch):
    """A region the captured kernel itself varies in (known dtype) is checked after every
    timed launch within its recorded class, not skipped: the variant that stays within it
    times, the one 0.25 off in 8 elements of it is void."""
    from kerncap.session.options import CompareRequest
    from kerncap.session.session import Session

    monkeypatch.setitem(sim.KERNELS, "captured", noisy)
    assert validate(reproducer, "noisy.cubin").passed  # records region 1's class (determinism.json)
    with Session(reproducer) as s:
        c = s.compare(CompareRequest(cubins=(str(reproducer.parent / "noisy.cubin"),
                                             str(reproducer.parent / "noisy_wrong.cubin")), rounds=5))
    base, ok, wrong = c.programs
    assert not base.void and not ok.void and ok.interval is not None
    assert wrong.void and wrong.interval is None and wrong.check.failures[0][3] == 8


def drifted(m, s):  # nondeterministic, and always 1e-3 off the capture in y's first 4 elements
    noisy(m, s)
    m.f32(1)[:4] += np.float32(1e-3)


def test_a_nondeterministic_kernels_class_covers_its_replays_difference_from_the_capture(reproducer, monkeypatch):
    """The tolerance class of a varying region is derived from every difference the
    determinism check saw: the later runs against the first, and the first against the
    captured post-state (what the variant is compared with). A variant that is the captured
    kernel again, 1e-3 off the capture where every replay of it is, passes."""
    (reproducer.parent / "drifted.cubin").write_bytes(b"drifted.cubin")
    monkeypatch.setitem(sim.KERNELS, "captured", drifted)
    monkeypatch.setitem(sim.KERNELS, "drifted.cubin", drifted)
    r = validate(reproducer, "drifted.cubin")
    (spread,) = r.reproducers[0].determinism.regions
    assert spread.region == 1 and spread.dtype == "float32"
    assert spread.max_abs == pytest.approx(1e-3, rel=0.01) and spread.atol == 4 * spread.max_abs
    assert diff.load_record(reproducer)["regions"][0]["atol"] == pytest.approx(4e-3, rel=0.01)
    assert r.passed, diff.format_report(r)
