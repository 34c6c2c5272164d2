"""`kerncap replay DIR|SET [--cubin F] [--iterations N] [--warmup W] [--flush-l2 | --warm-l2] [--timeout S] [--device D] [--json]`
`kerncap replay DIR --compare A [B ...] [--rounds R] [--min-time S] [--max-time S] [--confidence C] ...`"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kerncap import api
from kerncap.commands import inspect_tools
from kerncap.commands.arguments import non_negative_int
from kerncap.errors import EXIT_FAILED, KerncapError, UsageError
from kerncap.frontends import render



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
    # One flag, two defaults: a replay's own, or per program and round of a comparison.
    O = api.options
    render.add_request(p, api.ReplayRequest, ("iterations", "warmup", "flush_l2", "warm_l2", "timer"),
                       defaults={"iterations": None, "warmup": None}, helps={
                           "iterations": f"{O.REPLAY_ITERATIONS.help} ({O.REPLAY_ITERATIONS.default}; with --compare: "
                                         f"per program and round, {O.COMPARE_ITERATIONS.default})",
                           "warmup": f"{O.REPLAY_WARMUP.help} ({O.REPLAY_WARMUP.default}; with --compare: per "
                                     f"program and round, {O.COMPARE_WARMUP.default})"})
    c = p.add_argument_group("comparing variants (docs/replay.md)")
    c.add_argument("--compare", nargs="+", metavar="CUBIN",
                   help="time these variants interleaved with the captured cubin; report each speedup with a "
                        "bootstrap confidence interval, or 'within noise' when it contains 1.0. With --ncu: "
                        "exactly two, A B (a cubin, or `captured`), their metrics side by side with B's change")
    render.add_request(c, api.CompareRequest,
                       ("rounds", "min_seconds", "max_seconds", "confidence", "inputs", "seed"))
    q = p.add_argument_group("sequences (docs/sequences.md)")
    render.add_request(q, api.SequenceReplay, defaults={"sequence_order": None})
    p.add_argument("--device", type=non_negative_int, default=0,
                   help="GPU ordinal (0): any GPU of the capture's architecture; the result says which ran")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    inspect_tools.add_ncu_arguments(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if args.ncu:
        return inspect_tools.handle_ncu(args)
    inspect_tools.check_tool_flags(args, "--ncu", allowed=("timeout",))  # --timeout: the replay server's
    if args.compare:
        return handle_compare(args)
    check_cubin(args.cubin)
    request = render.from_args(api.ReplayRequest, args, cubin=None if args.cubin is None else str(args.cubin),
                               iterations=_or(args.iterations, api.options.REPLAY_ITERATIONS),
                               warmup=_or(args.warmup, api.options.REPLAY_WARMUP))
    with _open(args) as session:  # a set's session times every member; a shape that cannot replay says so
        result = session.replay(request)
    print(json.dumps(result.to_dict(), indent=1) if args.json else result.text())
    return result.exit_code


def handle_compare(args: argparse.Namespace) -> int:
    if args.cubin is not None:
        raise UsageError("--cubin and --compare do not go together",
                         "list every variant after --compare (the captured cubin is always included)")
    if args.per_launch:
        raise UsageError("--per-launch and --compare do not go together", "time the launches of one program")
    cubins = [Path(c) for c in args.compare if c not in inspect_tools.BASELINE_NAMES]  # always the baseline
    for cubin in cubins:
        check_cubin(cubin)
    request = render.from_args(api.CompareRequest, args, cubins=tuple(str(c) for c in cubins),
                               iterations=_or(args.iterations, api.options.COMPARE_ITERATIONS),
                               warmup=_or(args.warmup, api.options.COMPARE_WARMUP)).checked()
    with _open(args) as session:
        result = session.compare(request)
    print(json.dumps(result.to_dict(), indent=1) if args.json else api.format_comparison(result))
    return EXIT_FAILED if any(p.void or p.unseen_ms is not None for p in result.programs) else 0


def _open(args: argparse.Namespace):
    """The reproducer's session (a set's: its members'), as the workbench and MCP open it;
    --timeout bounds each replay request (the one default otherwise)."""
    return api.open(args.path, device=args.device, order=args.sequence_order, replay_timeout=args.timeout,
                    compile_worker=False)


def _or(value, option):
    return option.default if value is None else value
