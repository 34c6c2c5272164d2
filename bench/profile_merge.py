"""Merging per-process profiles (kerncap.capture.profile.merge_profiles) of many kernels
and processes, against the least a merge can cost: one pass summing calls and totals per
name in a dict, timed on the same reports in the same run.

    PYTHONPATH=engine python3 bench/profile_merge.py [--processes 8] [--kernels 20000] [--repeat 5]

Goal: under 5 s for 8 processes x 20,000 kernels (tests/test_profile_merge.py's bound
before its timing moved here). Runs on a CPU-only machine.
"""

from __future__ import annotations

import argparse
import statistics

from common import print_table, timed, verdict, write_json

GOAL_S = 5.0


def reports(processes: int, kernels: int) -> list[dict]:
    return [{"pid": p, "kernels": [{"name": f"kernel_{i}", "demangled": "", "calls": 50, "total_ns": 1000 + i,
                                    "min_ns": 10, "max_ns": 40, "grid": [1, 1, 1], "block": [128, 1, 1]}
                                   for i in range(kernels)]} for p in range(processes)]


def floor_merge(reps: list[dict]) -> dict:
    sums: dict[str, list[int]] = {}
    for r in reps:
        for k in r["kernels"]:
            s = sums.setdefault(k["name"], [0, 0])
            s[0] += k["calls"]
            s[1] += k["total_ns"]
    return dict(sorted(sums.items(), key=lambda kv: -kv[1][1]))


def main() -> None:
    from kerncap.capture.profile import merge_profiles

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--kernels", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    reps = reports(args.processes, args.kernels)
    merged, floor = [], []
    for _ in range(args.repeat):  # interleaved
        t, (kernels, _) = timed(lambda: merge_profiles(reps))
        merged.append(t)
        floor.append(timed(lambda: floor_merge(reps))[0])
        assert len(kernels) == args.kernels
    m, f = statistics.median(merged), statistics.median(floor)
    print(f"{args.processes} processes x {args.kernels} kernels, medians of {args.repeat} (interleaved)")
    print_table(["merge", "median", "against"], [
        ["dict sum per name (floor)", f"{f:.3f} s", "baseline"],
        ["merge_profiles", f"{m:.3f} s", f"{m / f:.1f}x the floor; goal <= {GOAL_S:g} s {verdict(m <= GOAL_S)}"]])
    write_json(args.json, {"processes": args.processes, "kernels": args.kernels, "merge_s": merged, "floor_s": floor})


if __name__ == "__main__":
    main()
