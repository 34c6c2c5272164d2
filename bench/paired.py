"""The paired measure (issue 31): what kerncap's armed dispatcher costs one launch, in
nanoseconds with a bootstrap interval, measured inside one process so that both halves
of every pair see the same CPU state (the H200 machines switch speed states within
seconds, docs/facts.md §28: whole-process timing cannot resolve 2 %).

Each app runs under `extract` armed for a kernel that never launches (the graph row:
for the graph's own kernel, at a dispatch past the end), with KERNCAP_BENCH_PASSTHROUGH=1
(such a process never captures). It launches in blocks of a few thousand; between
blocks it flips kerncap_bench_passthrough in ABBA order: kerncap's full armed path (a)
or the entry-point wrapper jumping straight to the driver (p). Each a-p-p-a group gives
one estimate of a - p per launch in which a linear drift cancels (bench/common.py
paired_cost); a row pools the groups of --repeat processes: median [90 % bootstrap
interval over the groups]. Costs are CPU ns of the launching threads per launch.
  cudart     testapps/cuda/launch_paired kernel T: <<<>>> launches of an empty kernel
             from T threads (--threads), each on its own stream
  graph      launch_paired graph 1: cudaGraphLaunch of a one-node graph
  torch      testapps/python/paired_launches.py --kind torch: x.add_(1.0)
  triton     paired_launches.py --kind triton: a one-block Triton kernel
  wrapper    the cudart row at 1 thread, a = the entry-point wrapper's full path with a
             dispatcher that does nothing (KC_PAIRED_ARMED=wrapper; the launch fast path is
             off meanwhile: it is all wrapper, so the cudart row is its cost)
  skip-callback, skip-launch, skip-quiesce
             the cudart row at 1 thread through the full path (no fast path) with the
             dispatcher stopping early (KERNCAP_BENCH_SKIP, bench processes only): at its
             entry, after counting the launch, or without the quiesce flag; differences
             between the rows place the full path's cost (the fast path, inline in the
             wrapper, has no stopping points: bench/entry_lines.py counts its lines)
  skip-fastpath
             the cudart row at 1 thread without the launch fast path (KERNCAP_BENCH_SKIP=
             fastpath): every launch through both callbacks, as before it
             (docs/interposer.md), for a before/after in one run
  apply      the cudart row at 1 thread under `kerncap apply` (issue 46) with the kernel's own
             captured cubin as the variant: a = every launch substituted, p = the same armed
             apply path with the redirect held back (kerncap_bench_passthrough mode 3: the
             launch identified and counted, not redirected); goal a - p <= 100 ns
  preloaded  libkerncap_entry.so preloaded but not attached (what every process the app
             starts pays) against no library: launch_paired kernel 1 in --repeat
             interleaved processes each way; difference of medians [interval]
--builds NAME=DIR,...: each row's processes run once per build in turn (interleaved, so
drift reaches every build alike), DIR holding a libkerncap_inject.so and its sibling
libkerncap_entry.so (bench/fast_variants.sh builds the fast path stopped early), NAME=
installed the package's own; rows are then named "<row> [NAME]".
--pool FILE:ROW ...: no run; the groups of those rows of earlier --json files pooled into
one estimate (the same build measured in several runs: each run's machine state differs);
with --over FILE:ROW ... also the ratio of the two pools' medians (16 threads over one).
Goals, met only when the whole interval is under them: cudart 1 thread <= 40 ns; 16
threads <= 1.5x the 1-thread cost (ratio of the medians, groups resampled on both sides).

  python3 bench/paired.py [--repeat 3] [--threads 1,2,8,16] [--rows cudart,graph,torch,triton,preloaded]
                          [--blocks 64] [--per-block 4096] [--build-dir D] [--json F]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import (PYAPPS, bootstrap, build_testapps, diff_interval, median, median_interval, paired_cost,
                    parse_blocks, print_table, verdict, write_json)

GOAL_NS = 40.0
GOAL_SCALING = 1.5
GOAL_APPLY_NS = 100.0
SKIPS = ("skip-callback", "skip-launch", "skip-quiesce", "skip-fastpath")
ROWS = ("cudart", "wrapper", *SKIPS, "apply", "graph", "torch", "triton", "preloaded")
OPT_IN = ("wrapper", *SKIPS, "apply")  # rows run only when --rows names them


def row_command(row: str, threads: int, args, build_dir: Path) -> tuple[list[str], int]:
    """The app's command for a row and the launches of one block (all threads)."""
    if row in ("cudart", "wrapper", *SKIPS, "apply", "graph", "preloaded"):
        kind = "graph" if row == "graph" else "kernel"
        return ([str(build_dir / "launch_paired"), kind, str(threads), str(args.blocks), str(args.per_block)],
                threads * args.per_block)
    per_block = args.per_block // 2 if row == "torch" else args.per_block // 8  # a Python launch costs more
    return ([sys.executable, str(PYAPPS / "paired_launches.py"), "--kind", row, "--blocks", str(args.blocks),
             "--per-block", str(per_block)], per_block)


