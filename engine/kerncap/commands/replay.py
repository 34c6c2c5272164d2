"""`kerncap replay DIR|SET [--cubin F] [--iterations N] [--warmup W] [--flush-l2] [--device D] [--json]`
`kerncap replay DIR --compare A [B ...] [--rounds R] [--min-time S] [--max-time S] [--confidence C] ...`"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kerncap import api
from kerncap.commands import inspect_tools
from kerncap.commands.arguments import confidence, non_negative_float, non_negative_int, positive_int
from kerncap.errors import EXIT_CANNOT_RUN, EXIT_OK, KerncapError, UsageError


def check_cubin(cubin: Path | None) -> None:
    if cubin is not None and not cubin.is_file():
        raise KerncapError(f"variant cubin {cubin} does not exist", "build it with `kerncap recompile DIR`")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="replay and time the captured kernel (or a variant) on the GPU",
        description="Restore the capture at its original addresses, launch the kernel (the captured cubin or "
                    "--cubin VARIANT) and time it with CUDA events: warm-up, then per-iteration times; before "
                    "each launch the memory the kernel writes is restored on the GPU. With --compare, time "
                    "variants interleaved with the captured cubin and report each speedup with a confidence "
                    "interval.",
    )
    p.add_argument("path", type=Path, metavar="DIR",
                   help="reproducer directory (or its capture/ directory), or a reproducer set (every member)")
    p.add_argument("--cubin", type=Path, metavar="F",
                   help="variant cubin to run instead of the captured one (a set: a cubin or variants/<n>.json)")
    p.add_argument("--iterations", "-n", type=positive_int, metavar="N",
                   help="timed launches (20; with --compare: per program and round, 10)")
    p.add_argument("--warmup", "-w", type=non_negative_int, metavar="W",
                   help="untimed launches first (3; with --compare: per program and round, 2)")
    p.add_argument("--flush-l2", action="store_true",
                   help="cold L2: evict it before every launch (outside the timing)")
    c = p.add_argument_group("comparing variants (docs/replay.md)")
    c.add_argument("--compare", nargs="+", metavar="CUBIN",
                   help="time these variants interleaved with the captured cubin; report each speedup with a "
                        "bootstrap confidence interval, or 'within noise' when it contains 1.0. With --ncu: "
                        "exactly two, A B (a cubin, or `captured`), their metrics side by side with B's change")
    c.add_argument("--rounds", type=positive_int, default=30, metavar="R",
                   help=f"interleaved rounds (30, at least {api.MIN_ROUNDS})")
    c.add_argument("--min-time", type=non_negative_float, default=0.0, metavar="S",
                   help="add rounds until every program has S seconds of measured kernel time (0)")
    c.add_argument("--max-time", type=non_negative_float, default=300.0, metavar="S",
                   help="stop adding rounds after S seconds of wall time (300)")
    c.add_argument("--confidence", type=confidence, default=None, metavar="C",
                   help=f"confidence of the intervals ({api.DEFAULT_CONFIDENCE:g})")
    p.add_argument("--device", type=non_negative_int, default=0,
                   help="GPU ordinal (0): any GPU of the capture's architecture; the result says which ran")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    inspect_tools.add_ncu_arguments(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if api.is_set(args.path):
        return handle_set(args)
    if args.ncu:
        return inspect_tools.handle_ncu(args)
    inspect_tools.check_tool_flags(args, "--ncu")
    if args.compare:
        return handle_compare(args)
    check_cubin(args.cubin)
    result = api.replay(args.path, cubin=args.cubin, iterations=20 if args.iterations is None else args.iterations,
                        warmup=3 if args.warmup is None else args.warmup, flush_l2=args.flush_l2, device=args.device)
    print(json.dumps(result.to_dict(), indent=1) if args.json else api.format_replay(result))
    return 0


def handle_compare(args: argparse.Namespace) -> int:
    if args.cubin is not None:
        raise UsageError("--cubin and --compare do not go together",
                         "list every variant after --compare (the captured cubin is always included)")
    cubins = [Path(c) for c in args.compare if c not in inspect_tools.BASELINE_NAMES]  # always the baseline
    for cubin in cubins:
        check_cubin(cubin)
    result = api.compare_variants(args.path, cubins, rounds=args.rounds,
                                  iterations=10 if args.iterations is None else args.iterations,
                                  warmup=2 if args.warmup is None else args.warmup, flush_l2=args.flush_l2,
                                  min_seconds=args.min_time, max_seconds=args.max_time, confidence=args.confidence,
                                  device=args.device)
    print(json.dumps(result.to_dict(), indent=1) if args.json else api.format_comparison(result))
    return 0


def handle_set(args: argparse.Namespace) -> int:
    """replay of a reproducer set: every member (and the variant), then the workload's view."""
    if args.ncu or args.compare:
        raise UsageError(f"{'--ncu' if args.ncu else '--compare'} works on one reproducer; {args.path} is a set",
                         f"pass one member, e.g. {args.path / 'members' / '0'}")
    check_cubin(args.cubin)
    run = api.replay_set(args.path, cubin=args.cubin, iterations=20 if args.iterations is None else args.iterations,
                         warmup=3 if args.warmup is None else args.warmup, flush_l2=args.flush_l2,
                         device=args.device)
    print(json.dumps(run.to_dict(), indent=1) if args.json else api.format_set_run(run))
    return EXIT_OK if run.passed else EXIT_CANNOT_RUN  # a member that could not run
