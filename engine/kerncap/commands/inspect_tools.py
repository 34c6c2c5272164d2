"""The CUDA developer tools on a replay: `kerncap replay … --ncu [--compare A B]` and
`kerncap validate … --sanitize [TOOL]` (kerncap.replay.ncu, kerncap.replay.sanitize)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kerncap.errors import KerncapError

BASELINE_NAMES = ("captured", "baseline")


def positive_float(text: str) -> float:
    v = float(text)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 (got {text})")
    return v


def add_ncu_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Nsight Compute (one replayed launch, after the warm-up)")
    g.add_argument("--ncu", action="store_true",
                   help="profile one launch with Nsight Compute; the report is stored next to the variant")
    g.add_argument("--section", action="append", metavar="NAME",
                   help="ncu section to collect (repeatable; default: SpeedOfLight LaunchStats Occupancy "
                        "MemoryWorkloadAnalysis)")
    g.add_argument("--set", dest="ncu_set", metavar="NAME", help="ncu section set instead (e.g. basic, full: slow)")
    g.add_argument("--compare", nargs=2, metavar=("A", "B"),
                   help="metrics of two cubins side by side with B's change (A/B: a cubin, or `captured`); "
                        "reuses a stored report of the same cubin bytes")
    g.add_argument("--timeout", type=positive_float, default=None, metavar="S",
                   help="kill ncu and the replay after S seconds (600)")


def add_sanitize_arguments(p: argparse.ArgumentParser) -> None:
    from kerncap.replay.sanitize import TOOLS

    g = p.add_argument_group("compute-sanitizer (one validation launch)")
    g.add_argument("--sanitize", nargs="?", const="memcheck", choices=TOOLS, metavar="TOOL",
                   help=f"run the launch under compute-sanitizer ({' | '.join(TOOLS)}; default memcheck); exit "
                        "status 0 only when it reports no error")
    g.add_argument("--timeout", type=positive_float, default=None, metavar="S",
                   help="kill the sanitizer and the replay after S seconds (600)")


def check_tool_flags(args: argparse.Namespace, tool_flag: str) -> None:
    """Tool options without the tool would be silently ignored: refuse them."""
    flags = {"section": "--section", "ncu_set": "--set", "timeout": "--timeout"}
    given = [flag for name, flag in flags.items() if getattr(args, name, None)]
    if given:
        raise KerncapError(f"{', '.join(given)} only apply with {tool_flag}", f"add {tool_flag}, or drop them")


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
    from kerncap.replay import ncu

    options = dict(sections=args.section, ncu_set=args.ncu_set, warmup=args.warmup, flush_l2=args.flush_l2,
                   timeout=args.timeout or ncu.DEFAULT_TIMEOUT, device=args.device, progress=_progress)
    if args.compare:
        if args.cubin is not None:
            raise KerncapError("--compare names both cubins; --cubin does not apply",
                               "kerncap replay DIR --compare captured VARIANT.cubin")
        results = []
        for text in args.compare:
            result, reused = ncu.stored_or_profile(args.path, _cubin_arg(text), **options)
            if reused:
                _progress(f"ncu: using the stored report of {result.label} (same cubin bytes and sections)")
            results.append(result)
        a, b = results
        print(json.dumps({"a": a.to_dict(), "b": b.to_dict()}, indent=1) if args.json else ncu.format_compare(a, b))
        return 0
    result = ncu.profile(args.path, args.cubin, **options)
    print(json.dumps(result.to_dict(), indent=1) if args.json else ncu.format_result(result))
    return 0


def handle_sanitize(args: argparse.Namespace) -> int:
    from kerncap.replay import sanitize

    if args.atol is not None or args.rtol is not None or args.dtype or args.region_dtype:
        raise KerncapError("--atol/--rtol/--dtype/--region-dtype do not apply with --sanitize",
                           "the sanitized launch is validated byte-exactly; check tolerances in a separate validate")

    result = sanitize.sanitize(args.path, args.cubin, tool=args.sanitize,
                               timeout=args.timeout or sanitize.DEFAULT_TIMEOUT, device=args.device,
                               progress=_progress)
    print(json.dumps(result.to_dict(), indent=1) if args.json else sanitize.format_result(result))
    return 0 if result.clean else 1
