"""What entry-point interception (KERNCAP_INTERCEPT=entry) costs per driver call on the
CPU, without a GPU: tests/fixtures/entry_hooks/inject_app.c launches N times through
cuGetProcAddress into the stand-in libcuda (a function that returns), three ways,
interleaved, median of --repeat:
  direct     no kerncap
  preloaded  libkerncap_entry.so preloaded, nothing attached (what every process the
             app starts pays: a load and a jump per watched call)
  armed      + libkerncap_inject.so attached to the entry points, armed for a kernel
             that launches but is never the dispatch (kerncap's whole per-launch path:
             CUPTI-shaped callback data, the dispatcher, the function cache, counting)
and prints ns per launch with the difference to direct. The driver's own cost is not
in it (the stand-in returns at once); CUPTI's ~100 ns per call (docs/facts.md §6) is
what this path removes. Needs the package built (pip install .) for the injection
library, a C/C++ compiler and the CUDA / CUPTI headers.

  python3 bench/entry_cost.py [--launches 2000000] [--threads 1] [--repeat 7] [--json F]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from common import REPO, median, print_table, ratio_interval, write_json

sys.path.insert(0, str(REPO / "tests" / "fixtures" / "entry_hooks"))
import entry_build as B  # noqa: E402


def one_run(mode: str, exe: Path, entry: Path, inject: Path, drv: Path, out: Path, threads: int,
            launches: int) -> float:
    env = {**os.environ, "LD_LIBRARY_PATH": str(drv)}
    if mode != "direct":
        env["LD_PRELOAD"] = str(entry)
    if mode == "armed":
        out.mkdir(parents=True, exist_ok=True)
        env.update(KERNCAP_MODE="capture", KERNCAP_OUT=str(out), KERNCAP_KERNEL="target", KERNCAP_DISPATCH=str(10**12),
                   KERNCAP_KEEP_RUNNING="1", KERNCAP_INTERCEPT="entry")
    p = B.run([str(exe), str(inject) if mode == "armed" else "-", str(threads), str(launches)], env=env)
    if p.returncode != 0 or "loop_ns=" not in p.stdout:
        sys.exit(f"{mode}: inject_app failed\n{p.stdout}{p.stderr}")
    loop_ns = int(p.stdout.split("loop_ns=")[1].split()[0])
    return loop_ns / (threads * launches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=2_000_000, help="per thread")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    if not (B.HEADERS and B.CC and B.CXX):
        sys.exit("needs a C/C++ compiler and the CUDA / CUPTI headers (CUDA_HOME, or Triton's wheel)")
    from kerncap.core.native import entry_library, inject_library

    inject = inject_library()
    if entry_library() is None:
        sys.exit(f"no libkerncap_entry.so next to {inject}: pip install . with the CUDA toolkit")
    with tempfile.TemporaryDirectory(prefix="kerncap-entry-cost-") as tmp:
        d = Path(tmp)
        entry, drv, exe = entry_library(), B.fake_driver(d / "drv"), B.inject_app(d)
        modes = ("direct", "preloaded", "armed")
        ns: dict[str, list[float]] = {m: [] for m in modes}
        for i in range(args.repeat):  # interleaved: drift hits every mode alike
            for mode in modes:
                ns[mode].append(one_run(mode, exe, entry, inject, drv, d / f"run-{mode}-{i}", args.threads,
                                        args.launches))
    base = median(ns["direct"])
    rows = []
    for mode in modes:
        m = median(ns[mode])
        lo, hi = ratio_interval(ns[mode], ns["direct"])
        rows.append([mode, f"{m:.1f}", f"{m - base:+.1f}", f"{m / base:.2f} [{lo:.2f}-{hi:.2f}]"])
    print(f"{args.launches} launches x {args.threads} thread(s) through cuGetProcAddress into a stand-in driver, "
          f"median of {args.repeat} interleaved runs")
    print_table(["mode", "ns/launch", "vs direct", "ratio [90 %]"], rows)
    write_json(args.json, {"bench": "entry_cost", "launches": args.launches, "threads": args.threads,
                           "repeat": args.repeat, "ns_per_launch": ns})


if __name__ == "__main__":
    main()