def armed_run(row: str, command: list[str], workdir: Path, n: int, build: Path | None = None) -> str:
    """The app's stdout, run under extract armed for a kernel it never dispatches, with
    the libraries of `build` (a directory) instead of the installed ones."""
    saved = os.environ.get("KERNCAP_INJECT_LIB")
    if build is not None:  # extract resolves the libraries from the environment
        os.environ["KERNCAP_INJECT_LIB"] = str(build / "libkerncap_inject.so")
    try:
        return _armed_run(row, command, workdir, n)
    finally:
        if saved is None:
            os.environ.pop("KERNCAP_INJECT_LIB", None)
        else:
            os.environ["KERNCAP_INJECT_LIB"] = saved


def checked_switch(row: str, text: str) -> str:
    """The app's stdout, once it shows the bench switch was there in the row's mode."""
    armed = {"wrapper": "wrapper", "apply": "apply"}.get(row, "full")
    if "switch=paired" not in text or f"armed={armed}" not in text:
        sys.exit(f"{row}: the bench switch was not available in the app:\n{text[-2000:]}")
    return text


def apply_run(command: list[str], workdir: Path) -> str:
    """The app's stdout under `kerncap apply` (Session.apply, what the CLI and MCP run)
    substituting kc_paired_tiny by its own captured cubin, the bench switch allowed and the
    app told to hold the redirect back in its p blocks (KC_PAIRED_ARMED=apply)."""
    from kerncap import api

    repro, cubin = workdir / "apply-tiny", workdir / "apply-tiny.cubin"
    if not repro.exists():  # one capture serves every process of the row
        from apply_cost import extract_tiny

        _, captured = extract_tiny(Path(command[0]).parent, workdir, output=repro)
        cubin.write_bytes(Path(captured).read_bytes())  # a cubin of no History row: nothing recorded
    out: list[bytes] = []
    request = api.options.ApplyRequest(command=tuple(command), cubin=str(cubin), runs=0,
                                       env={"KERNCAP_BENCH_PASSTHROUGH": "1", "KC_PAIRED_ARMED": "apply"})
    with api.open(repro, compile_worker=False) as session:
        result = session.apply(request, output=lambda stream, data: out.append(data) if stream == "stdout" else None)
    if not 0 < result.substituted < result.launches:
        sys.exit(f"apply: {result.substituted} of {result.launches} launches substituted; the a blocks' "
                 "should have been, the p blocks' not")
    return checked_switch("apply", b"".join(out).decode(errors="replace"))


def _armed_run(row: str, command: list[str], workdir: Path, n: int) -> str:
    from kerncap.capture.extract import extract
    from kerncap.errors import KerncapError

    if row == "apply":
        return apply_run(command, workdir)
    out: list[bytes] = []
    env = {**os.environ, "KERNCAP_BENCH_PASSTHROUGH": "1", "KERNCAP_INTERCEPT": "entry"}
    if row == "wrapper":
        env["KC_PAIRED_ARMED"] = "wrapper"
    if row in SKIPS:
        env["KERNCAP_BENCH_SKIP"] = row.removeprefix("skip-")
    target, dispatch = ("kc_paired_tiny", 10**12) if row == "graph" else ("kc_never", 0)
    try:
        extract(target, command, output=workdir / f"never-{row}-{n}", dispatch=dispatch, keep_running=True, env=env,
                output_sink=lambda stream, data: out.append(data) if stream == "stdout" else None)
    except KerncapError as exc:
        if "never ran" not in exc.message and "ran only" not in exc.message:
            raise
    else:
        sys.exit(f"{row}: {target} was captured?")
    return checked_switch(row, b"".join(out).decode(errors="replace"))


