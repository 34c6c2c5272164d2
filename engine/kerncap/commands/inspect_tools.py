"""The CUDA developer tools on a replay: `kerncap replay … --ncu [--compare A B]` and
`kerncap validate … --sanitize [TOOL]` (the open reproducer's Session.ncu and Session.sanitize)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kerncap import api
from kerncap.commands.arguments import positive_float
from kerncap.errors import KerncapError, UsageError

BASELINE_NAMES = ("captured", "baseline")


def add_ncu_arguments(p: argparse.ArgumentParser) -> None:
    """--ncu and its options; `--compare A B` is the replay command's own --compare."""
    g = p.add_argument_group("Nsight Compute (one replayed launch, after the warm-up)")
    g.add_argument("--ncu", action="store_true",
                   help="profile one launch with Nsight Compute; the report is stored next to the variant")
    g.add_argument("--section", action="append", metavar="NAME",
                   help=f"ncu section to collect (repeatable; default: {' '.join(api.NCU_SECTIONS)})")
    g.add_argument("--set", dest="ncu_set", metavar="NAME", help="ncu section set instead (e.g. basic, full: slow)")
    g.add_argument("--timeout", type=positive_float, default=None, metavar="S",
                   help=f"kill ncu and the replay after S seconds ({api.NCU_TIMEOUT:g}); without --ncu: kill "
                        "the replay server when it takes longer than S seconds to answer (no limit)")


def add_sanitize_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("compute-sanitizer (one validation launch)")
    g.add_argument("--sanitize", nargs="?", const="memcheck", choices=api.SANITIZE_TOOLS, metavar="TOOL",
                   help=f"run the launch under compute-sanitizer ({' | '.join(api.SANITIZE_TOOLS)}; default "
                        "memcheck); exit status 0 only when it reports no error")
    g.add_argument("--timeout", type=positive_float, default=None, metavar="S",
                   help=f"kill the sanitizer and the replay after S seconds ({api.SANITIZE_TIMEOUT:g})")


def check_tool_flags(args: argparse.Namespace, tool_flag: str, allowed: tuple[str, ...] = ()) -> None:
    """Tool options without the tool would be silently ignored: refuse them (but those
    the command also uses without the tool, `allowed`)."""
    flags = {"section": "--section", "ncu_set": "--set", "timeout": "--timeout"}
    given = [flag for name, flag in flags.items() if getattr(args, name, None) and name not in allowed]
    if given:
        raise UsageError(f"{', '.join(given)} only apply with {tool_flag}", f"add {tool_flag}, or drop them")


def _cubin_arg(text: str | None) -> Path | None:
    if text is None or text in BASELINE_NAMES:
        return None
    path = Path(text)
    if not path.is_file():
        raise KerncapError(f"variant cubin {path} does not exist",
                           f"give a cubin path or one of {', '.join(BASELINE_NAMES)} for the captured one")
    return path


def _progress(text: str) -> None:
    print(f"kerncap: {text}", file=sys.stderr, flush=True)


def handle_ncu(args: argparse.Namespace) -> int:
    if getattr(args, "warm_l2", False):
        raise UsageError("--warm-l2 does not apply with --ncu",
                         "Nsight Compute sets the cache itself: --flush-l2 for a cold L2, or neither")
    if getattr(args, "timer", "events") != "events":
        raise UsageError(f"--timer {args.timer} does not apply with --ncu",
                         "Nsight Compute times the launch itself (its gpu__time_duration); drop --timer")
    options = dict(sections=args.section, ncu_set=args.ncu_set, warmup=3 if args.warmup is None else args.warmup,
                   flush_l2=args.flush_l2, timeout=args.timeout or api.NCU_TIMEOUT, progress=_progress)
    if args.compare:
        if args.cubin is not None:
            raise UsageError("--compare names both cubins; --cubin does not apply",
                             "kerncap replay DIR --ncu --compare captured VARIANT.cubin")
        if len(args.compare) != 2:
            raise UsageError(f"--ncu --compare takes two cubins, A and B (got {len(args.compare)})",
                             "kerncap replay DIR --ncu --compare captured VARIANT.cubin")
        with api.open(args.path, device=args.device, compile_worker=False) as session:
            a, b = (session.ncu(_cubin_arg(text), reuse=True, **options) for text in args.compare)
        print(json.dumps({"a": a.to_dict(), "b": b.to_dict()}, indent=1) if args.json else api.format_ncu_compare(a, b))
        return 0
    with api.open(args.path, device=args.device, compile_worker=False) as session:
        result = session.ncu(args.cubin, **options)
    print(json.dumps(result.to_dict(), indent=1) if args.json else api.format_ncu(result))
    return 0


def handle_sanitize(args: argparse.Namespace) -> int:
    if args.atol is not None or args.rtol is not None or args.dtype or args.region_dtypes:
        raise UsageError("--atol/--rtol/--dtype/--region-dtype do not apply with --sanitize",
                         "the sanitized launch is validated byte-exactly; check tolerances in a separate validate")
    if args.perturb is not None or args.keep:
        raise UsageError("--perturb/--keep do not apply with --sanitize",
                         "the sanitizer checks one launch on the captured input; validate perturbed inputs apart")
    if len(args.paths) != 1:
        raise UsageError(f"--sanitize checks one reproducer (got {len(args.paths)})", "give one DIR")
    with api.open(args.paths[0], device=args.device, compile_worker=False) as session:
        result = session.sanitize(args.cubin, tool=args.sanitize, timeout=args.timeout or api.SANITIZE_TIMEOUT,
                                  progress=_progress)
    print(json.dumps(result.to_dict(), indent=1) if args.json else api.format_sanitize(result))
    return 0 if result.clean else 1
