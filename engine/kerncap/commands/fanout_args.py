"""Options `kerncap check` and `kerncap sweep` share: where their jobs run (the fan-out)
and how each variant is validated and timed."""

from __future__ import annotations

import argparse

from kerncap import api
from kerncap.commands.arguments import positive_int

O = api.options


def gpu_list(text: str) -> list[str]:
    gpus = [g.strip() for g in text.split(",") if g.strip()]
    if not gpus:
        raise argparse.ArgumentTypeError(f"expected GPUs like 0,1 (got {text!r})")
    return gpus


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
    O.add_options(m, (O.FLEET_ITERATIONS, O.FLEET_WARMUP, O.FLUSH_L2, O.ATOL, O.RTOL))
    m.add_argument("--dtype", type=O.dtype_name, metavar="T", help="element type of regions of unknown type")
    m.add_argument("--region-dtype", type=O.region_dtype, action="append", default=[], metavar="ID=T",
                   help="element type of one region (repeatable)")
    O.add_options(m, (O.FLEET_PERTURB, O.SEED, O.RUNS, O.REPLAY_TIMEOUT))


def options(args: argparse.Namespace) -> api.MeasureOptions:
    """How each variant is validated and timed; the tolerance rules are the session's own
    (api.ValidateRequest.checked: per-region dtypes alone compare element-wise)."""
    if args.perturb:
        O.check_perturb_count(args.perturb)
    checked = api.ValidateRequest(atol=args.atol, rtol=args.rtol, dtype=args.dtype,
                                  region_dtypes=dict(args.region_dtype)).checked()
    per_region, dtype = checked.region_dtypes, checked.dtype
    return api.MeasureOptions(iterations=args.iterations, warmup=args.warmup, flush_l2=args.flush_l2, atol=args.atol,
                              rtol=args.rtol, dtype=dtype, dtypes=per_region, perturb=args.perturb, seed=args.seed,
                              runs=args.runs, replay_timeout=args.replay_timeout)


def fanout(args: argparse.Namespace, *, compiles: bool = False) -> api.Fanout:
    return api.open_fanout(backend=args.backend, gpus=args.gpus, scheduler=args.scheduler,
                           compile_workers=args.compile_workers, compiles=compiles,
                           connect_timeout=args.connect_timeout)