def plain_cpu_per_launch(command: list[str], per_block: int, preload: bool) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNCAP_", "CUDA_INJECTION64"))}
    if preload:
        from kerncap.core.native import entry_library

        env["LD_PRELOAD"] = str(entry_library())
    p = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"{command[0]} exited with status {p.returncode}:\n{p.stderr[-2000:]}")
    blocks = parse_blocks(p.stdout)[4:]  # past the first group, as paired_cost
    return sum(v for _, v in blocks) / (per_block * len(blocks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="processes per row")
    parser.add_argument("--threads", default="1,2,8,16", help="thread counts of the cudart row")
    parser.add_argument("--rows", default=",".join(r for r in ROWS if r not in OPT_IN),
                        help=f"from {', '.join(ROWS)} (default: the rows with goals and the preloaded one)")
    parser.add_argument("--blocks", type=int, default=64, help="blocks per process (a multiple of 4)")
    parser.add_argument("--per-block", type=int, default=4096, help="launches per thread and block (cudart, graph)")
    parser.add_argument("--build-dir", type=Path, default=Path(tempfile.gettempdir()) / "kerncap-testapps")
    parser.add_argument("--builds", default="", metavar="NAME=DIR,...",
                        help="run every row once per build in turn (NAME=installed: the package's own)")
    parser.add_argument("--pool", nargs="+", metavar="FILE:ROW", help="pool rows of earlier runs; run nothing")
    parser.add_argument("--over", nargs="+", metavar="FILE:ROW", help="with --pool: the ratio to this pool")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    if args.over and not args.pool:
        parser.error("--over goes with --pool")
    if args.pool:
        return pool(args.pool, parser, args.over)
    rows = [r for r in args.rows.split(",") if r]
    if set(rows) - set(ROWS) or args.blocks % 4:
        parser.error(f"--rows from {', '.join(ROWS)}; --blocks a multiple of 4")
    builds: dict[str, Path | None] = {}
    for item in filter(None, args.builds.split(",")):
        name, sep, where = item.partition("=")
        if not sep or not name or name in builds:
            parser.error(f"--builds: {item!r} is not a new NAME=DIR")
        builds[name] = None if where == "installed" else Path(where)
        if builds[name] is not None and not (builds[name] / "libkerncap_inject.so").is_file():
            parser.error(f"--builds: {where} has no libkerncap_inject.so")
    if builds and "preloaded" in rows:
        parser.error("--builds: the preloaded row runs no dispatcher; leave it out")
    builds = builds or {"": None}
    build_dir = build_testapps(args.build_dir)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="kerncap-bench-paired-") as tmp:
        work = Path(tmp)
        for row in rows:
            if row == "preloaded":
                command, per_block = row_command(row, 1, args, build_dir)
                runs: dict[str, list[float]] = {"none": [], "preloaded": []}
                for _ in range(args.repeat):  # interleaved
                    runs["none"].append(plain_cpu_per_launch(command, per_block, False))
                    runs["preloaded"].append(plain_cpu_per_launch(command, per_block, True))
                results[row] = {"cpu_ns_per_launch": runs}
                continue
            for threads in ([int(t) for t in args.threads.split(",")] if row == "cudart" else [1]):
                command, per_block = row_command(row, threads, args, build_dir)
                procs: dict[str, list[dict]] = {name: [] for name in builds}
                for i in range(args.repeat):
                    for j, (name, where) in enumerate(builds.items()):
                        text = armed_run(row, command, work, len(builds) * i + j, where)
                        procs[name].append(paired_cost(parse_blocks(text), per_block))
                for name, ps in procs.items():
                    key = (f"{row} x{threads}" if row == "cudart" else row) + (f" [{name}]" if name else "")
                    results[key] = {"threads": threads, "per_block": per_block, "build": name or None,
                                    "processes": ps, "estimates": [e for p in ps for e in p["estimates"]]}
    report(results, args)
    write_json(args.json, {"bench": "paired", "repeat": args.repeat, "blocks": args.blocks,
                           "per_block": args.per_block, "results": results})


def pooled(items: list[str], parser, option: str = "--pool") -> tuple[list[float], list[str]]:
    """The a-p-p-a groups of rows saved by earlier runs, and a line per row."""
    import json

    estimates, parts = [], []
    for item in items:
        path, sep, row = item.partition(":")
        try:
            results = json.loads(Path(path).read_text())["results"]
        except (OSError, ValueError, KeyError) as exc:
            parser.error(f"{option}: {path} is not a paired.py --json file ({exc})")
        if not sep or row not in results or "estimates" not in results[row]:
            parser.error(f"{option}: {path} has no row {row!r} (rows: {', '.join(results)})")
        est = results[row]["estimates"]
        estimates += est
        parts.append(f"  {path}:{row}: {median(est):.1f} ns, {len(est)} groups")
    return estimates, parts


