"""Speedups with bootstrap intervals over interleaved rounds (kerncap.replay.significance)
and `kerncap replay --compare` end to end on the simulated replay core."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import replay_sim as sim

from kerncap import cli
from kerncap.errors import KerncapError
from kerncap.replay import significance as sig
from kerncap.replay.clocks import ClockSampler



def rounds(rng, n_rounds, per_round, ms, drift=0.03, noise=0.05, outliers=0.03):
    """Round-level drift shared by every program of a round, per-launch noise and a few
    slow outliers, like timings on a shared GPU."""
    f = np.exp(rng.normal(0, drift, size=(n_rounds, 1)))

    def one(scale):
        t = ms / scale * f * np.exp(rng.normal(0, noise, size=(n_rounds, per_round)))
        t[rng.random(t.shape) < outliers] *= 1.5
        return t.tolist()

    return one


def binomial_range(n: int, p: float, tail: float = 1e-3) -> tuple[int, int]:
    """The counts k of Binomial(n, p) outside which each tail holds at most `tail`."""
    pmf = [math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)]
    lo = next(k for k in range(n + 1) if sum(pmf[:k + 1]) > tail)
    hi = next(k for k in range(n, -1, -1) if sum(pmf[k:]) > tail)
    return lo, hi


def test_interval_coverage_of_the_true_speedup_is_the_nominal_rate():
    """Coverage, simulated: 500 comparisons of two programs whose times come from one known
    distribution (60 rounds of one log-normal time), so the true speedup is 1. A C %
    interval must contain 1 in about C % of them: for 90 % and for the default 99 %, the
    count covered lies within the binomial range of the nominal rate (each tail 0.1 %;
    seeds 44 and 45 cover 449 and 457 at 90 %, 496 and 495 at 99 %). An interval taken at
    the wrong quantile (alpha instead of alpha / 2: an 80 % and a 98 % one) covers 415 at
    the 90 % setting, far below its range. (With 30 rounds the percentile interval
    of a median is lumpy: 93 % at 90 %.)"""
    rng = np.random.default_rng(44)
    trials, covered = 500, {0.9: 0, sig.DEFAULT_CONFIDENCE: 0}
    for _ in range(trials):
        b, v = (np.exp(rng.normal(0, 0.05, size=(60, 1))).tolist() for _ in range(2))
        seed = int(rng.integers(1 << 30))
        for confidence in covered:
            iv = sig.bootstrap_speedup(b, v, confidence=confidence, seed=seed)
            covered[confidence] += iv.low <= 1.0 <= iv.high
    for confidence, count in covered.items():
        lo, hi = binomial_range(trials, confidence)
        assert lo <= count <= hi, (confidence, count, (lo, hi))


def test_a_five_percent_faster_variant_is_significant():
    rng = np.random.default_rng(12)
    for _ in range(20):
        draw = rounds(rng, 30, 10, 0.050, noise=0.02)
        iv = sig.bootstrap_speedup(draw(1.0), draw(1.05))
        assert iv.significant and iv.verdict == "faster" and iv.low > 1.0, iv
        assert abs(iv.speedup - 1.05) < 0.02


def test_interval_text_and_determinism():
    b = [[1.0, 1.1, 0.9]] * 6
    v = [[0.5, 0.55, 0.45]] * 6
    iv = sig.bootstrap_speedup(b, v)
    assert iv.speedup == pytest.approx(2.0) and iv.text() == "2.00× [2.00–2.00] faster"
    assert sig.bootstrap_speedup(b, v) == iv  # fixed seed: same measurements, same interval
    same = sig.bootstrap_speedup(b, b)
    assert not same.significant and same.verdict == "within noise"


def test_the_bootstrap_resamples_every_round_the_last_one_too():
    """Rounds are the unit of resampling: each of the R rounds can be drawn. Five rounds
    alike for both programs but one, in which the variant ran 10x faster: a median of the
    resampled rounds takes that round's times in about 6 % of the draws (3 or more of the 5
    draws), so the upper end of the 99 % interval is 10 wherever that round lies. A
    resampling that never draws the last round (an off-by-one in the bound) gives an
    interval of [1.00-1.00] when the odd round is the last."""
    for k in range(5):
        b = [[1.0, 1.0, 1.0]] * 5
        v = [[0.1, 0.1, 0.1] if r == k else [1.0, 1.0, 1.0] for r in range(5)]
        iv = sig.bootstrap_speedup(b, v)
        assert iv.speedup == pytest.approx(1.0) and iv.low == pytest.approx(1.0), (k, iv)
        assert iv.high == pytest.approx(10.0), (k, iv)


def test_too_few_rounds_and_bad_confidence_are_refused():
    with pytest.raises(KerncapError, match="too few for a confidence interval"):
        sig.bootstrap_speedup([[1.0]] * 3, [[1.0]] * 3)
    with pytest.raises(KerncapError, match="outside"):
        sig.bootstrap_speedup([[1.0]] * 6, [[1.0]] * 6, confidence=1.0)


def test_rounds_needed_for_a_minimum_measurement_time():
    assert sig.rounds_needed(30, 0.0, [0.05]) == 30
    assert sig.rounds_needed(30, 1.0, [0.05, 0.5]) == 20000  # 1 s of a 0.05 ms/round program
    assert sig.rounds_needed(30, 0.001, [1.0]) == 30


def raw(programs, floor=0.002, clock=None):
    return {"programs": programs, "iterations": 3, "warmup": 1, "flush_l2": False, "floor_ms": floor,
            "clock": clock or {"available": False, "unavailable_reason": "nvidia-ml-py (pynvml) is not installed"},
            "seconds": 1.5, "notes": []}


def test_analyse_warns_about_the_launch_floor_and_the_clock():
    base = {"label": "captured cubin", "cubin": None, "rounds": [[0.004, 0.0041, 0.0039]] * 6}
    fast = {"label": "v.cubin", "cubin": "v.cubin", "rounds": [[0.0040, 0.0040, 0.0041]] * 6}
    clock = {"available": True, "samples_mhz": [1980, 1755, 1980], "max_mhz": 1980, "throttle": ["software power cap"]}
    c = sig.analyse(raw([base, fast], clock=clock))
    warnings = c.warnings()
    assert any("varied from 1755 to 1980 MHz" in w for w in warnings)
    assert any("throttled" in w and "software power cap" in w for w in warnings)
    assert any("within 3× of the launch floor" in w for w in warnings)
    text = sig.format_comparison(c)
    assert "SM clock: 1755–1980 MHz" in text and "within noise" in text
    assert "no variant is significantly faster" in text
    again = sig.TimingComparison.from_dict(json.loads(json.dumps(c.to_dict())))
    assert again.variants[0].interval == c.variants[0].interval and again.clock == c.clock


def test_the_clock_and_floor_warnings_start_at_their_thresholds():
    """A clock that varied 2 % or 4.7 % is no warning, 5.3 % is (max/min − 1 against
    CLOCK_DRIFT_WARN); a median exactly 3× the launch floor has no floor note, one just
    below it has; a minimum time of 0 adds no rounds."""
    def clock_warned(samples):
        return bool(sig.ClockReport(available=True, samples_mhz=samples).warnings())

    assert not clock_warned([1960, 2000]) and not clock_warned([1910, 2000]) and clock_warned([1900, 2000])
    base = {"label": "captured cubin", "cubin": None, "rounds": [[0.006, 0.006, 0.006]] * 6}
    low = {"label": "v.cubin", "cubin": "v.cubin", "rounds": [[0.00599, 0.00599, 0.00599]] * 6}
    c = sig.analyse(raw([base, low], floor=0.002))
    assert not c.programs[0].notes and any("launch floor" in n for n in c.programs[1].notes)
    assert sig.rounds_needed(7, 0.0, [0.0]) == 7 and sig.rounds_needed(7, 0, [2.0]) == 7


def test_a_short_variants_speedup_notes_what_the_events_around_its_launch_may_hide():
    """Triton's smooth at 1 Mi floats on the H100 (facts §49): 12.2× between events,
    13.5× in the app. Both medians less the floor bound the kernel's own speedup; the note
    comes where that bound is 1 % or more above the medians' ratio, not for a long kernel
    (smooth's CUDA edit, 88.6 / 77.9 µs: +0.4 %), nor for a slower variant."""
    def note(base_ms, variant_ms, floor=0.0025):
        base = {"label": "captured cubin", "cubin": None, "rounds": [[base_ms] * 3] * 6}
        var = {"label": "v.cubin", "cubin": "v.cubin", "rounds": [[variant_ms] * 3] * 6}
        return [n for n in sig.analyse(raw([base, var], floor=floor)).programs[1].notes if "events around" in n]

    short = note(0.320, 0.026)
    assert len(short) == 1 and "up to 13.511×" in short[0] and "floor, 2.50 us)" in short[0]
    assert not note(0.0886, 0.0779) and not note(0.026, 0.320) and not note(0.320, 0.026, floor=None)
    assert sig.bracket_bound(1.0, 0.5, 0.005) is None  # 1.005× the ratio: under BRACKET_NOTE
    assert sig.bracket_bound(1.0, 0.5, 0.02) == pytest.approx(0.98 / 0.48)


def test_a_saved_comparison_keeps_the_inputs_its_launches_rotated_over():
    """A comparison written to JSON (the workbench's History, --json) and read back still
    says it rotated over the captured and perturbed inputs, not "on the captured input
    only". Mutation caught: from_dict dropping `inputs`."""
    base = {"label": "captured cubin", "cubin": None, "rounds": [[1.0, 1.1, 0.9]] * 6}
    other = {"label": "v.cubin", "cubin": "v.cubin", "rounds": [[1.0, 1.05, 0.95]] * 6}
    c = sig.analyse({**raw([base, other], floor=None), "inputs": 4})
    again = sig.TimingComparison.from_dict(json.loads(json.dumps(c.to_dict())))
    assert c.inputs == 4 and again.inputs == 4
    assert "rotating over 4 inputs (the captured one and 3 perturbed)" in sig.format_comparison(again)


def test_a_significantly_slower_variant_is_never_the_fastest():
    """Only a variant whose whole interval lies above 1 is named: one significantly slower
    (its interval wholly below 1) is not, even as the only significant one."""
    base = {"label": "captured cubin", "cubin": None, "rounds": [[1.0, 1.1, 0.9]] * 6}
    slower = {"label": "slow.cubin", "cubin": "slow.cubin", "rounds": [[2.0, 2.2, 1.8]] * 6}
    c = sig.analyse(raw([base, slower], floor=None))
    iv = c.variants[0].interval
    assert iv.significant and iv.verdict == "slower" and iv.high < 1.0
    assert sig.best_significant(c) is None
    assert "no variant is significantly faster than the captured cubin" in sig.format_comparison(c)
    faster = {"label": "fast.cubin", "cubin": "fast.cubin", "rounds": [[0.5, 0.55, 0.45]] * 6}
    assert sig.best_significant(sig.analyse(raw([base, slower, faster], floor=None))).label == "fast.cubin"


def test_the_fastest_significant_is_the_fastest_of_the_faster_variants():
    """Two variants significantly faster (1.5x and 2x): the one named is the 2x one,
    whichever order they were given in."""
    base = {"label": "captured cubin", "cubin": None, "rounds": [[1.0, 1.1, 0.9]] * 6}
    x15 = {"label": "x15.cubin", "cubin": "x15.cubin", "rounds": [[0.667, 0.733, 0.6]] * 6}
    x2 = {"label": "x2.cubin", "cubin": "x2.cubin", "rounds": [[0.5, 0.55, 0.45]] * 6}
    for order in ([x15, x2], [x2, x15]):
        c = sig.analyse(raw([base, *order], floor=None))
        assert all(p.interval.verdict == "faster" for p in c.variants)
        assert sig.best_significant(c).label == "x2.cubin"
        assert "fastest significant: x2.cubin (2.00×" in sig.format_comparison(c)


def test_unavailable_clock_is_said():
    base = {"label": "captured cubin", "cubin": None, "rounds": [[1.0, 1.0, 1.0]] * 6}
    text = sig.format_comparison(sig.analyse(raw([base])))
    assert "SM clock: not reported (nvidia-ml-py (pynvml) is not installed)" in text


def test_clock_sampler_without_a_gpu_says_why():
    s = ClockSampler("0000:00:00.0")
    s.sample()
    report = s.report()
    assert report["available"] is False and report["unavailable_reason"]
    s.close()


# -- kerncap replay --compare on the simulated core -----------------------------------------


def slow(m, _s):
    pass


slow.ms = 0.050


def fast(m, _s):
    pass


fast.ms = 0.045


@pytest.fixture
def axpy_repro(tmp_path, monkeypatch):
    return sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": slow, "same.cubin": slow, "fast.cubin": fast})


def test_replay_compare_names_the_significant_variant(axpy_repro, capsys):
    same, fast_ = axpy_repro.parent / "same.cubin", axpy_repro.parent / "fast.cubin"
    assert cli.main(["replay", str(axpy_repro), "--compare", str(same), str(fast_), "--rounds", "20"]) == 0
    out = capsys.readouterr().out
    assert "20 interleaved rounds × 10 iterations per program (after 2 warm-up each), rotating over 4 inputs" in out
    assert f"{same}" in out and "within noise" in out
    assert f"fastest significant: {fast_} (1.1" in out


def test_replay_compare_min_time_adds_rounds_and_json(axpy_repro, capsys):
    fast_ = axpy_repro.parent / "fast.cubin"
    assert cli.main(["replay", str(axpy_repro), "--compare", str(fast_), "--rounds", "5", "--min-time", "0.01",
                     "--iterations", "4", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # every program gets >= 10 ms: the faster one needs ~10 ms / (4 × 0.045 ms) ≈ 56 rounds
    assert 54 <= len(doc["programs"][0]["rounds"]) <= 58
    assert sum(map(sum, doc["programs"][1]["rounds"])) >= 10.0
    assert doc["programs"][1]["interval"]["significant"] is True and doc["floor_ms"] == pytest.approx(0.002)


def axpy(m, _s):
    y = m.f32(1)
    y[:] = y + np.float32(0.5) * m.f32(0)


axpy.ms = 0.050


def test_warm_l2_reaches_the_core_in_replay_and_compare_and_is_said(tmp_path, monkeypatch, capsys):
    """--warm-l2 (the kernel's memory read into L2 before each launch, issue 46's in-app
    comparison) reaches the core's timing loop in both verbs (the stand-in's kernels run
    10 % faster warm), the JSON records it and the text names the state."""
    axpy_repro = sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": axpy, "fast.cubin": axpy})
    fast_ = axpy_repro.parent / "fast.cubin"
    medians = {}
    for warm in ([], ["--warm-l2"]):
        assert cli.main(["replay", str(axpy_repro), "-n", "5", "--json", *warm]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["warm_l2"] is bool(warm) and doc["flush_l2"] is False
        medians[bool(warm)] = doc["median_ms"]
    assert medians[True] == pytest.approx(0.9 * medians[False], rel=0.05)
    assert cli.main(["replay", str(axpy_repro), "--compare", str(fast_), "--rounds", "5", "--warm-l2",
                     "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["warm_l2"] is True and doc["flush_l2"] is False
    assert doc["programs"][0]["median_ms"] == pytest.approx(0.9 * medians[False], rel=0.05)
    assert cli.main(["replay", str(axpy_repro), "--compare", str(fast_), "--rounds", "5", "--warm-l2"]) == 0
    assert "the kernel's memory read into L2 before each launch" in capsys.readouterr().out


@pytest.mark.parametrize("args", [["--compare", "FAST"], []])
def test_flush_l2_and_warm_l2_together_are_refused_before_any_launch(axpy_repro, args, capsys):
    args = [str(axpy_repro.parent / "fast.cubin") if a == "FAST" else a for a in args]
    assert cli.main(["replay", str(axpy_repro), *args, "--flush-l2", "--warm-l2"]) == 2
    err = capsys.readouterr().err
    assert "--flush-l2 and --warm-l2 ask for opposite L2 states" in err and "choose one" in err


def test_warm_l2_with_ncu_is_refused(axpy_repro, capsys):
    """Nsight Compute sets the cache itself: a warm L2 it would not honour is refused."""
    assert cli.main(["replay", str(axpy_repro), "--ncu", "--warm-l2"]) == 2
    assert "--warm-l2 does not apply with --ncu" in capsys.readouterr().err
    assert cli.main(["replay", str(axpy_repro), "--ncu", "--timer", "kernel"]) == 2
    assert "--timer kernel does not apply with --ncu" in capsys.readouterr().err


@pytest.mark.parametrize("args,needle", [
    (["--rounds", "3"], "argument --rounds: must be >= 5 (got 3)"),
    (["--cubin", "X"], "--cubin and --compare do not go together"),
])
def test_replay_compare_bad_arguments(axpy_repro, args, needle, capsys):
    cubin = axpy_repro.parent / "fast.cubin"
    assert cli.main(["replay", str(axpy_repro), "--compare", str(cubin), *args]) == 2  # usage
    assert needle in capsys.readouterr().err


def test_the_minimum_round_count_gives_an_interval_one_round_fewer_is_refused():
    """MIN_ROUNDS is the least a comparison may have (`--rounds` takes it, and `kerncap
    apply` gives an interval from that many runs): exactly that many rounds give an
    interval; one fewer is refused, naming the count."""
    b = [[1.0, 1.1, 0.9]] * sig.MIN_ROUNDS
    v = [[0.5, 0.55, 0.45]] * sig.MIN_ROUNDS
    iv = sig.bootstrap_speedup(b, v)
    assert iv.speedup == pytest.approx(2.0) and iv.verdict == "faster"
    with pytest.raises(KerncapError, match=f"^{sig.MIN_ROUNDS - 1} rounds are too few"):
        sig.bootstrap_speedup(b[:-1], v[:-1])


def test_the_programs_take_turns_at_being_timed_first_in_a_round(tmp_path, monkeypatch, capsys):
    """time_compare rotates the programs' order from round to round (kerncap.replay.session_ops):
    round k starts with program k mod N, so none is always timed right after the warm-up of
    the stream or right after the same neighbour."""
    calls: list[str] = []

    def kernel(name):
        def run(m, _s):
            calls.append(name)
        run.ms = 0.05
        return run

    repro = sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": kernel("C"), "a.cubin": kernel("A"),
                                                        "b.cubin": kernel("B")})
    a, b = repro.parent / "a.cubin", repro.parent / "b.cubin"
    assert cli.main(["replay", str(repro), "--compare", str(a), str(b), "--rounds", "5", "--iterations", "1",
                     "--json"]) == 0
    capsys.readouterr()
    blocks = [c for i, c in enumerate(calls) if i == 0 or calls[i - 1] != c]  # one per timed block
    rounds = [blocks[i:i + 3] for i in range(len(blocks) - 15, len(blocks), 3)]
    assert rounds == [["C", "A", "B"], ["A", "B", "C"], ["B", "C", "A"], ["C", "A", "B"], ["A", "B", "C"]]


def fast_axpy(m, s):
    axpy(m, s)


fast_axpy.ms = 0.045


def hidden(m, s):
    """Right bytes, but 0.02 ms of its launch outside its kernels' records (a device-side launch)."""
    axpy(m, s)


hidden.ms = 0.030
hidden.unseen_ms = 0.020


def test_the_kernel_timer_reaches_the_core_and_is_said_and_kept(tmp_path, monkeypatch, capsys):
    """--timer kernel (CUPTI's records, the clock apply times the app with) reaches the core's
    timing loop, the JSON and the text say which timer, the events' floor notes (an events
    figure) are left out, and the speedup is of the kernels' own times."""
    repro = sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": axpy, "fast.cubin": fast_axpy})
    fast_ = repro.parent / "fast.cubin"
    assert cli.main(["replay", str(repro), "--compare", str(fast_), "--rounds", "5", "--timer", "kernel",
                     "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["timer"] == "kernel"
    assert all(len(p["event_rounds"]) == 5 for p in doc["programs"])
    # the events add the stand-in's 0.002 ms floor to each kernel time
    events = sig.percentile([t for r in doc["programs"][1]["event_rounds"] for t in r], 50)
    assert events == pytest.approx(doc["programs"][1]["median_ms"] + 0.002, rel=0.01)
    assert doc["programs"][1]["interval"]["speedup"] == pytest.approx(0.050 / 0.045, rel=0.05)
    assert cli.main(["replay", str(repro), "--compare", str(fast_), "--rounds", "5", "--timer", "kernel"]) == 0
    assert "timed by CUPTI's kernel records" in capsys.readouterr().out
    assert cli.main(["replay", str(repro), "--compare", str(fast_), "--rounds", "5"]) == 0
    assert "timed by CUDA events" in capsys.readouterr().out
    assert cli.main(["replay", str(repro), "--compare", str(fast_), "--timer", "cupti"]) == 2
    assert "--timer" in capsys.readouterr().err


def test_a_variant_whose_launch_spans_more_than_its_kernels_gets_no_speedup_on_the_kernel_timer(
        tmp_path, monkeypatch, capsys):
    """An optimizer's variant that moves its work where CUPTI's kernel records do not see it
    (a kernel launched from the device) would read 1.7× faster on the kernel timer: its launch
    spans 0.02 ms more than its kernels' records, beyond UNSEEN_MS + 5 % of the captured
    kernel's, so it is void on that timer (exit 1) and the events still time it whole."""
    repro = sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": axpy, "hidden.cubin": hidden})
    hidden_ = repro.parent / "hidden.cubin"
    assert cli.main(["replay", str(repro), "--compare", str(hidden_), "--rounds", "5", "--timer", "kernel",
                     "--json"]) == 1
    p = json.loads(capsys.readouterr().out)["programs"][1]
    assert p["interval"] is None and p["unseen_ms"] == pytest.approx(0.020, rel=0.05)
    assert any("kernel timer VOID" in n and "launched from the device" in n for n in p["notes"])
    assert cli.main(["replay", str(repro), "--compare", str(hidden_), "--rounds", "5", "--timer", "kernel"]) == 1
    assert "VOID (work outside its kernel records)" in capsys.readouterr().out
    assert cli.main(["replay", str(repro), "--compare", str(hidden_), "--rounds", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["programs"][1]["interval"]["speedup"] < 1.1


def test_a_plain_replay_on_the_kernel_timer_keeps_the_events_beside_it(tmp_path, monkeypatch, capsys):
    """`kerncap replay --timer kernel`: the times are the kernels' records and the events around
    the same launches are kept beside them, so work the records miss shows as their
    difference; a sequence's per-launch table (events only) is refused on that timer."""
    repro = sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": axpy, "hidden.cubin": hidden})
    assert cli.main(["replay", str(repro), "--timer", "kernel", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["timer"] == "kernel" and doc["event_median_ms"] == pytest.approx(doc["median_ms"] + 0.002, rel=0.01)
    assert cli.main(["replay", str(repro), "--cubin", str(repro.parent / "hidden.cubin"), "--timer", "kernel"]) == 0
    out = capsys.readouterr().out
    assert "timed by CUPTI's records of each launch's kernels" in out and "beyond the records" in out
    assert "(22.00 us beyond the records)" in out, out
    assert cli.main(["replay", str(repro), "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["timer"] == "events" and plain["event_median_ms"] is None
    assert cli.main(["replay", str(repro), "--timer", "kernel", "--per-launch"]) == 2
    assert "--per-launch with --timer kernel" in capsys.readouterr().err


def test_unseen_work_starts_at_its_threshold():
    """Beyond the captured kernel's own span outside its records by UNSEEN_MS + 5 % of its
    event time: at the threshold not void, just above it void."""
    base_ms, gap = 0.1, 0.001
    limit = sig.UNSEEN_MS + sig.UNSEEN_FRACTION * (base_ms + gap)

    def program(kernel_ms, outside):
        return sig.ProgramTiming("p", None, [[kernel_ms]] * 5, event_rounds=[[kernel_ms + outside]] * 5)

    for extra, void in ((limit * 0.99, False), (limit * 1.01, True)):
        p = program(0.05, gap + extra)
        assert sig.unseen_work(program(base_ms, gap), p) is void
        assert (p.unseen_ms is not None) is void
    assert sig.unseen_work(program(base_ms, gap), sig.ProgramTiming("p", None, [[0.05]] * 5)) is False
