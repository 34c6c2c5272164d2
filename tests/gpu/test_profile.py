"""`kerncap profile` against torch.profiler on the same workload, and the sampled profile
(the default: every launch counted, a sample timed with held event pairs) against
`--exact` (CUPTI's record of every launch) on the suite's apps: the same top-10 kernels,
each share within 2 percentage points (issue 31)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from .apps import MOE_SMALL_ARGS, PYAPPS

pytestmark = pytest.mark.gpu

TOP = 3
AGREE_TOP = 10
AGREE_PP = 2.0  # percentage points


def normalized(name: str) -> str:
    return re.sub(r"\s+", "", name)


# Issue 31: beside seven test shards on the GPU (2026-12-01, third session) the sampled
# nvjet total read 4.23 ms against torch.profiler's 3.56 ms (1.19x); alone it has passed
# since (docs/facts.md §38: 1 xpassed under the non-strict marker it had). This file runs
# alone (tests/gpu/batch.sh's KC_ALONE), so the sampled case is a plain test: a marker that
# passes either way asserted nothing (issue 44).
@pytest.mark.parametrize("exact", [True, False], ids=["exact", "sampled"])
def test_profile_ranks_like_torch_profiler(tmp_path, exact):
    from kerncap.capture.profile import run_profile

    app = str(PYAPPS / "torch_matmul.py")
    result = run_profile([sys.executable, app], timeout=300, sampled=not exact)
    ours = result.kernels
    assert len(ours) >= TOP, [k.name for k in ours]
    assert result.timing == ("exact" if exact else "sampled"), result.warnings
    if exact:
        assert result.cupti_finalized is True, result.warnings  # CUPTI detached before the app exited
    else:
        assert result.cupti_finalized is None, result.warnings  # no CUPTI at all
        assert not [w for w in result.warnings if "error" in w or "streams" in w or "left out" in w], result.warnings

    reference_path = tmp_path / "torch_profile.json"
    proc = subprocess.run(
        [sys.executable, app, "--torch-profile", str(reference_path)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    reference = json.loads(reference_path.read_text())
    theirs = sorted(reference.items(), key=lambda item: item[1]["total_us"], reverse=True)[:TOP]

    top = sorted(ours, key=lambda k: k.total_ns, reverse=True)[:TOP]
    for rank, (k, (name, ref)) in enumerate(zip(top, theirs)):
        ours_names = {normalized(k.name), normalized(k.demangled or "")}
        assert normalized(name) in ours_names, f"rank {rank}: kerncap {k.demangled or k.name!r}, torch.profiler {name!r}"
        assert k.calls == ref["calls"], f"{name}: {k.calls} calls vs {ref['calls']}"
        ref_ns = ref["total_us"] * 1e3
        assert abs(k.total_ns - ref_ns) <= 0.10 * ref_ns, f"{name}: total {k.total_ns} ns vs {ref_ns:.0f} ns"


def test_profile_holds_no_subscriber_and_names_a_client_that_came_meanwhile(testapps_build):
    """Exact profile mode drops its CUPTI subscriber once activity is on (a subscriber
    costs every driver call; docs/interposer.md): an app that subscribes mid-run now
    can, and kerncap says at exit that the profile may miss kernels. The sampled profile
    never touches CUPTI: the same app's subscription is no concern of it."""
    from kerncap.capture.profile import run_profile

    result = run_profile([str(testapps_build / "cupti_first"), "late"], timeout=120, output=lambda *_: None)
    assert result.exit_status == 0, "the app's own late cuptiSubscribe was refused"
    assert [k.calls for k in result.kernels if "cupti_first_scale" in k.name] == [2]
    assert result.cupti_finalized is False
    assert any("subscribed during the run" in w for w in result.warnings), result.warnings

    sampled = run_profile([str(testapps_build / "cupti_first"), "late"], timeout=120, output=lambda *_: None,
                          sampled=True)
    assert sampled.timing == "sampled" and sampled.exit_status == 0
    assert [k.calls for k in sampled.kernels if "cupti_first_scale" in k.name] == [2]
    assert not any("subscribed during the run" in w for w in sampled.warnings), sampled.warnings


# Suite apps without CUDA graphs (sampled timing ranks a graph whole), each profiled
# twice: once sampled, once exact. decode_loop is the hard case: thousands of launches
# of ~20 tiny kernels, where a bias per timed launch would move the shares most.
AGREEMENT = {
    "torch_matmul": (),
    "triton_autotune": (),
    "triton_flash_attn": (),
    "triton_moe": (),
    "torch_compile": (),
    "moe_scale": MOE_SMALL_ARGS,
    "decode_loop": ("--tokens", "300"),
}


