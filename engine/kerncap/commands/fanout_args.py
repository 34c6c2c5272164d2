"""Options `kerncap check` and `kerncap sweep` share: where their jobs run (the fan-out)
and how each variant is validated and timed."""

from __future__ import annotations

import argparse

from kerncap import api
from kerncap.commands.arguments import non_negative_float, non_negative_int, positive_int
from kerncap.commands.validate import dtype_name, region_dtype


def gpu_list(text: str) -> list[str]:
    gpus = [g.strip() for g in text.split(",") if g.strip()]
    if not gpus:
        raise argparse.ArgumentTypeError(f"expected GPUs like 0,1 (got {text!r})")
    return gpus


def perturb_count(text: str) -> int:
    v = int(text)
    if not 1 <= v <= api.MAX_PERTURBATIONS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {api.MAX_PERTURBATIONS} (got {v})")
    return v


def add(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fan-out (docs/cluster.md)")
    g.add_argument("--gpus", type=gpu_list, metavar="0,1",
                   help="GPUs to use, one worker each (CUDA_VISIBLE_DEVICES entries; default: every GPU nvidia-smi lists)")
    g.add_argument("--scheduler", metavar="ADDRESS",
                   help="an existing Dask scheduler (tcp://host:8786) whose GPU workers declare GPU=1; default: start "
                        "a local cluster")
    g.add_argument("--connect-timeout", type=float, default=10.0, metavar="S",
                   help="seconds to reach the --scheduler before giving up (10)")
    g.add_argument("--backend", choices=("auto", "dask", "processes", "serial"), default="auto",
                   help="auto: Dask when installed and there is something to spread, else a process per GPU")
    g.add_argument("--compile-workers", type=positive_int, metavar="N", help="CPU workers for compiles")
    g.add_argument("--ship", action=argparse.BooleanOptionalAction, default=None,
                   help="send the reproducers' files with the jobs (default with --scheduler) instead of relying on "
                        "the same path on every worker")
    m = p.add_argument_group("validation and timing")
    m.add_argument("--iterations", "-n", type=positive_int, default=50, metavar="N", help="timed launches (50)")
    m.add_argument("--warmup", "-w", type=non_negative_int, default=5, metavar="W", help="untimed launches first (5)")
    m.add_argument("--flush-l2", action="store_true", help="evict L2 before every launch")
    m.add_argument("--atol", type=non_negative_float, metavar="A", help="absolute tolerance (default byte-exact)")
    m.add_argument("--rtol", type=non_negative_float, metavar="R", help="relative tolerance")
    m.add_argument("--dtype", type=dtype_name, metavar="T", help="element type of regions of unknown type")
    m.add_argument("--region-dtype", type=region_dtype, action="append", default=[], metavar="ID=T",
                   help="element type of one region (repeatable)")
    m.add_argument("--perturb", type=perturb_count, default=0, metavar="K",
                   help="also validate each variant on K perturbed inputs against the captured kernel (docs/replay.md)")
    m.add_argument("--seed", type=non_negative_int, default=0, metavar="S", help="seed of the perturbations (0)")
    m.add_argument("--runs", type=positive_int, default=1, metavar="N",
                   help="replays of the captured kernel that detect nondeterminism first (1: no check)")
    m.add_argument("--replay-timeout", type=float, default=600.0, metavar="S",
                   help="seconds one validation or timing may take before its replay server is killed (600)")


def options(args: argparse.Namespace) -> api.MeasureOptions:
    per_region = dict(args.region_dtype)
    dtype = args.dtype
    if per_region and dtype is None and args.atol is None and args.rtol is None:
        dtype = "float32"
    return api.MeasureOptions(iterations=args.iterations, warmup=args.warmup, flush_l2=args.flush_l2, atol=args.atol,
                              rtol=args.rtol, dtype=dtype, dtypes=per_region, perturb=args.perturb, seed=args.seed,
                              runs=args.runs, replay_timeout=args.replay_timeout)


def fanout(args: argparse.Namespace, *, compiles: bool = False) -> api.Fanout:
    return api.open_fanout(backend=args.backend, gpus=args.gpus, scheduler=args.scheduler,
                           compile_workers=args.compile_workers, compiles=compiles,
                           connect_timeout=args.connect_timeout)
