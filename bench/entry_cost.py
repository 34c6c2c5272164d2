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
launches alternate, in ABBA order, kerncap's full armed path and its pass-through (the
entry-point wrapper jumping straight to the driver, kerncap_bench_passthrough), so
both halves of each pair see the same CPU state.

Costs are CPU nanoseconds of the launching threads per launch (their CLOCK_THREAD_CPUTIME_ID
summed): with more threads than cores the wall time says nothing per launch, CPU time
does, and cache lines bouncing between cores show in it. --launches is the total, split
over the threads. The driver's own cost is not in it (the stand-in returns at once).
Needs the package built (pip install ., or KERNCAP_INJECT_LIB), a C/C++ compiler and
the CUDA / CUPTI headers.

  python3 bench/entry_cost.py [--launches 2000000] [--threads 1,2,8,16] [--repeat 7]
                              [--baseline DIR] [--blocks 200] [--json F]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from common import REPO, median, paired_cost, parse_blocks, print_table, ratio_interval, write_json

sys.path.insert(0, str(REPO / "tests" / "fixtures" / "entry_hooks"))
import entry_build as B  # noqa: E402

MODES = ("direct", "preloaded", "armed", "armed-other")


def app_env(mode: str, libs: tuple[Path, Path], drv: Path, out: Path) -> tuple[dict[str, str], str]:
    """The environment and the injection library argument of inject_app for `mode`."""
    entry, inject = libs
    env = {**os.environ, "LD_LIBRARY_PATH": str(drv)}
    for k in [k for k in env if k.startswith("KERNCAP_")]:
        del env[k]
    if mode == "direct":
        return env, "-"
    env["LD_PRELOAD"] = str(entry)
    if mode == "preloaded":
        return env, "-"
    out.mkdir(parents=True, exist_ok=True)
    env.update(KERNCAP_MODE="capture", KERNCAP_OUT=str(out), KERNCAP_DISPATCH=str(10**12), KERNCAP_KEEP_RUNNING="1",
               KERNCAP_INTERCEPT="entry", KERNCAP_KERNEL="target" if mode.endswith("armed") else "kc_never_launched")
    return env, str(inject)


def one_run(mode: str, exe: Path, libs: tuple[Path, Path], drv: Path, out: Path, threads: int, launches: int,
            blocks: int = 0) -> dict:
    env, inject = app_env(mode.replace("baseline-", "").replace("paired", "armed"), libs, drv, out)
    if blocks:
        env["KERNCAP_BENCH_PASSTHROUGH"] = "1"
    per_thread = launches // threads // max(blocks, 1) * max(blocks, 1)
    p = B.run([str(exe), inject, str(threads), str(per_thread)] + ([str(blocks)] if blocks else []), env=env)
    if p.returncode != 0 or "loop_ns=" not in p.stdout:
        sys.exit(f"{mode}: inject_app failed\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    total = threads * per_thread
    if blocks:
        return {"blocks": parse_blocks(p.stdout), "per_block": total // blocks}
    line = next(x for x in p.stdout.splitlines() if x.startswith("loop_ns="))
    fields = dict(f.split("=", 1) for f in line.split())
    return {"wall": int(fields["loop_ns"]) / total, "cpu": int(fields["cpu_ns"]) / total}


def measure(threads: int, args, exe: Path, libs: dict[str, tuple[Path, Path]], drv: Path, d: Path) -> dict:
    modes = list(MODES) + (["baseline-armed", "baseline-armed-other"] if "baseline" in libs else [])
    runs: dict[str, list[float]] = {m: [] for m in modes}
    paired: list[dict] = []
    for i in range(args.repeat):  # interleaved: drift hits every mode alike
        for mode in modes:
            which = libs["baseline" if mode.startswith("baseline-") else "current"]
            runs[mode].append(one_run(mode, exe, which, drv, d / f"t{threads}-{mode}-{i}", threads,
                                      args.launches)["cpu"])
        if args.blocks:
            got = one_run("paired", exe, libs["current"], drv, d / f"t{threads}-paired-{i}", threads, args.launches,
                          args.blocks)
            paired.append(paired_cost(got["blocks"], got["per_block"]))
    return {"cpu_ns_per_launch": runs, "paired": paired}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=2_000_000, help="in all, split over the threads")
    parser.add_argument("--threads", default="1", help="comma-separated thread counts, e.g. 1,2,8,16")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--blocks", type=int, default=200,
                        help="blocks of the in-process paired measure (multiple of 4; 0: skip it)")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="a directory with another build's libkerncap_inject.so and libkerncap_entry.so")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    if args.blocks % 4:
        parser.error("--blocks must be a multiple of 4 (a p p a groups)")
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
    thread_counts = [int(t) for t in args.threads.split(",")]
    results: dict[int, dict] = {}
    with tempfile.TemporaryDirectory(prefix="kerncap-entry-cost-") as tmp:
        d = Path(tmp)
        drv, exe = B.fake_driver(d / "drv"), B.inject_app(d)
        for t in thread_counts:
            results[t] = measure(t, args, exe, libs, drv, d)

    print(f"{args.launches} launches in all through cuGetProcAddress into a stand-in driver; CPU ns of the launching "
          f"threads per launch, median of {args.repeat} interleaved processes [90 % bootstrap interval of the ratio]")
    summary = []
    for t, r in results.items():
        runs = r["cpu_ns_per_launch"]
        base = median(runs["direct"])
        rows = []
        for mode, values in runs.items():
            m = median(values)
            lo, hi = ratio_interval(values, runs["direct"])
            rows.append([mode, f"{m:.1f}", f"{m - base:+.1f}", f"{m / base:.2f} [{lo:.2f}-{hi:.2f}]"])
        print(f"\n{t} thread(s)")
        print_table(["mode", "cpu ns/launch", "vs direct", "ratio [90 %]"], rows)
        if r["paired"]:
            costs = [p["per_launch"] for p in r["paired"]]
            print(f"  paired (armed - pass-through in one process, {r['paired'][0]['groups']} a-p-p-a groups each): "
                  + ", ".join(f"{p['per_launch']:.1f} [{p['interval'][0]:.1f}-{p['interval'][1]:.1f}]"
                              for p in r["paired"]) + f" ns; median {median(costs):.1f} ns")
        summary.append((t, r))
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
    write_json(args.json, {"bench": "entry_cost", "launches": args.launches, "repeat": args.repeat,
                           "blocks": args.blocks, "baseline": str(args.baseline) if args.baseline else None,
                           "results": {str(t): r for t, r in results.items()}})


if __name__ == "__main__":
    main()