def comparison(exact, sampled) -> tuple[str, list[str]]:
    """A table of both profiles' top kernels and what disagrees beyond the goal."""
    e = {k.name: k for k in exact.kernels}
    s = {k.name: k for k in sampled.kernels}
    top_e = [k.name for k in exact.kernels[:AGREE_TOP]]
    top_s = [k.name for k in sampled.kernels[:AGREE_TOP]]
    # Per launch: exact's average and the sampled (timed) minimum and maximum, in µs: one
    # slow timed launch among a few tells a first-launch cost from a per-launch bias.
    lines = [f"{'exact %':>8} {'sampled %':>9} {'±%':>6} {'calls e/s':>15} {'timed':>7} {'avg e':>7} "
             f"{'min s':>7} {'max s':>7}  kernel"]
    problems = []
    for name in dict.fromkeys(top_e + top_s):
        ke, ks = e.get(name), s.get(name)
        pe, ps = (ke.percent if ke else 0.0), (ks.percent if ks else 0.0)
        half = ""
        if ks and ks.total_hi_ns is not None and ks.total_ns:
            half = f"{50 * (ks.total_hi_ns - ks.total_lo_ns) / ks.total_ns:.1f}"
        us = (f"{(ke.avg_ns / 1e3 if ke else 0):7.2f} {(ks.min_ns / 1e3 if ks else 0):7.2f} "
              f"{(ks.max_ns / 1e3 if ks else 0):7.2f}")
        lines.append(f"{pe:8.2f} {ps:9.2f} {half:>6} {(ke.calls if ke else 0):>7}/{(ks.calls if ks else 0):<7} "
                     f"{(ks.timed or 0) if ks else 0:>7} {us}  {(ke or ks).display_name[:80]}")
        if abs(pe - ps) > AGREE_PP:
            problems.append(f"{name}: {pe:.2f} % exact, {ps:.2f} % sampled")
    # The same top-10 set; a kernel at the boundary may trade places with one whose share
    # is within the tolerance of it (a tie, not a different ranking).
    tenth_e = exact.kernels[min(AGREE_TOP, len(exact.kernels)) - 1].percent if exact.kernels else 0.0
    for name in set(top_e) ^ set(top_s):
        share = max(e[name].percent if name in e else 0.0, s[name].percent if name in s else 0.0)
        if share > tenth_e + AGREE_PP:
            problems.append(f"{name} is in one top-{AGREE_TOP} only ({share:.2f} %, the 10th has {tenth_e:.2f} %)")
    return "\n".join(lines), problems


# Issue 31's goal (each top-10 share within 2 percentage points of exact), measured on the
# H200 (2026-12-01, docs/facts.md §31), is met by torch_matmul and triton_autotune when the
# GPU is the profile's alone (tests/gpu/batch.sh runs this file after the shards):
# - with 7 other shards on the GPU: torch_matmul, triton_moe, moe_scale and decode_loop
#   disagreed (nvjet 90.4 % exact, 95.7 % sampled), and so did torch.profiler's ranking;
# - with the GPU to itself: triton_flash_attn agreed once and not once (do_bench's fill
#   kernel 67.4 % exact, 56.4 % sampled, ±59 % over 168 timed of 3,255 launches);
#   moe_scale (a cub scan 1.5 % exact, 5.8 % sampled) and decode_loop (cuBLAS gemv 27.3 %
#   exact, 20.1 % sampled, ±0.8 %: a bias, not noise: small kernels gain share) did not;
# - torch_compile: the sampled path does not count max-autotune's benchmark launches.
# - third session (§33), with the empty-kernel calibration at CUPTI's measured 594 ns:
#   decode_loop's gemv 27.63 % exact, 25.35 % sampled (2.3 points); moe_scale within 1.2
#   points except cub's DeviceCompactInitKernel (1.49 % exact, 6.68 % sampled); triton_moe
#   and torch_matmul agreed. Beside seven test shards: triton_autotune's fill kernel
#   78.96 % exact, 76.53 % sampled, kc_autotune_add 21.01 / 23.43 % (2.4 points; one
#   timed fill launch read 438 µs against a 66.6 µs average).
# - fifth session (§36), alone: all agreed but moe_scale (cub's DeviceCompactInitKernel
#   1.50 % exact, 8.46 % sampled) and decode_loop (the gemv 27.21 / 25.00 %). triton_moe
#   (agreed in four runs since §33) and torch_compile (two) are plain tests again.
# - sixth session (§37), alone, pairs of stamp kernels instead of events, calibrated on
#   the app's stream: all seven agreed (largest gap: decode_loop's gemv 26.30 / 25.96 %);
#   triton_flash_attn and triton_autotune had agreed alone in the fifth session too.
# So every app here is a plain test again (a set kept for an app that stops agreeing).
SAMPLED_DISAGREES: set[str] = set()


