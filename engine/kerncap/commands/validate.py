"""`kerncap validate DIR [--cubin F] [--atol A] [--rtol R] [--dtype T] [--json]`"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kerncap.commands.replay import check_cubin, non_negative_int


def non_negative_float(text: str) -> float:
    v = float(text)
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (got {text})")
    return v


def dtype_name(text: str) -> str:
    from kerncap.errors import KerncapError
    from kerncap.replay.dtypes import normalize

    try:
        return normalize(text)
    except KerncapError as exc:
        raise argparse.ArgumentTypeError(f"{exc.message}; {exc.hint}") from None


def region_dtype(text: str) -> tuple[int, str]:
    rid, sep, name = text.partition("=")
    if not sep or not rid.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected REGION=DTYPE, e.g. 3=float16 (got {text!r})")
    return int(rid), dtype_name(name)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="replay on the GPU and compare with the captured post-state",
        description="Restore the pre-state, launch the kernel (the captured cubin or --cubin VARIANT) once and "
                    "compare every region and module global with the captured post-state on the GPU: byte-exact "
                    "by default; with --atol/--rtol/--dtype element-wise within |a-e| <= atol + rtol*|e| "
                    "(NaN equals NaN; integer dtypes exact). Memory the captured kernel did not write must stay "
                    "unchanged. Exit status 0 only when everything matches.",
    )
    p.add_argument("path", type=Path, metavar="DIR", help="reproducer directory (or its capture/ directory), or a set")
    p.add_argument("--cubin", type=Path, metavar="F",
                   help="variant cubin to check instead of the captured one (a set: a cubin or variants/<n>.json; "
                        "then every member is also timed and the weighted speedup reported)")
    p.add_argument("--atol", type=non_negative_float, metavar="A", help="absolute tolerance (tolerance mode)")
    p.add_argument("--rtol", type=non_negative_float, metavar="R", help="relative tolerance (tolerance mode)")
    p.add_argument("--dtype", type=dtype_name, metavar="T",
                   help="element type of regions with no known dtype (tolerance mode; default float32): "
                        "float64 float32 float16 bfloat16 int32 int8 uint8")
    p.add_argument("--region-dtype", type=region_dtype, action="append", default=[], metavar="ID=T",
                   help="element type of one region (repeatable), e.g. --region-dtype 3=bfloat16")
    p.add_argument("--device", type=non_negative_int, default=0,
                   help="GPU ordinal (0); any GPU of the capture's architecture")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from kerncap.replay.client import ReplayClient
    from kerncap.replay.results import format_validation
    from kerncap.sets import is_set

    if is_set(args.path):
        from kerncap.commands.replay import handle_set

        return handle_set(args, validate=True)
    check_cubin(args.cubin)
    dtypes = dict(args.region_dtype)
    dtype = args.dtype
    if dtypes and dtype is None and args.atol is None and args.rtol is None:
        dtype = "float32"  # per-region dtypes ask for an element-wise comparison
    with ReplayClient(args.path, device=args.device) as rc:
        result = rc.validate(cubin=args.cubin, atol=args.atol, rtol=args.rtol, dtype=dtype, dtypes=dtypes)
    print(json.dumps(result.to_dict(), indent=1) if args.json else format_validation(result))
    return 0 if result.passed else 1
