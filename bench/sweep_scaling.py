"""`kerncap sweep` on one GPU and on two: the same ≥ 32 Triton configs of one reproducer,
identical verdicts expected, throughput ratio printed (goal ≥ 1.8x).

    python3 bench/sweep_scaling.py [--reproducer DIR] [--configs 36] [--iterations 10000]
                                   [--gpus 0,1] [--backend dask|processes] [--json F]

Without --reproducer it extracts the autotuned add kernel of testapps/python/
triton_autotune.py (dispatch 1, after tuning). Configs: the autotuner's three
BLOCK_SIZEs x num_warps {1, 2, 4, 8} x num_stages {1, 2, 3}, the first --configs of
them. Each GPU count gets its own fan-out (a local Dask cluster when installed); a
warm-up sweep there first compiles every config (Triton's cache) and opens the
reproducer on every GPU worker (the resident replay servers), so the timed sweeps
compare steady-state throughput: compiles hit the cache, and --iterations sets the GPU
work per config (each launch also restores the 16 MiB the kernel writes).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path

from common import PYAPPS, print_table, verdict, write_json

from kerncap import api


def extract_add(workdir: Path) -> Path:
    env = {"KC_TESTAPP_REPORT": str(workdir / "report.json"), "KC_TESTAPP_DONE": str(workdir / "done")}
    res = api.extract("kc_autotune_add", [sys.executable, str(PYAPPS / "triton_autotune.py")],
                      output=workdir / "add", dispatch=1, keep_running=True, env=env, timeout=300,
                      output_sink=lambda *_: None)
    return res.reproducer_dir


def sweep_configs(reproducer: Path, n: int) -> list[str]:
    options = {"num_warps", "num_stages", "num_ctas", "maxnreg"}
    blocks = sorted({",".join(kv for kv in c.config.split(",") if kv.split("=")[0] not in options)
                     for c in api.autotune_configs(reproducer).candidates})
    combos = [f"{b},num_warps={w},num_stages={s}" for b, w, s in itertools.product(blocks, (1, 2, 4, 8), (1, 2, 3))]
    if len(combos) < n:
        sys.exit(f"only {len(combos)} configs can be made from {blocks}")
    return combos[:n]


def run(reproducer: Path, gpus: list[str], configs: list[str], iterations: int, backend: str) -> dict:
    options = api.MeasureRequest(iterations=iterations, warmup=10)
    with api.open_fanout(backend=backend, gpus=gpus, compiles=True) as fan:
        t0 = time.perf_counter()
        warm = api.sweep(reproducer, fan, configs=configs, options=api.MeasureRequest(iterations=1, warmup=0))
        warm_s = time.perf_counter() - t0
        report = api.sweep(reproducer, fan, configs=configs, options=options)
    verdicts = {e.label: e.status for e in report.entries}
    return {"gpus": gpus, "fanout": report.fanout, "warmup_s": warm_s, "seconds": report.seconds,
            "throughput_per_s": report.throughput, "verdicts": verdicts, "per_worker": report.per_worker,
            "warm_errors": [e.message for e in warm.entries if e.status == "error"][:3],
            "best": report.best.label if report.best else None, "table": api.format_sweep(report)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reproducer", type=Path)
    ap.add_argument("--configs", type=int, default=36)
    ap.add_argument("--iterations", type=int, default=10000)
    ap.add_argument("--gpus", default=None, help="two GPUs, e.g. 0,1 (default: the first two nvidia-smi lists)")
    ap.add_argument("--backend", default="auto", choices=("auto", "dask", "processes"))
    ap.add_argument("--json")
    ap.add_argument("--show", action="store_true", help="print each run's sweep table")
    args = ap.parse_args()

    gpus = args.gpus.split(",") if args.gpus else (os.environ.get("CUDA_VISIBLE_DEVICES") or "").split(",")
    gpus = [g for g in gpus if g] or [str(i) for i in range(2)]
    if len(gpus) < 2:
        sys.exit("this bench needs two GPUs (--gpus 0,1)")
    with tempfile.TemporaryDirectory(prefix="kc-sweep-bench-") as tmp:
        reproducer = args.reproducer or extract_add(Path(tmp))
        configs = sweep_configs(reproducer, args.configs)
        print(f"{len(configs)} configs of {reproducer}, {args.iterations} timed launches each")
        one = run(reproducer, gpus[:1], configs, args.iterations, args.backend)
        two = run(reproducer, gpus[:2], configs, args.iterations, args.backend)
    ratio = two["throughput_per_s"] / one["throughput_per_s"] if one["throughput_per_s"] else 0.0
    same = one["verdicts"] == two["verdicts"]
    passed = sum(1 for v in one["verdicts"].values() if v == "pass")
    for r in (one, two):
        if args.show:
            print(r["table"])
        if r["warm_errors"]:
            print(f"warm-up errors on {r['gpus']}: {r['warm_errors']}")
    rows = [[str(len(r["gpus"])), f"{r['seconds']:.2f}", f"{r['throughput_per_s']:.2f}", f"{r['warmup_s']:.1f}",
             ", ".join(f"{w}: {int(v['entries'])} in {v['gpu_seconds']:.1f} s" for w, v in sorted(r["per_worker"].items()))]
            for r in (one, two)]
    print_table(["GPUs", "sweep s", "entries/s", "warm-up s", "per worker (entries, GPU busy)"], rows)
    print(f"verdicts identical on 1 and 2 GPUs: {same} ({passed} of {len(one['verdicts'])} pass; best {one['best']})")
    print(f"throughput ratio 2 GPUs / 1 GPU: {ratio:.2f}x (goal >= 1.8x: {verdict(ratio >= 1.8)})")
    write_json(args.json, {"configs": configs, "iterations": args.iterations, "one": {k: v for k, v in one.items()
                                                                                    if k != "table"},
                           "two": {k: v for k, v in two.items() if k != "table"}, "ratio": ratio,
                           "verdicts_identical": same})
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