def fresh_caches(where) -> dict[str, str]:
    """Inductor's and Triton's caches of one run alone. Shared, the second run of a pair
    loaded the first one's autotuning results and benchmarked nothing: torch_compile's
    sampled run counted 3 launches of its kernel against exact's 215 (docs/facts.md §31),
    the benchmark's launches were never made, not missed."""
    return {"TORCHINDUCTOR_CACHE_DIR": str(where / "inductor"), "TRITON_CACHE_DIR": str(where / "triton")}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(
    strict=True, reason="issue 31: the sampled profile does not yet agree with exact within 2 points here"))
    if n in SAMPLED_DISAGREES else n for n in AGREEMENT])
def test_sampled_profile_ranks_like_exact(name, tmp_path):
    from kerncap.capture.profile import run_profile

    command = [sys.executable, str(PYAPPS / f"{name}.py"), *AGREEMENT[name]]
    exact = run_profile(command, timeout=600, output=lambda *_: None, env=fresh_caches(tmp_path / "exact"))
    sampled = run_profile(command, timeout=600, output=lambda *_: None, sampled=True,
                          env=fresh_caches(tmp_path / "sampled"))
    assert exact.timing == "exact" and sampled.timing == "sampled", sampled.warnings
    table, problems = comparison(exact, sampled)
    print(f"\n{name}: exact {exact.total_ns / 1e6:.3f} ms / {exact.dispatches} dispatches, sampled "
          f"{sampled.total_ns / 1e6:.3f} ms / {sampled.dispatches} ({sum(k.timed or 0 for k in sampled.kernels)} timed)"
          f"\n{table}\nwarnings: {sampled.warnings}")
    assert not problems, f"{name}:\n" + "\n".join(problems) + "\n" + table
    assert all(k.timed for k in sampled.kernels[:AGREE_TOP]), f"a top kernel was never timed: {sampled.warnings}"


def test_sampled_profile_says_when_streams_may_overlap(testapps_build):
    """multistream: the main thread's kernels on the legacy stream, another thread's on
    its own stream at the same time. Timed launches there can include waiting behind the
    other stream's kernels; the profile says so instead of presenting them as exact."""
    from kerncap.capture.profile import run_profile

    result = run_profile([str(testapps_build / "multistream")], timeout=180, output=lambda *_: None, sampled=True)
    assert result.timing == "sampled"
    assert any("streams of one context" in w for w in result.warnings), result.warnings
    names = {k.name for k in result.kernels}
    assert any("ms_target" in n for n in names) and any("ms_writer" in n for n in names), names


def test_a_held_stream_waits_for_its_word_and_held_pairs_leave_the_cpu_out(testapps_build):
    """hold_probe: a stream held on a mapped host word (what the sampled profile does
    around a timed launch) runs nothing until the word is set, and 50 us the CPU spends
    between the start event and the launch do not reach a held pair (they do reach an
    unheld one). Prints what held pairs read around nothing, an empty kernel and a 5 us
    kernel (bench/profile_bias.py --app hold_probe compares them with CUPTI's times)."""
    proc = subprocess.run([str(testapps_build / "hold_probe"), "200"], capture_output=True, text=True, timeout=120)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "not ready (held)" in proc.stdout and "the hold works" in proc.stdout, proc.stdout


def test_the_sampled_profile_says_it_held_its_streams_and_how_it_calibrated(testapps_build, tmp_path):
    """profile_timing in proc-<pid>.json: every pair was held, and each sample's bracket
    came from kerncap's own empty kernel timed in a held pair on the GPU."""
    from kerncap.capture.profile import run_profile

    run_dir = tmp_path / "run"
    result = run_profile([str(testapps_build / "hold_probe"), "50"], timeout=180, output=lambda *_: None,
                         sampled=True, run_dir=run_dir)
    assert result.timing == "sampled" and result.exit_status == 0, result.warnings
    (proc,) = [json.loads(p.read_text()) for p in run_dir.glob("proc-*.json")]
    (prof,) = [json.loads(p.read_text()) for p in run_dir.glob("profile-*.json")]
    print(proc["profile_timing"], prof["sampling"])
    assert proc["profile_timing"] == {"used": "sampled", "held": True, "calibration": "empty kernel"}, proc
    s = prof["sampling"]
    assert s["calibration"] == "empty kernel" and 0 < s["pair_ns"] <= s["empty_kernel_pair_ns"], s
    assert s["bracket_ns"] == pytest.approx(max(s["pair_ns"], s["empty_kernel_pair_ns"] - s["empty_kernel_ns"]), abs=1), s
