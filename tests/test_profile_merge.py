"""Merging, ranking, saving and displaying per-process profiles (profile-<pid>.json
as the capture library writes them)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from kerncap.capture.profile import ProfileResult, merge_profiles, sampling_warnings
from kerncap.core.units import format_dim, short_kernel_name
from kerncap.errors import KerncapError


def k(name, calls, total, lo, hi, grid=(1, 1, 1), block=(128, 1, 1), demangled=""):
    return {"name": name, "demangled": demangled, "calls": calls, "total_ns": total, "min_ns": lo, "max_ns": hi,
            "grid": list(grid), "block": list(block)}


def test_merge_sums_and_ranks_across_processes():
    p1 = {"pid": 1, "kernels": [k("gemm", 10, 1000, 90, 110, grid=(8, 8, 1)), k("add", 100, 500, 4, 6)],
          "dropped_records": 0}
    p2 = {"pid": 2, "kernels": [k("gemm", 30, 3300, 80, 130, grid=(16, 16, 1)), k("relu", 1, 2000, 2000, 2000)],
          "dropped_records": 3}
    kernels, dropped = merge_profiles([p1, p2])
    assert [s.name for s in kernels] == ["gemm", "relu", "add"]
    gemm = kernels[0]
    assert (gemm.calls, gemm.total_ns, gemm.min_ns, gemm.max_ns) == (40, 4300, 80, 130)
    assert gemm.avg_ns == pytest.approx(107.5)
    assert gemm.grid == [16, 16, 1], "grid of the process that spent the most time in it"
    assert sum(s.percent for s in kernels) == pytest.approx(100.0)
    assert gemm.percent == pytest.approx(100 * 4300 / 6800)
    assert dropped == 3


def test_the_grid_is_that_of_the_process_with_the_most_time_among_several():
    """Three processes: the grid and block are those of the one that spent the most time in
    the kernel (the second here), not of a later one that spent more than the first only."""
    p1 = {"pid": 1, "kernels": [k("gemm", 10, 1000, 90, 110, grid=(8, 8, 1), block=(64, 1, 1))]}
    p2 = {"pid": 2, "kernels": [k("gemm", 30, 3300, 80, 130, grid=(16, 16, 1), block=(256, 1, 1))]}
    p3 = {"pid": 3, "kernels": [k("gemm", 20, 2000, 90, 120, grid=(4, 4, 1), block=(32, 1, 1))]}
    for order in ([p1, p2, p3], [p3, p2, p1], [p2, p1, p3]):
        (gemm,), _ = merge_profiles(order)
        assert (gemm.grid, gemm.block, gemm.total_ns) == ([16, 16, 1], [256, 1, 1], 6300), order


def test_merge_ties_are_stable_and_empty_is_empty():
    kernels, _ = merge_profiles([{"kernels": [k("b", 1, 5, 5, 5), k("a", 1, 5, 5, 5)]}])
    assert [s.name for s in kernels] == ["a", "b"]
    assert merge_profiles([]) == ([], 0)


def test_merge_names_malformed_process_file():
    with pytest.raises(KerncapError, match="profile-42.json"):
        merge_profiles([{"pid": 42, "kernels": [{"name": "x", "calls": 1}]}])


def test_merge_of_many_kernels_and_processes_sums_per_name():
    """8 processes x 20k distinct kernels (how long it takes: bench/profile_merge.py)."""
    reports = [{"pid": p, "kernels": [k(f"kernel_{i}", 50, 1000 + i, 10, 40) for i in range(20_000)]} for p in range(8)]
    kernels, _ = merge_profiles(reports)
    assert len(kernels) == 20_000 and kernels[0].calls == 400 and kernels[0].name == "kernel_19999"
    assert kernels[0].total_ns == 8 * 20_999 and kernels[-1].name == "kernel_0" and kernels[-1].total_ns == 8 * 1000
    assert sum(s.calls for s in kernels) == 8 * 50 * 20_000


def test_preempted_samples_are_summed_named_and_kept_through_a_save(tmp_path):
    """Sampled timing: the capture library leaves out a timed launch whose pair read another
    process's GPU time slice (native/capture/sample_stats.hpp) and says how many per kernel;
    the merge sums them per kernel, a warning names the kernels, and a saved profile keeps
    the counts. A profile with none left out says nothing of it."""
    def sk(name, calls, total, timed, preempted):
        return {**k(name, calls, total, 20, 1500), "timed": timed, "preempted": preempted, "total_var_ns2": 4.0}
    p1 = {"pid": 1, "kernels": [sk("add", 20, 420, 19, 1), sk("gemm", 20, 5600, 20, 0)]}
    p2 = {"pid": 2, "kernels": [sk("add", 20, 430, 18, 2)]}
    kernels, _ = merge_profiles([p1, p2])
    by = {s.name: s for s in kernels}
    assert (by["add"].timed, by["add"].preempted, by["gemm"].preempted) == (37, 3, 0)
    (w,) = [w for w in sampling_warnings(kernels, [p1, p2], []) if "left out" in w]
    assert w.startswith("3 timed launch(es) of 1 kernel(s) (add) were left out") and "1 ms" in w
    res = ProfileResult(kernels=kernels, total_ns=6450, dispatches=60, processes=2, timing="sampled")
    assert ProfileResult.load(res.save(tmp_path / "s.json")).kernels[1].preempted == 3
    for bad in ("many", -1):  # a per-process file that is not what the capture library writes
        with pytest.raises(KerncapError, match=r"profile-7\.json .*malformed kernel entry"):
            merge_profiles([{"pid": 7, "kernels": [sk("add", 20, 420, 19, bad)]}])
    clean, _ = merge_profiles([p1 | {"kernels": [sk("gemm", 20, 5600, 20, 0)]}])
    assert not [w for w in sampling_warnings(clean, [], []) if "left out" in w]


def test_the_sampled_merge_sums_totals_and_variances_into_a_90_percent_interval():
    """Sampled timing: each process estimates a kernel's total from the launches it timed
    (equal weights: calls x mean, variance calls^2 x sum (t - mean)^2 / n^2, as
    native/capture/sample_stats.cpp computes it) and the merge adds the totals and the
    variances: total +- z(0.95) sqrt(sum of variances), z from the normal distribution."""
    from statistics import NormalDist

    rng = np.random.default_rng(44)
    reports, totals, variances = [], [], []
    for pid, (calls, n, mean, sd) in enumerate([(20_000, 300, 5000.0, 400.0), (8_000, 120, 5200.0, 900.0),
                                                (50_000, 500, 4800.0, 250.0)]):
        t = rng.normal(mean, sd, n)
        total, var = calls * t.mean(), calls ** 2 * ((t - t.mean()) ** 2).sum() / n ** 2
        totals.append(total)
        variances.append(var)
        reports.append({"pid": pid, "kernels": [{**k("gemm", calls, round(total), int(t.min()), int(t.max())),
                                                 "timed": n, "preempted": 0, "total_var_ns2": var}]})
    (gemm,), _ = merge_profiles(reports)
    half = NormalDist().inv_cdf(0.95) * math.sqrt(sum(variances))
    assert gemm.total_ns == sum(round(t) for t in totals) and gemm.timed == 920 and gemm.calls == 78_000
    assert gemm.total_hi_ns - gemm.total_ns == pytest.approx(half, rel=1e-4, abs=1)
    assert gemm.total_ns - gemm.total_lo_ns == pytest.approx(half, rel=1e-4, abs=1)
    # exact timing (no `timed`): no interval
    (exact,), _ = merge_profiles([{"kernels": [k("gemm", 10, 1000, 90, 110)]}])
    assert exact.total_lo_ns is None and exact.total_hi_ns is None


def test_save_load_roundtrip(tmp_path):
    kernels, _ = merge_profiles([{"kernels": [k("gemm", 2, 10, 4, 6, demangled="gemm(float*)")]}])
    res = ProfileResult(kernels=kernels, total_ns=10, dispatches=2, processes=1, command=["./app"],
                        warnings=["w"], exit_status=0)
    path = res.save(tmp_path / "p" / "x.json")
    back = ProfileResult.load(path)
    assert back == res
    assert json.loads(path.read_text())["format"] == "kerncap-profile"
    assert not list(path.parent.glob(".*tmp*")), "no temp file left"


def test_a_saved_sampled_profile_loads_as_sampled(tmp_path):
    """A sampled profile saved and read back (the workbench's Profile, `profile --load`,
    MCP's saved profile) keeps its timing: "sampled" says its totals are estimates with the
    90 % interval kept beside them, not CUPTI's exact ones. Mutation caught: from_dict
    dropped `timing`, so every loaded profile read "exact"."""
    sampled = {**k("gemm", 100, 5000, 40, 60), "timed": 10, "preempted": 0, "total_var_ns2": 400.0}
    kernels, _ = merge_profiles([{"pid": 1, "kernels": [sampled]}])
    res = ProfileResult(kernels=kernels, total_ns=5000, dispatches=100, processes=1, timing="sampled")
    back = ProfileResult.load(res.save(tmp_path / "sampled.json"))
    assert back.timing == "sampled" and back == res
    assert (back.kernels[0].timed, back.kernels[0].total_lo_ns, back.kernels[0].total_hi_ns) == (10, 4967, 5033)
    exact = ProfileResult(kernels=merge_profiles([{"kernels": [k("gemm", 1, 5, 5, 5)]}])[0], total_ns=5, dispatches=1,
                          processes=1)
    assert ProfileResult.load(exact.save(tmp_path / "exact.json")).timing == "exact"


def test_a_sampled_interval_wider_than_its_total_stops_at_zero_and_the_profile_reloads(tmp_path):
    """A kernel launched a few times, one launch timed and a wide spread: its 90 % interval's
    half-width (z sqrt(var) = 1.6449 x 1000 ns) exceeds the total (1000 ns). No GPU time is
    negative: the low end is 0, the high end total + half; saved, the profile loads back (the
    schema holds every bound to >= 0). Mutation caught: the low end unclamped (-645)."""
    few = {**k("rare", 4, 1000, 200, 300), "timed": 1, "preempted": 0, "total_var_ns2": 1_000_000.0}
    (rare,), _ = merge_profiles([{"pid": 1, "kernels": [few]}])
    assert (rare.total_lo_ns, rare.total_hi_ns) == (0, 2645)
    res = ProfileResult(kernels=[rare], total_ns=1000, dispatches=4, processes=1, timing="sampled")
    back = ProfileResult.load(res.save(tmp_path / "wide.json"))
    assert back == res and back.kernels[0].total_lo_ns == 0


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(KerncapError, match="does not exist"):
        ProfileResult.load(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(KerncapError, match="bad.json"):
        ProfileResult.load(bad)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something"}))
    with pytest.raises(KerncapError, match="not a kerncap profile"):
        ProfileResult.load(other)
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"format": "kerncap-profile", "format_version": 99}))
    with pytest.raises(KerncapError, match="version 99"):
        ProfileResult.load(newer)


@pytest.mark.parametrize(
    "name, short",
    [
        ("add_kernel", "add_kernel"),
        ("scale_kern(float*, float*, int)", "scale_kern"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
         "std::array<char*, 1>>(int, at::native::FillFunctor<float>, std::array<char*, 1>)",
         "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<…>, std::array<…>>"),
        ("void f<(anonymous namespace)::T>(int (*)(int))", "f<(anonymous namespace)::T>"),
    ],
)
def test_short_kernel_name(name, short):
    assert short_kernel_name(name, width=200) == short


def test_short_kernel_name_cuts_the_middle():
    s = short_kernel_name("a" * 50 + "_middle_" + "z" * 50, width=40)
    assert len(s) == 40 and s.startswith("aaa") and s.endswith("zzz") and "…" in s


def test_format_dim():
    assert format_dim([128, 1, 1]) == "128"
    assert format_dim([64, 32, 1]) == "64x32"
    assert format_dim([1, 1, 1]) == "1"
    assert format_dim([2, 1, 4]) == "2x1x4"


def test_an_untimed_kernel_is_named_with_where_the_chosen_launches_went():
    """A kernel none of whose launches has a time (its one launch's pair held over 5 ms,
    say) is named with the sampler's counts of launches it chose and left out, summed over
    the processes, so a reader (and a failing GPU test) sees why; none counted: no clause."""
    def sk(name, calls, total, timed):
        return {**k(name, calls, total, 20, 1500), "timed": timed, "preempted": 0, "total_var_ns2": 4.0}
    p1 = {"pid": 1, "kernels": [sk("fill", 40, 4000, 40), sk("reduce", 1, 0, 0)],
          "sampling": {"overdue": 1, "no_event": 0, "interleaved": 2}}
    p2 = {"pid": 2, "kernels": [sk("fill", 40, 4100, 40)], "sampling": {"overdue": 2, "unfinished": 1}}
    kernels, _ = merge_profiles([p1, p2])
    (w,) = [w for w in sampling_warnings(kernels, [p1, p2], []) if "none of their launches" in w]
    assert w.startswith("1 kernel(s) ran but none of their launches was timed: reduce")
    assert ("timed launches left out: 3 held over 5 ms, 1 unfinished at exit, 2 another thread launched inside "
            "the pair (without") in w
    (w,) = [w for w in sampling_warnings(kernels, [{"pid": 1, "sampling": {}}], []) if "none of their" in w]
    assert "left out" not in w


def test_timed_launches_that_could_not_be_read_are_warned_past_one_percent_of_a_process():
    """A sampled process's chosen launches whose pair could not be read, held over 5 ms
    (`overdue`) or unfinished at exit (`unfinished`), both count as lost; past 1 % of that
    process's timed launches plus the lost ones a warning says how many, at or below it
    none does (a thread preempted while it held its stream changes nothing)."""
    def proc(pid, timed, sampling):
        return {"pid": pid, "kernels": [{**k("fill", timed, 100 * timed, 90, 110), "timed": timed, "preempted": 0,
                                         "total_var_ns2": 4.0}], "sampling": sampling}

    def lost_warnings(p):
        kernels, _ = merge_profiles([p])
        return [w for w in sampling_warnings(kernels, [p], []) if "could not be read" in w]

    assert lost_warnings(proc(1, 100, {"unfinished": 5})) == [
        "process 1: 5 of 105 timed launches could not be read (held over 5 ms, or unfinished at exit) and were left out"]
    (w,) = lost_warnings(proc(2, 98, {"overdue": 1, "unfinished": 1}))
    assert w.startswith("process 2: 2 of 100 timed launches could not be read")
    assert lost_warnings(proc(3, 99, {"unfinished": 1})) == []            # 1 of 100: not past 1 %
    assert lost_warnings(proc(4, 1000, {"overdue": 3, "unfinished": 2})) == []


def test_a_process_that_timed_none_of_a_kernels_launches_leaves_its_minimum_alone():
    """Sampled timing: a process whose launches of a kernel were counted but none timed
    reports no time for them (min_ns 0); the merged minimum is the timed launches' of the
    other processes, in whichever order the processes come."""
    def sk(calls, total, lo, hi, timed):
        return {**k("gemm", calls, total, lo, hi), "timed": timed, "preempted": 0, "total_var_ns2": 4.0}
    timed = {"pid": 1, "kernels": [sk(40, 40_000, 800, 1200, 40)]}
    untimed = {"pid": 2, "kernels": [sk(3, 0, 0, 0, 0)]}
    for order in ([timed, untimed], [untimed, timed]):
        (gemm,), _ = merge_profiles(order)
        assert (gemm.min_ns, gemm.max_ns, gemm.timed, gemm.calls) == (800, 1200, 40, 43), order


def test_overlapping_streams_are_warned_only_when_a_process_timed_on_more_than_one():
    """A sampled process that timed its kernels on several streams of one context is warned
    (a timed launch may include waiting for another stream's kernels); one stream, or no
    count, is not. Mutation caught: one stream already warned of."""
    def proc(pid, streams):
        return {"pid": pid, "kernels": [{**k("fill", 10, 1000, 90, 110), "timed": 10, "preempted": 0,
                                         "total_var_ns2": 4.0}], "sampling": {"streams": streams}}

    def stream_warnings(p):
        kernels, _ = merge_profiles([p])
        return [w for w in sampling_warnings(kernels, [p], []) if "streams of one context" in w]

    (w,) = stream_warnings(proc(7, 2))
    assert w.startswith("process 7: kernels were timed on 2 streams of one context")
    assert stream_warnings(proc(8, 1)) == []
    assert stream_warnings(proc(9, 0)) == []
