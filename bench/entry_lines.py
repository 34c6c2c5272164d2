"""What kerncap's armed launch path touches per launch, counted by valgrind's cachegrind
instead of timed: instructions, L1 instruction lines missed, L1 data lines missed (reads
and writes), on the CPU stand-in of bench/entry_cost.py with its --driver-work eviction.

Timing on a shared 2-vCPU machine resolves ~5 ns at best; on the H200 the armed path's
cost is the cache lines it touches after the driver's launch has evicted them (docs/
facts.md §34), and cachegrind counts those lines exactly, run to run. Each mode runs
twice, with N and 2N launches; the difference over N is the per-launch figure (start-up
and exit cancel). Rows: preloaded (libkerncap_entry.so, nothing attached), armed-other
(armed for a kernel that never launches: every launch plain, the fast path's case, as
bench/paired.py arms it), and with --baseline DIR the same from another build; the cost
rows are armed-other minus preloaded.

  python3 bench/entry_lines.py [--launches 20000] [--driver-work 64:64] [--baseline DIR] [--json F]

Needs valgrind, a C/C++ compiler, the CUDA / CUPTI headers and the package built.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common import print_table, write_json
from entry_cost import B, app_env

EVENTS = ("Ir", "I1mr", "D1mr", "D1mw")
# One simulated cache for every run (an AMD EPYC's L1s; cachegrind's LL is the L3 here):
# the counts then depend on the code, not on the machine that runs the bench.
CACHES = ["--I1=32768,8,64", "--D1=49152,12,64", "--LL=33554432,16,64"]


def counts(mode: str, libs: tuple[Path, Path], exe: Path, drv: Path, out: Path, launches: int,
           work: str) -> dict[str, int]:
    env, inject = app_env(mode, libs, drv, out, work)
    cg = out.with_suffix(".cg")
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=yes", *CACHES, f"--cachegrind-out-file={cg}",
           str(exe), inject, "1", str(launches)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0 or "loop_ns=" not in p.stdout:
        sys.exit(f"{mode}: inject_app under cachegrind failed\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    text = cg.read_text()
    names = re.search(r"^events: (.*)$", text, re.M).group(1).split()
    total = [int(v) for v in re.search(r"^summary: (.*)$", text, re.M).group(1).split()]
    got = dict(zip(names, total))
    return {e: got[e] for e in EVENTS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=20_000, help="N (the second run has 2N)")
    parser.add_argument("--driver-work", default="64:64", metavar="DATA_KIB:CODE_KIB")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="a directory with another build's libkerncap_inject.so and libkerncap_entry.so")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    if not re.fullmatch(r"\d{1,7}:\d{1,7}", args.driver_work):
        parser.error(f"--driver-work {args.driver_work}: expected DATA_KIB:CODE_KIB, e.g. 64:64")
    if not shutil.which("valgrind"):
        sys.exit("needs valgrind (cachegrind)")
    if not (B.HEADERS and B.CC and B.CXX):
        sys.exit("needs a C/C++ compiler and the CUDA / CUPTI headers (CUDA_HOME, or Triton's wheel)")
    from kerncap.core.native import entry_library, inject_library

    libs = {"current": (entry_library(), inject_library())}
    if args.baseline:
        libs["baseline"] = (args.baseline / "libkerncap_entry.so", args.baseline / "libkerncap_inject.so")
    per_launch: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="kerncap-entry-lines-") as tmp:
        d = Path(tmp)
        drv, exe = B.fake_driver(d / "drv", work=True), B.inject_app(d)
        for which, lib in libs.items():
            for mode in ("preloaded", "armed-other"):
                n1, n2 = (counts(mode, lib, exe, drv, d / f"{which}-{mode}-{n}", n, args.driver_work)
                          for n in (args.launches, 2 * args.launches))
                per_launch[f"{which} {mode}"] = {e: (n2[e] - n1[e]) / args.launches for e in EVENTS}
    print(f"per launch, cachegrind ({args.launches} launches more in one run than the other; the stand-in driver "
          f"reads {args.driver_work.split(':')[0]} KiB and runs {args.driver_work.split(':')[1]} KiB of code a launch)")
    rows = [[name] + [f"{v[e]:.1f}" for e in EVENTS] for name, v in per_launch.items()]
    for which in libs:
        armed, pre = per_launch[f"{which} armed-other"], per_launch[f"{which} preloaded"]
        rows.append([f"{which}: armed - preloaded"] + [f"{armed[e] - pre[e]:+.1f}" for e in EVENTS])
    print_table(["run", "instructions", "L1i lines missed", "L1d read misses", "L1d write misses"], rows)
    write_json(args.json, {"bench": "entry_lines", "launches": args.launches, "driver_work": args.driver_work,
                           "baseline": str(args.baseline) if args.baseline else None, "per_launch": per_launch})


if __name__ == "__main__":
    main()
