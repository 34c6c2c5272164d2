"""Sequences (issue 29): how faithful a replayed layer's time is, and what a long sequence
costs to extract.

1. fidelity: testapps/python/seq_layer.py (a decoder layer: Triton RMSNorm, GEMMs, SDPA,
   elementwise) profiled with --by-nvtx over --steps steps: the GPU time of layer.1's
   kernels in the app (activity records, per step, median over the steps); then step 1's
   layer.1 extracted as a sequence and replayed: each launch timed between events on its
   stream (the sum of the launches' medians) and the whole sequence (streams order, and as
   one CUDA graph: no launch gaps); and the same replay profiled as the app was (`kerncap
   profile -- kerncap replay`: CUPTI's activity records, the app's instrument), its
   kernels' GPU time per replayed run. Goal: the replayed layer within 5 % of the app's,
   by the same instrument (the profiled replay; the event-timed rows are shown beside it).
2. scale: the same app with --layers 66 (about 1,000 launches a step): `extract --sequence
   nvtx --nvtx step.1` (the whole step) against `extract kc_seq_rmsnorm` at a dispatch of
   that step (one of its dispatches), wall time of each whole extract, interleaved, median
   of --repeat. Goal: the sequence <= 2x the one dispatch.

  python3 bench/sequences.py [--repeat 2] [--steps 20] [--scale-layers 66] [--only fidelity,scale] [--json F]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from common import PYAPPS, median, print_table, timed, verdict, write_json

LAYER = PYAPPS / "seq_layer.py"


def fidelity(work: Path, steps: int) -> dict:
    from kerncap import api

    cmd = [sys.executable, str(LAYER), "--mode", "eager", "--steps", str(steps), "--layers", "2"]
    prof = api.profile(cmd, by_nvtx=True, output=lambda *_: None)
    per_step: dict[str, float] = {}
    for row in prof.nvtx_ranges:
        path = row["path"]
        if path.endswith("/layer.1") and path.startswith("step."):
            per_step[path] = per_step.get(path, 0.0) + row["total_ns"] / 1e6
    if not per_step:
        raise SystemExit(f"the profile holds no step.*/layer.1 rows: {[r['path'] for r in prof.nvtx_ranges][:10]}")
    in_app = statistics.median(per_step.values())
    res = api.extract("", cmd, output=work / "layer", sequence=api.SequenceRequest("nvtx"),
                      selection=api.Selection(nvtx="step.1/layer.1"), force=True, output_sink=lambda *_: None)
    launches = len(res.capture.sequence.launches)
    with api.open(res.reproducer_dir, compile_worker=False) as s:
        r = s.replay(api.ReplayRequest(iterations=50, warmup=5, per_launch=True))
    replay_sum = sum(l["median_ms"] for l in r.launches)
    with api.open(res.reproducer_dir, order="graph", compile_worker=False) as s:
        g = s.replay(api.ReplayRequest(iterations=50, warmup=5))
    profiled, runs = replay_profiled(res.reproducer_dir, res.capture.sequence)
    ratio = profiled / in_app
    print(api.format_sequence_launches(r.launches))
    rows = [["in the app (profile, median of %d steps)" % len(per_step), f"{in_app:.4f}", "1.000"],
            ["replayed, profiled the same way (%g runs)" % runs, f"{profiled:.4f}", f"{ratio:.3f}"],
            ["replayed, sum of the launches (events)", f"{replay_sum:.4f}", f"{replay_sum / in_app:.3f}"],
            ["replayed whole, streams order", f"{r.median_ms:.4f}", f"{r.median_ms / in_app:.3f}"],
            ["replayed whole, one CUDA graph", f"{g.median_ms:.4f}", f"{g.median_ms / in_app:.3f}"]]
    print(f"\nfidelity: layer.1 of seq_layer.py, {launches} launches (ms of GPU time)")
    print_table(["", "ms", "x app"], rows)
    ok = abs(ratio - 1.0) <= 0.05
    print(f"goal: the replayed layer within 5 % of the app's, same instrument: {ratio:.3f} {verdict(ok)}")
    return {"launches": launches, "in_app_ms": in_app, "replay_profiled_ms": profiled, "replay_profiled_runs": runs,
            "replay_sum_ms": replay_sum, "replay_whole_ms": r.median_ms, "replay_graph_ms": g.median_ms,
            "ratio": ratio, "events_ratio": replay_sum / in_app, "steps": per_step, "ok": ok}


def replay_profiled(reproducer: Path, seq) -> tuple[float, float]:
    """The sequence's kernels' GPU time per replayed run, from a profile of `kerncap
    replay` (CUPTI activity, as the app's profile): the total of the sequence's kernels
    over the number of runs their launch counts make (warm-up and timed runs alike)."""
    from kerncap import api

    cmd = [sys.executable, "-m", "kerncap", "replay", str(reproducer), "--iterations", "50", "--warmup", "5"]
    prof = api.profile(cmd, output=lambda *_: None)
    names = {seq.kernel_of(i).name for i in range(len(seq.launches))}
    ours = [k for k in prof.kernels if k.name in names]
    calls = sum(k.calls for k in ours)
    runs = calls / len(seq.launches)
    if not ours or runs != int(runs):
        raise SystemExit(f"the replay's profile holds {calls} launches of the sequence's kernels, not a whole number of "
                         f"runs of its {len(seq.launches)}: {[(k.display_name, k.calls) for k in prof.kernels]}")
    return sum(k.total_ns for k in ours) / 1e6 / runs, runs


def scale(work: Path, repeat: int, layers: int) -> dict:
    from kerncap import api

    cmd = [sys.executable, str(LAYER), "--mode", "eager", "--steps", "2", "--layers", str(layers)]
    # Step 1's first rmsnorm: the warm-up and step 0 ran 2 * layers each before it.
    dispatch = 4 * layers
    seq_s, one_s, launches = [], [], 0
    for k in range(repeat):
        for kind in (("seq", "one") if k % 2 == 0 else ("one", "seq")):
            if kind == "seq":
                wall, res = timed(lambda: api.extract("", cmd, output=work / "seq", force=True,
                                                      sequence=api.SequenceRequest("nvtx"),
                                                      selection=api.Selection(nvtx="step.1"),
                                                      output_sink=lambda *_: None, timeout=900))
                launches = len(res.capture.sequence.launches)
                seq_s.append(wall)
            else:
                wall, _ = timed(lambda: api.extract("kc_seq_rmsnorm", cmd, output=work / "one", force=True,
                                                    dispatch=dispatch, output_sink=lambda *_: None, timeout=900))
                one_s.append(wall)
    ratio = median(seq_s) / median(one_s)
    print(f"\nscale: seq_layer.py --layers {layers}, step 1 = {launches} launches (wall s of each extract)")
    print_table(["extract", "median s", "runs"], [["the whole step, as a sequence", f"{median(seq_s):.2f}",
                                                   " ".join(f"{x:.2f}" for x in seq_s)],
                                                  ["one dispatch of it", f"{median(one_s):.2f}",
                                                   " ".join(f"{x:.2f}" for x in one_s)]])
    ok = ratio <= 2.0
    print(f"goal: the sequence <= 2x one dispatch: {ratio:.2f}x {verdict(ok)}")
    return {"launches": launches, "sequence_s": seq_s, "one_s": one_s, "ratio": ratio, "ok": ok}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--scale-layers", type=int, default=66)
    p.add_argument("--only", default="fidelity,scale")
    p.add_argument("--json")
    args = p.parse_args()
    out = {}
    with tempfile.TemporaryDirectory(prefix="kc-bench-seq-") as d:
        work = Path(d)
        if "fidelity" in args.only:
            out["fidelity"] = fidelity(work, args.steps)
        if "scale" in args.only:
            out["scale"] = scale(work, args.repeat, args.scale_layers)
    write_json(args.json, out)


if __name__ == "__main__":
    main()
