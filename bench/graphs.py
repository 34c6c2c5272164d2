"""CUDA graphs (issue 12): what capturing a graph-launched kernel costs.

1. extraction time of the Triton kernel of testapps/python/torch_graph_mlp.py at a
   dispatch that runs inside a torch.cuda.graph replay, against the same kernel at the
   same dispatch of the same app run eagerly (--eager); interleaved, median of --repeat.
   Goal: graph <= 1.5x eager.
2. interception on a graph-replay-heavy loop: testapps graph_explicit `loop N` (N launches
   of a 4-kernel graph, N >= 10k), plain against armed for a kernel inside the graph
   (every launch goes through kerncap's graph counting, through interposed entry points,
   the default). Goal: <= 1.05x on the app's own loop time (the process wall also holds
   kerncap's one-off start-up, reported too). Also shown: CUPTI's floor (a bare
   subscriber, + graph-launch callbacks) and armed through CUPTI callbacks
   (KERNCAP_INTERCEPT=cupti).

  python3 bench/graphs.py [--repeat 3] [--launches 200000] [--build-dir D] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import PYAPPS, build_testapps, median, print_table, ratio_interval, timed, verdict, write_json

MLP = PYAPPS / "torch_graph_mlp.py"
DISPATCH = 4  # warm-up is dispatches 0 and 1; dispatch 4 is graph replay 2 (or eager step 2)


def extract_seconds(mode: str, workdir: Path) -> float:
    from kerncap.capture.extract import extract

    command = [sys.executable, str(MLP)] + (["--eager"] if mode == "eager" else [])
    out = workdir / f"repro-{mode}"
    wall, result = timed(lambda: extract("kc_bias_gelu", command, output=out, dispatch=DISPATCH, force=True,
                                         output_sink=lambda *_: None))
    graph = result.capture.launch.get("graph")
    if (mode == "graph") != bool(graph):
        sys.exit(f"{mode}: the capture's launch.graph is {graph!r}")
    return wall


def loop_run(mode: str, command: list[str], workdir: Path, floor: Path | None = None) -> tuple[float, float]:
    from kerncap.errors import KerncapError
    from kerncap.capture.extract import extract

    report = workdir / "report.json"
    report.unlink(missing_ok=True)
    env = {**os.environ, "KC_TESTAPP_REPORT": str(report)}
    if mode not in ("armed", "cupti"):
        if mode != "plain":  # CUPTI alone: a bare subscriber ("subscribe") or + cuGraphLaunch callbacks ("graph")
            env.update(CUDA_INJECTION64_PATH=str(floor), KC_FLOOR=mode)
        wall, proc = timed(lambda: subprocess.run(command, env=env, stdout=subprocess.DEVNULL))
        if proc.returncode != 0:
            sys.exit(f"graph_explicit loop ({mode}) exited with status {proc.returncode}")
    else:  # armed through the default entry points, or through CUPTI callbacks
        env["KERNCAP_INTERCEPT"] = "entry" if mode == "armed" else "cupti"

        def armed():
            try:  # a dispatch past the end: armed for the whole run, never captured
                extract("tiny", command, output=workdir / "never", dispatch=10**12, keep_running=True, env=env,
                        output_sink=lambda *_: None)
            except KerncapError as exc:
                if "ran only" not in exc.message:
                    raise
            else:
                sys.exit("tiny was captured?")

        wall, _ = timed(armed)
    if not report.exists():
        sys.exit(f"{mode}: the app wrote no report; did it finish?")
    return wall, json.loads(report.read_text())["loop_ns"] / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--launches", type=int, default=200_000)
    parser.add_argument("--build-dir", type=Path, default=Path(tempfile.gettempdir()) / "kerncap-testapps")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--skip-extract", action="store_true")
    args = parser.parse_args()
    build_dir = build_testapps(args.build_dir)
    out: dict = {"bench": "graphs", "repeat": args.repeat, "launches": args.launches}
    rows = []
    with tempfile.TemporaryDirectory(prefix="kerncap-bench-graphs-") as tmp:
        work = Path(tmp)
        if not args.skip_extract:
            times: dict[str, list[float]] = {"eager": [], "graph": []}
            for _ in range(args.repeat):  # interleaved: the machine's speed drifts between runs
                for mode in ("eager", "graph"):
                    times[mode].append(extract_seconds(mode, work))
            ratio = median(times["graph"]) / median(times["eager"])
            out["extract"] = {"seconds": times, "ratio": ratio, "goal": 1.5}
            rows.append(["extract kc_bias_gelu", f"{median(times['eager']):.2f} s eager",
                         f"{median(times['graph']):.2f} s graph", f"{ratio:.3f}", "<= 1.50", verdict(ratio <= 1.5)])
        from cupti_floor import build_floor  # bench/cupti_floor.py: CUPTI's own cost, the floor under "armed"

        floor = build_floor(work)
        command = [str(build_dir / "graph_explicit"), "loop", str(args.launches)]
        modes = ("plain", "subscribe", "graph", "armed", "cupti")
        runs: dict[str, dict[str, list[float]]] = {m: {"wall": [], "loop": []} for m in modes}
        for _ in range(max(args.repeat, 5)):
            for mode in modes:
                wall, loop = loop_run(mode, command, work, floor)
                runs[mode]["wall"].append(wall)
                runs[mode]["loop"].append(loop)
        loop_ratio = median(runs["armed"]["loop"]) / median(runs["plain"]["loop"])
        wall_ratio = median(runs["armed"]["wall"]) / median(runs["plain"]["wall"])
        spread = max(runs["plain"]["loop"]) / min(runs["plain"]["loop"]) - 1
        lo, hi = ratio_interval(runs["armed"]["loop"], runs["plain"]["loop"])
        out["graph_loop"] = {"runs": runs, "loop_ratio": loop_ratio, "loop_interval": [lo, hi], "wall_ratio": wall_ratio,
                             "goal": 1.05, "plain_loop_spread": spread}
        rows.append([f"graph loop ({args.launches} launches)", f"{median(runs['plain']['loop']):.3f} s plain",
                     f"{median(runs['armed']['loop']):.3f} s armed", f"{loop_ratio:.3f} [{lo:.3f}-{hi:.3f}]", "<= 1.05",
                     verdict(hi <= 1.05)])
        rows.append(["  same, process wall", f"{median(runs['plain']['wall']):.3f} s",
                     f"{median(runs['armed']['wall']):.3f} s", f"{wall_ratio:.3f}", "", ""])
        for mode, what in (("subscribe", "CUPTI floor: bare subscriber"), ("graph", "CUPTI floor: + graph launch cb"),
                           ("cupti", "armed, CUPTI callbacks")):
            ratio = median(runs[mode]["loop"]) / median(runs["plain"]["loop"])
            lo, hi = ratio_interval(runs[mode]["loop"], runs["plain"]["loop"])
            out["graph_loop"][f"{mode}_loop_ratio"] = ratio
            rows.append([f"  {what}", "", f"{median(runs[mode]['loop']):.3f} s", f"{ratio:.3f} [{lo:.3f}-{hi:.3f}]",
                         "", ""])
    print(f"CUDA graphs, medians of interleaved runs (plain loop spread {100 * spread:.1f}%; "
          "[90 % bootstrap interval of the ratio]; met only when the interval is under the goal)")
    print_table(["what", "baseline", "measured", "ratio", "goal", ""], rows)
    write_json(args.json, out)


if __name__ == "__main__":
    main()
