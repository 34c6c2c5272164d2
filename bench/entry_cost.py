"""What entry-point interception (KERNCAP_INTERCEPT=entry) costs per driver call on the
CPU, without a GPU: tests/fixtures/entry_hooks/inject_app.c launches through
cuGetProcAddress into the stand-in libcuda (a function that returns), from 1, 2, 8 or
16 threads at once (--threads), these ways, interleaved, median of --repeat processes:
  direct       no kerncap
  preloaded    libkerncap_entry.so preloaded, nothing attached (what every process the
               app starts pays: a load and a jump per watched call)
  armed        + libkerncap_inject.so attached to the entry points, armed for a kernel
               that launches but is never the dispatch: half the launches are the
               target's (counted in the process-wide dispatch order), half another's
  armed-other  the same, armed for a kernel that never launches (kerncap's whole
               per-launch path without the target's dispatch counter)
  baseline-*   with --baseline DIR: armed / armed-other with DIR's libraries (an older
               build, to compare before and after in the same run)
and, in one process, the paired measure (bench/common.py paired_cost): blocks of
launches alternate, in ABBA order, kerncap's armed path (armed as `armed`, or with
--paired-kernel never as `armed-other`, which is how bench/paired.py arms it on the GPU:
every launch plain, the launch fast path's case) and its pass-through (the entry-point
wrapper jumping straight to the driver, kerncap_bench_passthrough), so both halves of
each pair see the same CPU state. --decompose adds bench/paired.py's decomposition rows.

--driver-work DATA_KIB:CODE_KIB makes the stand-in's launch do what the real driver's
does to the CPU's caches (fake_libcuda.c KC_FAKE_WORK): read DATA_KIB of memory and run
through CODE_KIB of distinct code before it returns, so kerncap's path finds its lines,
branch predictions and TLB entries evicted on every launch, as on the H200 (docs/facts.md
§34). 256:128 costs this machine ~5 us per launch, about a real launch's 4 us (1024:256
also evicts its 1 MiB L2); without it the stand-in returns at once and everything
kerncap touches stays hot.

Costs are CPU nanoseconds of the launching threads per launch (their CLOCK_THREAD_CPUTIME_ID
summed): with more threads than cores the wall time says nothing per launch, CPU time
does, and cache lines bouncing between cores show in it. --launches is the total, split
over the threads. The driver's own cost is not in it (the stand-in returns at once).
Needs the package built (pip install ., or KERNCAP_INJECT_LIB), a C/C++ compiler and
the CUDA / CUPTI headers.

  python3 bench/entry_cost.py [--launches 2000000] [--threads 1,2,8,16] [--repeat 7]
                              [--baseline DIR] [--blocks 200] [--driver-work 256:128]
                              [--paired-kernel target|never] [--decompose] [--paired-only] [--json F]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

from common import REPO, median, median_interval, paired_cost, parse_blocks, print_table, ratio_interval, write_json

sys.path.insert(0, str(REPO / "tests" / "fixtures" / "entry_hooks"))
import entry_build as B  # noqa: E402

MODES = ("direct", "preloaded", "armed", "armed-other")


def app_env(mode: str, libs: tuple[Path, Path], drv: Path, out: Path,
            driver_work: str | None = None) -> tuple[dict[str, str], str]:
    """The environment and the injection library argument of inject_app for `mode`."""
    entry, inject = libs
    env = {**os.environ, "LD_LIBRARY_PATH": str(drv)}
    for k in [k for k in env if k.startswith(("KERNCAP_", "KC_FAKE_"))]:
        del env[k]
    if driver_work:
        env["KC_FAKE_DRIVER_WORK"] = driver_work
    if mode == "direct":
        return env, "-"
    env["LD_PRELOAD"] = str(entry)
    if mode == "preloaded":
        return env, "-"
    out.mkdir(parents=True, exist_ok=True)
    env.update(KERNCAP_MODE="capture", KERNCAP_OUT=str(out), KERNCAP_DISPATCH=str(10**12), KERNCAP_KEEP_RUNNING="1",
               KERNCAP_INTERCEPT="entry", KERNCAP_KERNEL="target" if mode.endswith("armed") else "kc_never_launched")
    return env, str(inject)


# The paired measure's decomposition (--decompose; bench/paired.py has the same rows): a
# is the wrapper with a dispatcher that does nothing, or the dispatcher stopping early.
PARTS = {"wrapper": {"KC_PAIRED_ARMED": "wrapper"}, "skip-callback": {"KERNCAP_BENCH_SKIP": "callback"},
         "skip-launch": {"KERNCAP_BENCH_SKIP": "launch"}, "skip-quiesce": {"KERNCAP_BENCH_SKIP": "quiesce"}}


def one_run(mode: str, exe: Path, libs: tuple[Path, Path], drv: Path, out: Path, threads: int, launches: int,
            blocks: int = 0, driver_work: str | None = None, part: str | None = None,
            paired_kernel: str = "target") -> dict:
    paired_as = "armed" if paired_kernel == "target" else "armed-other"
    env, inject = app_env(mode.replace("baseline-", "").replace("paired", paired_as), libs, drv, out, driver_work)
    if blocks:
        env["KERNCAP_BENCH_PASSTHROUGH"] = "1"
        env.update(PARTS.get(part or "", {}))
    per_thread = launches // threads // max(blocks, 1) * max(blocks, 1)
    p = B.run([str(exe), inject, str(threads), str(per_thread)] + ([str(blocks)] if blocks else []), env=env)
    if p.returncode != 0 or "loop_ns=" not in p.stdout or (driver_work and "driver_work: data_kib" not in p.stdout):
        sys.exit(f"{mode}: inject_app failed\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    total = threads * per_thread
    if blocks:
        return {"blocks": parse_blocks(p.stdout), "per_block": total // blocks}
    line = next(x for x in p.stdout.splitlines() if x.startswith("loop_ns="))
    fields = dict(f.split("=", 1) for f in line.split())
    return {"wall": int(fields["loop_ns"]) / total, "cpu": int(fields["cpu_ns"]) / total}


def measure(threads: int, args, exe: Path, libs: dict[str, tuple[Path, Path]], drv: Path, d: Path) -> dict:
    modes = [] if args.paired_only else list(MODES) + (
        ["baseline-armed", "baseline-armed-other"] if "baseline" in libs else [])
    runs: dict[str, list[float]] = {m: [] for m in modes}
    paired: dict[str, list[dict]] = {which: [] for which in libs}
    parts: dict[str, list[dict]] = {p: [] for p in (PARTS if args.decompose else ())}
    for i in range(args.repeat):  # interleaved: drift hits every mode alike
        for mode in modes:
            which = libs["baseline" if mode.startswith("baseline-") else "current"]
            runs[mode].append(one_run(mode, exe, which, drv, d / f"t{threads}-{mode}-{i}", threads,
                                      args.launches, driver_work=args.driver_work)["cpu"])
        for which in libs if args.blocks else ():
            got = one_run("paired", exe, libs[which], drv, d / f"t{threads}-paired-{which}-{i}", threads,
                          args.launches, args.blocks, args.driver_work, paired_kernel=args.paired_kernel)
            paired[which].append(paired_cost(got["blocks"], got["per_block"]))
        for part in parts:
            got = one_run("paired", exe, libs["current"], drv, d / f"t{threads}-{part}-{i}", threads,
                          args.launches, args.blocks, args.driver_work, part, args.paired_kernel)
            parts[part].append(paired_cost(got["blocks"], got["per_block"]))
    return {"cpu_ns_per_launch": runs, "paired": paired["current"], "baseline_paired": paired.get("baseline", []),
            "parts": parts}


def paired_line(procs: list[dict]) -> str:
    """Each process's estimate [interval], and the groups of all pooled: median [interval]."""
    pooled = [e for p in procs for e in p["estimates"]]
    lo, hi = median_interval(pooled)
    return (", ".join(f"{p['per_launch']:.1f} [{p['interval'][0]:.1f}-{p['interval'][1]:.1f}]" for p in procs)
            + f" ns; pooled {median(pooled):.1f} [{lo:.1f}-{hi:.1f}] ns over "
            f"{median([p['passthrough_per_launch'] for p in procs]):.0f} ns pass-through")


