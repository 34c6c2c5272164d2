"""What `kerncap apply` adds to a launch (issue 46; goal: at most 100 ns per substituted
launch over the unsubstituted armed path), and what `--check` adds on top.

    python3 bench/apply_cost.py [--build DIR] [--rounds 8] [--blocks 16] [--per-block 8192] [--json FILE]

testapps/cuda/launch_paired launches an empty kernel (kc_paired_tiny) from one thread in
blocks of --per-block launches and prints the thread CPU each block took. Its dispatch 0 is
captured once; the "variant" is the captured cubin itself (the same code, so the time is
kerncap's alone). Each round sends three requests through the open session's apply
(`Session.apply`, what `kerncap apply` and MCP's apply call: the entry-point wrapper
preloaded, apply mode armed for kc_paired_tiny), in ABBA order across rounds:

  armed        `--dispatch` past the end: every launch identified and counted, none redirected
  substituted  every launch redirected to the variant module's function
  checked      `--check`: the app once as is and once substituted, both fingerprinting each
               launch's outputs (this kernel has none: the check's bookkeeping alone);
               reported as armed+check and checked

Per process: the median over blocks (the first left out) of CPU ns per launch. The cost of
a way is the difference of the per-process medians from `armed`, with a 90 % bootstrap
interval over the processes. Processes differ in CPU state (docs/facts.md §28), so rounds
interleave the ways."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import build_testapps, diff_interval, parse_blocks, write_json  # noqa: E402

WAYS = ("armed", "substituted", "checked")  # the order a round runs them in
REPORTED = ("armed", "substituted", "armed+check", "checked")
KERNEL = "_Z14kc_paired_tinyv"  # kc_paired_tiny(), --match exact


def per_launch(text: str, per_block: int) -> float:
    """Median CPU ns per launch over the app's blocks, the first (warm-up) left out."""
    blocks = [ns for _mode, ns in parse_blocks(text)][1:]
    if not blocks:
        raise SystemExit(f"launch_paired printed no blocks:\n{text[-2000:]}")
    return statistics.median(blocks) / per_block


def order(rounds: int) -> list[tuple[str, ...]]:
    """Round r runs the three ways forward on even r, backward on odd r (ABBA)."""
    return [WAYS if r % 2 == 0 else tuple(reversed(WAYS)) for r in range(rounds)]


def costs(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    out = {}
    base = samples["armed"]
    for way in REPORTED:
        values = samples[way]
        row = {"per_launch_ns": statistics.median(values), "processes": len(values)}
        if way != "armed":
            lo, hi = diff_interval(values, base)
            row.update(added_ns=statistics.median(values) - statistics.median(base), low=lo, high=hi)
        out[way] = row
    return out


def extract_tiny(build: Path, work: Path, output: Path | None = None) -> tuple[Path, Path]:
    """(the reproducer of kc_paired_tiny's dispatch 0, its captured cubin: the variant)."""
    from kerncap.capture.extract import extract
    from kerncap.reproducer.format import Capture

    res = extract(KERNEL, [str(build / "launch_paired"), "kernel", "1", "2", "64"], output=output or work / "tiny",
                  match="exact", timeout=120)
    cap = Capture.open(res.reproducer_dir)
    return res.reproducer_dir, cap.root / cap.kernel["module"]["cubin"]


def split_runs(text: str) -> list[str]:
    """One app run's stdout per element: each run of launch_paired starts with `switch=`."""
    return ["switch=" + part for part in text.split("switch=")[1:]]


def run_ways(session, request, per_block: int) -> dict[str, float]:
    """One request through Session.apply (as `kerncap apply` runs it): it runs the app once
    with the variant applied (with --dispatch past the end: none selected, the armed path);
    --check then runs it twice more, as is and with the variant, both fingerprinted."""
    import dataclasses

    out: list[str] = []
    sink = lambda stream, data: out.append(data.decode(errors="replace")) if stream == "stdout" else None  # noqa: E731
    result = session.apply(request, output=sink)
    runs = [per_launch(text, per_block) for text in split_runs("".join(out))]
    if request.check:
        return {"substituted": runs[0], "armed+check": runs[1], "checked": runs[2]}
    way = "armed" if request.dispatch else "substituted"
    if way == "substituted" and result.substituted != result.launches:
        raise SystemExit(f"{result.substituted} of {result.launches} launches substituted")
    return {way: runs[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, help="testapps build directory (default: a temporary one, built now)")
    ap.add_argument("--rounds", type=int, default=8, help="processes per way")
    ap.add_argument("--blocks", type=int, default=16)
    ap.add_argument("--per-block", type=int, default=8192)
    ap.add_argument("--json", help="write every measurement here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kc-apply-cost-") as tmp:
        work = Path(tmp)
        build = args.build or build_testapps(work / "testapps")
        command = [str(build / "launch_paired"), "kernel", "1", str(args.blocks), str(args.per_block)]
        repro, variant = extract_tiny(build, work)
        from kerncap import api

        base = dict(command=tuple(command), cubin=str(variant), runs=0)
        requests = {"armed": api.options.ApplyRequest(**base, dispatch=(10_000_000,)),  # past the last launch
                    "substituted": api.options.ApplyRequest(**base),
                    "checked": api.options.ApplyRequest(**base, check=True)}
        samples: dict[str, list[float]] = {w: [] for w in REPORTED}
        with api.open(repro, compile_worker=False) as session:
            for ways in order(args.rounds):
                for way in ways:
                    for name, ns in run_ways(session, requests[way], args.per_block).items():
                        samples[name].append(ns)
    result = costs(samples)
    print(f"kerncap apply, kc_paired_tiny from 1 thread, {args.rounds} processes per way, "
          f"{args.blocks} x {args.per_block} launches each (CPU ns per launch, medians):")
    print(f"  armed (identified, not redirected): {result['armed']['per_launch_ns']:.1f} ns")
    for way in REPORTED[1:]:
        r = result[way]
        print(f"  {way}: {r['per_launch_ns']:.1f} ns, +{r['added_ns']:.1f} ns [{r['low']:.1f} to {r['high']:.1f}] "
              f"over armed (90 % bootstrap)")
    sub = result["substituted"]
    print(f"goal (substituted <= armed + 100 ns): {'met' if sub['high'] <= 100 else 'NOT met'}")
    write_json(args.json, {"samples": samples, "costs": result, "blocks": args.blocks, "per_block": args.per_block})
    return 0


if __name__ == "__main__":
    sys.exit(main())
