"""`kerncap replay DIR [--cubin F] [--iterations N] [--warmup W] [--flush-l2] [--json]`"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kerncap.errors import KerncapError


def positive_int(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {v})")
    return v


def non_negative_int(text: str) -> int:
    v = int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (got {v})")
    return v


def check_cubin(cubin: Path | None) -> None:
    if cubin is not None and not cubin.is_file():
        raise KerncapError(f"variant cubin {cubin} does not exist", "build it with `kerncap recompile DIR`")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="replay and time the captured kernel (or a variant) on the GPU",
        description="Restore the capture at its original addresses, launch the kernel (the captured cubin or "
                    "--cubin VARIANT) and time it with CUDA events: warm-up, then per-iteration times; before "
                    "each launch the memory the kernel writes is restored on the GPU.",
    )
    p.add_argument("path", type=Path, metavar="DIR", help="reproducer directory (or its capture/ directory), or a set")
    p.add_argument("--cubin", type=Path, metavar="F",
                   help="variant cubin to run instead of the captured one (a set: a cubin or variants/<n>.json)")
    p.add_argument("--iterations", "-n", type=positive_int, default=20, metavar="N", help="timed launches (20)")
    p.add_argument("--warmup", "-w", type=non_negative_int, default=3, metavar="W", help="untimed launches first (3)")
    p.add_argument("--flush-l2", action="store_true", help="evict L2 before every launch (outside the timing)")
    p.add_argument("--device", type=non_negative_int, default=0,
                   help="GPU ordinal (0); any GPU of the capture's architecture")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from kerncap.replay.client import ReplayClient
    from kerncap.replay.results import format_replay
    from kerncap.sets import is_set

    if is_set(args.path):
        return handle_set(args, validate=False)
    check_cubin(args.cubin)
    with ReplayClient(args.path, device=args.device) as rc:
        result = rc.replay(cubin=args.cubin, iterations=args.iterations, warmup=args.warmup, flush_l2=args.flush_l2)
    print(json.dumps(result.to_dict(), indent=1) if args.json else format_replay(result))
    return 0


def handle_set(args: argparse.Namespace, *, validate: bool) -> int:
    """replay / validate of a reproducer set: every member, then the workload's view."""
    from kerncap.set_report import format_set_run
    from kerncap.sets import ReproducerSet, run_set

    s = ReproducerSet.open(args.path)
    run = run_set(s, variant=args.cubin, replay=not validate or args.cubin is not None, validate=validate,
                  iterations=getattr(args, "iterations", 20), warmup=getattr(args, "warmup", 3),
                  flush_l2=getattr(args, "flush_l2", False), device=args.device,
                  atol=getattr(args, "atol", None), rtol=getattr(args, "rtol", None), dtype=getattr(args, "dtype", None))
    print(json.dumps(run.to_dict(), indent=1) if args.json else format_set_run(run))
    return 0 if run.passed else 1