def main() -> None:
    parser = _parser()
    args = parser.parse_args()
    if args.blocks % 4 or (args.paired_only and not args.blocks):
        parser.error("--blocks must be a multiple of 4 (a p p a groups), and not 0 with --paired-only")
    if args.driver_work and not re.fullmatch(r"\d{1,7}:\d{1,7}", args.driver_work):
        parser.error(f"--driver-work {args.driver_work}: expected DATA_KIB:CODE_KIB, e.g. 256:128")
    libs = _libraries(parser, args)
    thread_counts = [int(t) for t in args.threads.split(",")]
    results: dict[int, dict] = {}
    with tempfile.TemporaryDirectory(prefix="kerncap-entry-cost-") as tmp:
        d = Path(tmp)
        drv, exe = B.fake_driver(d / "drv", work=bool(args.driver_work)), B.inject_app(d)
        for t in thread_counts:
            results[t] = measure(t, args, exe, libs, drv, d)

    summary = _print_runs(args, results)
    if not args.paired_only:
        _print_scaling(summary)
    write_json(args.json, {"bench": "entry_cost", "launches": args.launches, "repeat": args.repeat,
                           "blocks": args.blocks, "baseline": str(args.baseline) if args.baseline else None,
                           "driver_work": args.driver_work, "paired_kernel": args.paired_kernel,
                           "results": {str(t): r for t, r in results.items()}})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=2_000_000, help="in all, split over the threads")
    parser.add_argument("--threads", default="1", help="comma-separated thread counts, e.g. 1,2,8,16")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--blocks", type=int, default=200,
                        help="blocks of the in-process paired measure (multiple of 4; 0: skip it)")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="a directory with another build's libkerncap_inject.so and libkerncap_entry.so")
    parser.add_argument("--decompose", action="store_true",
                        help="also the paired rows wrapper, skip-callback, skip-launch, skip-quiesce (bench/paired.py's)")
    parser.add_argument("--paired-kernel", choices=("target", "never"), default="target",
                        help="the paired measure armed as `armed` (half the launches the target's, never its "
                             "dispatch) or as `armed-other` (a kernel that never launches: every launch plain, as "
                             "bench/paired.py arms it)")
    parser.add_argument("--paired-only", action="store_true", help="only the paired measure (no whole-process modes)")
    parser.add_argument("--driver-work", metavar="DATA_KIB:CODE_KIB",
                        help="each stand-in launch reads DATA_KIB of memory and runs CODE_KIB of code (e.g. 256:128)")
    parser.add_argument("--json", metavar="FILE")
    return parser


