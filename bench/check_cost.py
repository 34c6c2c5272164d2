"""What checking every timed launch costs (issue 42's goal: at most 1.5x the unchecked
replay's wall time for a kernel writing 4 GiB, 1.1x for one writing 16 MiB).

testapps' smooth (y = w (*) x over n floats: it writes 4n bytes) is extracted at each size;
then one replay server answers `replay` requests with the check on and off, in ABBA order
per round, and the wall time of each request (restore, warm-up, timed launches and, when
on, a GPU compare after each timed launch) is measured on the client. Prints the median
ratio checked/unchecked with the range of the per-round ratios, and the kernel's median.

    python3 bench/check_cost.py [--build DIR] [--sizes 22,30] [--rounds 6] [--iterations 10] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SMOOTH = "_Z6smoothPKfPfS0_ii"


def timed(rc, iterations: int, check: bool) -> tuple[float, dict]:
    t0 = time.perf_counter()
    r = rc.request("replay", cubin=None, iterations=iterations, warmup=3, flush_l2=False, check=check)
    return time.perf_counter() - t0, r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.environ.get("KERNCAP_TESTAPPS_BUILD", "/tmp/kc-testapps"))
    ap.add_argument("--sizes", default="22,30", help="log2 of n (floats written: 4n bytes)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--json")
    args = ap.parse_args()
    from kerncap.capture.extract import extract
    from kerncap.replay.client import ReplayClient

    rows = []
    work = Path(tempfile.mkdtemp(prefix="kc-check-cost-"))
    for log2 in (int(s) for s in args.sizes.split(",")):
        n = 1 << log2
        out = work / f"smooth-{log2}"
        extract(SMOOTH, [str(Path(args.build) / "smooth"), str(n)], output=out, match="exact", timeout=600)
        ratios, on_s, off_s = [], [], []
        with ReplayClient(out) as rc:
            timed(rc, args.iterations, True)  # warm: modules, resident copies, the compare kernels
            for r in range(args.rounds):
                order = (False, True, True, False) if r % 2 == 0 else (True, False, False, True)
                got = {False: [], True: []}
                for check in order:
                    seconds, result = timed(rc, args.iterations, check)
                    got[check].append(seconds)
                    if check:
                        assert result["check"]["checked"] == args.iterations and not result["check"]["void"]
                        kernel_ms = result["median_ms"]
                on, off = statistics.mean(got[True]), statistics.mean(got[False])
                on_s.append(on)
                off_s.append(off)
                ratios.append(on / off)
        row = {"written_bytes": 4 * n, "median_ratio": statistics.median(ratios), "min_ratio": min(ratios),
               "max_ratio": max(ratios), "checked_s": statistics.median(on_s), "unchecked_s": statistics.median(off_s),
               "kernel_ms": kernel_ms, "iterations": args.iterations, "rounds": args.rounds}
        rows.append(row)
        print(f"writes {4 * n / 2**20:,.0f} MiB: checked/unchecked wall {row['median_ratio']:.3f}x "
              f"[{row['min_ratio']:.3f}-{row['max_ratio']:.3f}] over {args.rounds} ABBA rounds "
              f"({row['checked_s'] * 1e3:.1f} vs {row['unchecked_s'] * 1e3:.1f} ms per request of "
              f"{args.iterations} timed launches; kernel median {kernel_ms:.3f} ms)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
