"""Speedups and the timing verdicts kerncap gives, each against a baseline timed in the
same replay server in the same run (the figures the GPU tests print but no longer
assert on).

    PYTHONPATH=engine:. python3 bench/speedups.py [--reps 20] [--rounds 10] [--only ...]
        [--build-dir DIR] [--json F]

edits     the byte-exact faster edits: smooth's hoisted boundary check, Triton's
          hoisted reloads (triton_flash_attn, triton_moe) and Inductor's RMSNorm keeping
          its row (torch_compile_rmsnorm). Baseline: the unmodified source recompiled.
          `compare_timing` interleaves captured, unmodified and edited for --rounds rounds;
          the speedup is median(unmodified) / median(edited) with a 90 % bootstrap
          interval (common.ratio_interval). Goal: the whole interval above 1.02 (a 2 %
          gain beyond the noise, what tests/gpu/timing.assert_faster required).
verdicts  --reps repetitions of `replay --compare`: a copy of the demo's captured cubin
          (~6 us; A/A: "within noise" expected, goal >= reps - 1) and axpy_partial (~6 %
          less work) against axpy (~50 us, L2 flushed; "faster" expected, goal >= reps - 1),
          and pair_fma's fast and cheat variants (both "faster").
buckets   `buckets`' set: the variants fast only on the rare bucket and only on the common
          one; per member speedups and the weighted speedup (goal: common's > rare's,
          rare's within its weight's bound 1 / (1 - w_rare)).

Run on the GPU machine with kerncap installed (bash tests/gpu/run.sh sets it up), from
the repository root: it reuses the GPU suite's apps and edits (tests/gpu).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from common import REPO, build_testapps, print_table, ratio_interval, verdict, write_json

sys.path.insert(0, str(REPO))  # tests.gpu

MIN_GAIN = 1.02


def edit_speedup(rc, unmodified: Path, edited: Path, rounds: int) -> dict:
    c = rc.compare_timing([unmodified, edited], rounds=rounds, iterations=20)
    base, var = c.variants
    speedup = statistics.median(base.times) / statistics.median(var.times)
    low, high = ratio_interval(base.times, var.times)
    return {"unmodified_ms": base.median_ms, "edited_ms": var.median_ms, "speedup": speedup, "low": low,
            "high": high, "goal_met": low > MIN_GAIN, "clock": c.clock.text()}


def bench_edits(args, build: Path, work: Path) -> dict:
    from kerncap import api
    from kerncap.capture.extract import extract
    from kerncap.replay.client import ReplayClient

    from tests.gpu.apps import TESTAPPS
    from tests.gpu.conftest import Captures
    from tests.gpu.smooth_edits import SMOOTH_MANGLED, edit, kernel_header
    from tests.gpu.test_triton_repro import EDIT_FUNCTIONS, FASTER_EDITS, triton_reproducer

    out = {}
    res = extract(SMOOTH_MANGLED, [str(build / "smooth")], output=work / "smooth", match="exact",
                  source_dir=TESTAPPS / "cuda", build_dir=build, timeout=120)
    repro = Path(res.reproducer_dir)
    unmodified = shutil.copy(api.recompile(repro).cubin, work / "smooth-unmodified.cubin")
    edit(kernel_header(repro), "fast")
    edited = api.recompile(repro).cubin
    with ReplayClient(repro) as rc:
        if not rc.validate(cubin=edited).passed:
            sys.exit("smooth's fast edit does not validate byte-exact")
        out["smooth, boundary check hoisted"] = edit_speedup(rc, Path(unmodified), Path(edited), args.rounds)

    captures = Captures(build, work / "captures")
    for app in sorted([*FASTER_EDITS, *EDIT_FUNCTIONS]):
        repro = triton_reproducer(captures, app)
        kernel = repro / "source" / "kernel.py"
        original = kernel.read_text()
        text = original
        for old, new in FASTER_EDITS.get(app, []):
            text = text.replace(old, new)
        if app in EDIT_FUNCTIONS:
            text = EDIT_FUNCTIONS[app](original, json.loads((repro / "source" / "triton.json").read_text()))
        unmodified = shutil.copy(api.recompile(repro).cubin, work / f"{app}-unmodified.cubin")
        try:
            kernel.write_text(text)
            edited = api.recompile(repro).cubin
        finally:
            kernel.write_text(original)
        with ReplayClient(repro) as rc:
            if not rc.validate(cubin=edited).passed:
                sys.exit(f"{app}'s faster edit does not validate byte-exact")
            out[f"{app}, faster edit"] = edit_speedup(rc, Path(unmodified), Path(edited), args.rounds)
    return out


def count_verdicts(rc, cubin: Path, reps: int, **kw) -> tuple[dict, list]:
    seen = {"within noise": 0, "faster": 0, "slower": 0}
    intervals = []
    for _ in range(reps):
        c = rc.compare_timing([cubin], **kw)
        iv = c.variants[0].interval
        seen[iv.verdict] += 1
        intervals.append([round(iv.speedup, 4), round(iv.low, 4), round(iv.high, 4)])
    return seen, intervals


def bench_verdicts(args, build: Path, work: Path) -> dict:
    from kerncap.replay.client import ReplayClient
    from kerncap_tui import demo

    from kerncap.capture.extract import extract

    from tests.gpu.apps import PAIR_FMA as spec, app_env
    from tests.gpu.conftest import Captures

    out = {}
    root = demo.demo_path()
    manifest = json.loads((root / "capture" / "manifest.json").read_text())
    copy = work / "identical.cubin"
    shutil.copy(root / "capture" / manifest["kernel"]["module"]["cubin"], copy)
    with ReplayClient(root) as rc:
        seen, ivs = count_verdicts(rc, copy, args.reps)
    out["demo smooth vs an identical copy (A/A)"] = {"verdicts": seen, "intervals": ivs, "expected": "within noise",
                                                     "goal_met": seen["within noise"] >= args.reps - 1}
    captures = Captures(build, work / "captures")
    axpy = captures.get("axpy_inplace").reproducer
    with ReplayClient(axpy) as rc:
        seen, ivs = count_verdicts(rc, build / "variants" / "axpy_partial.cubin", args.reps, flush_l2=True)
    out["axpy vs axpy_partial (15/16 of the work, L2 flushed)"] = {
        "verdicts": seen, "intervals": ivs, "expected": "faster", "goal_met": seen["faster"] >= args.reps - 1}

    (work / "pair").mkdir()
    res = extract(spec.kernel, spec.command(build), output=work / "pair" / "reproducer", dispatch=spec.dispatch,
                  match=spec.match, timeout=spec.timeout, env=app_env(spec, work / "pair"))
    with ReplayClient(res.reproducer_dir) as rc:
        for name in ("pair_fma_fast", "pair_fma_cheat"):
            seen, ivs = count_verdicts(rc, build / "variants" / f"{name}.cubin", max(1, args.reps // 4), rounds=10)
            out[f"pair_fma vs {name}"] = {"verdicts": seen, "intervals": ivs, "expected": "faster",
                                          "goal_met": seen["faster"] == sum(seen.values())}
    return out


def bench_buckets(args, build: Path, work: Path) -> dict:
    from kerncap.api import replay_set
    from kerncap.capture.extract import extract

    from tests.gpu.apps import TESTAPPS, app_env
    from tests.gpu.test_buckets import BUCKETS, COMMON, RARE

    (work / "buckets").mkdir()
    res = extract(BUCKETS.kernel, BUCKETS.command(build), output=work / "buckets" / "set", buckets=True, timeout=180,
                  env=app_env(BUCKETS, work / "buckets"), source_dir=TESTAPPS / "cuda", build_dir=build)
    s = res.set
    idx = {m.bucket.grid[0]: i for i, m in enumerate(s.members)}
    out = {}
    for name in ("bucket_fast_rare", "bucket_fast_common"):
        run = replay_set(s, cubin=build / "variants" / f"{name}.cubin", validate=True, iterations=30)
        if not run.passed:
            sys.exit(f"{name} does not validate on every member")
        out[name] = {"weighted": run.workload.weighted, "rare_member": run.runs[idx[RARE]].speedup,
                     "common_member": run.runs[idx[COMMON]].speedup}
    w_rare = s.members[idx[RARE]].weight
    out["rare_weight"] = w_rare
    out["goal_met"] = (out["bucket_fast_common"]["weighted"] > out["bucket_fast_rare"]["weighted"]
                       and out["bucket_fast_rare"]["weighted"] < 1 / (1 - w_rare) * 1.05)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20, help="repetitions of each verdict (default 20)")
    ap.add_argument("--rounds", type=int, default=10, help="interleaved rounds per edit comparison")
    ap.add_argument("--only", default="edits,verdicts,buckets")
    ap.add_argument("--build-dir", type=Path)
    ap.add_argument("--json")
    args = ap.parse_args()
    parts = [p for p in args.only.split(",") if p]
    if set(parts) - {"edits", "verdicts", "buckets"} or args.reps < 1 or args.rounds < 2:
        ap.error("--only takes edits, verdicts, buckets; --reps >= 1; --rounds >= 2")
    figures = {}
    with tempfile.TemporaryDirectory(prefix="kerncap-bench-speedups-") as tmp:
        work = Path(tmp)
        build = build_testapps(args.build_dir or work / "testapps")
        if "edits" in parts:
            figures["edits"] = edits = bench_edits(args, build, work)
            print_table(["edit", "unmodified", "edited", "speedup [90 % interval]", f"goal low > {MIN_GAIN}"],
                        [[k, f"{v['unmodified_ms'] * 1e3:.2f} us", f"{v['edited_ms'] * 1e3:.2f} us",
                          f"{v['speedup']:.3f}x [{v['low']:.3f}, {v['high']:.3f}]", verdict(v["goal_met"])]
                         for k, v in edits.items()])
            print()
        if "verdicts" in parts:
            figures["verdicts"] = vs = bench_verdicts(args, build, work)
            print_table(["comparison", "expected", "within noise / faster / slower", "goal"],
                        [[k, v["expected"], "{within noise} / {faster} / {slower}".format(**v["verdicts"]),
                          verdict(v["goal_met"])] for k, v in vs.items()])
            print()
        if "buckets" in parts:
            figures["buckets"] = b = bench_buckets(args, build, work)
            print_table(["variant", "rare member", "common member", "weighted", "goal"],
                        [[k, f"{b[k]['rare_member']:.3f}x", f"{b[k]['common_member']:.3f}x", f"{b[k]['weighted']:.3f}x",
                          verdict(b["goal_met"])] for k in ("bucket_fast_rare", "bucket_fast_common")])
    write_json(args.json, {"reps": args.reps, "rounds": args.rounds, **figures})


if __name__ == "__main__":
    main()