def _libraries(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, tuple[Path, Path]]:
    """This build's entry and inject libraries, and --baseline's."""
    if not (B.HEADERS and B.CC and B.CXX):
        sys.exit("needs a C/C++ compiler and the CUDA / CUPTI headers (CUDA_HOME, or Triton's wheel)")
    from kerncap.core.native import entry_library, inject_library

    inject = inject_library()
    if entry_library() is None:
        sys.exit(f"no libkerncap_entry.so next to {inject}: pip install . with the CUDA toolkit")
    libs = {"current": (entry_library(), inject)}
    if args.baseline:
        base = (args.baseline / "libkerncap_entry.so", args.baseline / "libkerncap_inject.so")
        missing = [str(p) for p in base if not p.is_file()]
        if missing:
            parser.error(f"--baseline: {', '.join(missing)} not found")
        libs["baseline"] = base
    return libs


def _print_runs(args: argparse.Namespace, results: dict[int, dict]) -> list[tuple[int, dict]]:
    """Per thread count: each mode's CPU ns per launch against direct, and the paired rows."""
    work = (f" whose launches each read {args.driver_work.split(':')[0]} KiB and run {args.driver_work.split(':')[1]} "
            "KiB of code" if args.driver_work else " that returns at once")
    print(f"{args.launches} launches in all through cuGetProcAddress into a stand-in driver{work}; CPU ns of the "
          f"launching threads per launch, median of {args.repeat} interleaved processes [90 % bootstrap interval of "
          "the ratio]")
    summary = []
    for t, r in results.items():
        runs = r["cpu_ns_per_launch"]
        print(f"\n{t} thread(s)")
        if runs:
            base = median(runs["direct"])
            rows = []
            for mode, values in runs.items():
                m = median(values)
                lo, hi = ratio_interval(values, runs["direct"])
                rows.append([mode, f"{m:.1f}", f"{m - base:+.1f}", f"{m / base:.2f} [{lo:.2f}-{hi:.2f}]"])
            print_table(["mode", "cpu ns/launch", "vs direct", "ratio [90 %]"], rows)
        if r["paired"]:
            print(f"  paired (armed - pass-through in one process, {r['paired'][0]['groups']} a-p-p-a groups each): "
                  + paired_line(r["paired"]))
        if r["baseline_paired"]:
            print("  baseline-paired (the same with --baseline's libraries): " + paired_line(r["baseline_paired"]))
        for part, procs in r["parts"].items():
            print(f"  {part}: " + paired_line(procs))
        summary.append((t, r))
    return summary


def _print_scaling(summary: list[tuple[int, dict]]) -> None:
    """kerncap's cost per launch over direct at each thread count, as a multiple of the 1-thread cost."""
    one = dict(summary).get(1) if 1 in dict(summary) else None
    rows = []
    for t, r in summary:
        runs = r["cpu_ns_per_launch"]
        base = median(runs["direct"])
        row = [str(t)]
        for mode in runs:
            if mode in ("direct", "preloaded"):
                continue
            cost = median(runs[mode]) - base
            scale = ""
            if one is not None:
                c1 = median(one["cpu_ns_per_launch"][mode]) - median(one["cpu_ns_per_launch"]["direct"])
                scale = f" ({cost / c1:.2f}x)" if c1 > 0 else ""
            row.append(f"{cost:+.1f}{scale}")
        if r["paired"]:
            p = median([x["per_launch"] for x in r["paired"]])
            scale = ""
            if one is not None and one["paired"]:
                p1 = median([x["per_launch"] for x in one["paired"]])
                scale = f" ({p / p1:.2f}x)" if p1 > 0 else ""
            row.append(f"{p:.1f}{scale}")
        rows.append(row)
    headers = ["threads"] + [m for m in summary[0][1]["cpu_ns_per_launch"] if m not in ("direct", "preloaded")]
    if summary[0][1]["paired"]:
        headers.append("paired")
    print("\nkerncap's cost per launch (CPU ns over direct; paired: armed - pass-through), (x the 1-thread cost)")
    print_table(headers, rows)


if __name__ == "__main__":
    main()
