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
    p.add_argument("path", type=Path, metavar="DIR", help="reproducer directory (or its capture/ directory)")
    p.add_argument("--cubin", type=Path, metavar="F", help="variant cubin to run instead of the captured one")
    p.add_argument("--iterations", "-n", type=positive_int, default=20, metavar="N", help="timed launches (20)")
    p.add_argument("--warmup", "-w", type=non_negative_int, default=3, metavar="W", help="untimed launches first (3)")
    p.add_argument("--flush-l2", action="store_true", help="evict L2 before every launch (outside the timing)")
    p.add_argument("--device", type=non_negative_int, default=0, help="GPU ordinal (0)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    from kerncap.commands.inspect_tools import add_ncu_arguments

    add_ncu_arguments(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from kerncap.replay.client import ReplayClient
    from kerncap.replay.results import format_replay

    check_cubin(args.cubin)
    from kerncap.commands.inspect_tools import check_tool_flags, handle_ncu

    if args.ncu or args.compare:
        return handle_ncu(args)
    check_tool_flags(args, "--ncu")
    with ReplayClient(args.path, device=args.device) as rc:
        result = rc.replay(cubin=args.cubin, iterations=args.iterations, warmup=args.warmup, flush_l2=args.flush_l2)
    print(json.dumps(result.to_dict(), indent=1) if args.json else format_replay(result))
    return 0
