"""Options `kerncap check` and `kerncap sweep` share: where their jobs run (the fan-out)
and how each variant is validated and timed."""

from __future__ import annotations

import argparse

from kerncap import api
from kerncap.commands.arguments import positive_int
from kerncap.frontends import render


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
    render.add_request(m, api.MeasureRequest, ("iterations", "warmup", "flush_l2", "warm_l2", "atol", "rtol", "dtype",
                                               "region_dtypes", "perturb", "seed", "runs", "replay_timeout"))


def options(args: argparse.Namespace) -> api.MeasureRequest:
    """How each variant is validated and timed; the tolerance rules are the session's own
    (api.ValidateRequest.checked: per-region dtypes alone compare element-wise)."""
    return render.from_args(api.MeasureRequest, args).checked()


def fanout(args: argparse.Namespace, *, compiles: bool = False) -> api.Fanout:
    return api.open_fanout(backend=args.backend, gpus=args.gpus, scheduler=args.scheduler,
                           compile_workers=args.compile_workers, compiles=compiles,
                           connect_timeout=args.connect_timeout)