def pool(items: list[str], parser, over: list[str] | None = None) -> None:
    """One estimate from rows of earlier runs; with `over`, its ratio to another pool."""
    def rows_are(chosen: list[str], threads: int) -> bool:  # the goals are for cudart rows
        return all(item.rpartition(":")[2].split(" [")[0] == f"cudart x{threads}" for item in chosen)

    estimates, parts = pooled(items, parser)
    lo, hi = median_interval(estimates)
    print("\n".join(parts))
    goal = f" (goal <= {GOAL_NS:.0f} ns: {verdict(hi <= GOAL_NS)})" if rows_are(items, 1) else ""
    print(f"pooled: {median(estimates):.1f} ns [{lo:.1f}-{hi:.1f}] over {len(estimates)} a-p-p-a groups{goal}")
    if over:
        base, parts = pooled(over, parser, "--over")
        ratio = median(estimates) / median(base)
        rlo, rhi = bootstrap(lambda a, b: statistics.median(a) / statistics.median(b), estimates, base)
        print("\n".join(parts))
        goal = (f" (goal <= {GOAL_SCALING:.1f}x: {verdict(rhi <= GOAL_SCALING)})"
                if rows_are(items, 16) and rows_are(over, 1) else "")
        print(f"over {median(base):.1f} ns ({len(base)} groups): {ratio:.2f}x [{rlo:.2f}-{rhi:.2f}]{goal}")


def report(results: dict[str, dict], args) -> None:
    print(f"kerncap's armed dispatcher per launch, paired in one process (ABBA blocks, {args.repeat} process(es) per "
          "row): CPU ns of the launching threads, median [90 % bootstrap interval over the a-p-p-a groups]")
    rows = []
    for name, r in results.items():
        if name == "preloaded":
            continue
        est = r["estimates"]
        lo, hi = median_interval(est)
        through = median([p["passthrough_per_launch"] for p in r["processes"]])
        build = f" [{r['build']}]" if r.get("build") else ""
        one = results.get(f"cudart x1{build}")
        goal, met = "", ""
        if name == f"cudart x1{build}":
            goal, met = f"<= {GOAL_NS:.0f} ns", verdict(hi <= GOAL_NS)
        if name == f"apply{build}":  # a = substituted, p = the unsubstituted armed apply path
            goal, met = f"<= {GOAL_APPLY_NS:.0f} ns", verdict(hi <= GOAL_APPLY_NS)
        scale = ""
        if one is not None and name.startswith("cudart x") and r is not one:
            ratio = median(est) / median(one["estimates"])
            slo, shi = bootstrap(lambda a, b: statistics.median(a) / statistics.median(b), est, one["estimates"])
            scale = f"{ratio:.2f}x [{slo:.2f}-{shi:.2f}]"
            if r["threads"] == 16:
                goal, met = f"<= {GOAL_SCALING:.1f}x", verdict(shi <= GOAL_SCALING)
        rows.append([name, f"{median(est):.1f} [{lo:.1f}-{hi:.1f}]", f"{through:.0f}",
                     f"{100 * median(est) / through:.1f} %", str(len(est)), scale, goal, met])
    if rows:
        print_table(["row", "armed - pass-through ns", "pass-through ns", "share", "groups", "vs 1 thread", "goal",
                     ""], rows)
    if "preloaded" in results:
        runs = results["preloaded"]["cpu_ns_per_launch"]
        lo, hi = diff_interval(runs["preloaded"], runs["none"])
        spread = max(runs["none"]) / min(runs["none"]) - 1
        print(f"\npreloaded but not attached vs no library (launch_paired kernel 1, {len(runs['none'])} interleaved "
              f"processes each; whole-process medians, run-to-run spread of the baseline {100 * spread:.1f} %):")
        print(f"  {median(runs['none']):.1f} ns -> {median(runs['preloaded']):.1f} ns per launch: "
              f"{median(runs['preloaded']) - median(runs['none']):+.1f} ns [{lo:+.1f} to {hi:+.1f}]")


if __name__ == "__main__":
    main()
