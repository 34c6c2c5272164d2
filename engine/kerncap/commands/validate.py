"""`kerncap validate DIR|SET [DIR ...] [--cubin F] [--perturb K [--seed S] [--keep R ...]] [--runs N]
[--atol A] [--rtol R] [--dtype T] [--region-dtype R=T ...] [--json]`"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kerncap import api
from kerncap.commands import inspect_tools
from kerncap.commands.arguments import non_negative_float, non_negative_int, positive_int, shape
from kerncap.commands.replay import check_cubin
from kerncap.core import dtypes
from kerncap.errors import KerncapError, UsageError


def dtype_name(text: str) -> str:
    try:
        return dtypes.normalize(text)
    except KerncapError as exc:
        raise argparse.ArgumentTypeError(f"{exc.message}; {exc.hint}") from None


def region_dtype(text: str) -> tuple[int, str]:
    rid, sep, name = text.partition("=")
    if not sep or not rid.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected REGION=DTYPE, e.g. 3=float16 (got {text!r})")
    return int(rid), dtype_name(name)


def region_shape(text: str) -> tuple[int, tuple[int, ...]]:
    rid, sep, dims = text.partition("=")
    if not sep or not rid.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected REGION=SHAPE, e.g. 3=1024,1024 (got {text!r})")
    return int(rid), shape(dims)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="replay on the GPU and compare with the captured post-state (and on perturbed inputs)",
        description="Check that the captured kernel is deterministic (--runs replays), then restore the pre-state, "
                    "launch the kernel (the captured cubin or --cubin VARIANT) and compare every region and module "
                    "global with the captured post-state on the GPU: byte-exact by default; with "
                    "--atol/--rtol/--dtype element-wise within |a-e| <= atol + rtol*|e| (NaN equals NaN; integer "
                    "dtypes exact); a nondeterministic kernel gets a tolerance derived from its own spread. "
                    "Memory the captured kernel did not write must stay unchanged. With --perturb K the captured "
                    "kernel and the variant also run on K modified inputs and must agree. Several DIRs (reproducers "
                    "of the same kernel) are all checked. Exit status 0: pass, 1: fail, 3: inconclusive or could "
                    "not run.",
    )
    p.add_argument("paths", type=Path, nargs="+", metavar="DIR",
                   help="reproducer directory (or its capture/ directory); several: reproducers of one kernel; a "
                        "reproducer set counts as its members")
    p.add_argument("--cubin", type=Path, metavar="F",
                   help="variant cubin to check instead of the captured one (a set: a cubin or variants/<n>.json; "
                        "then every member is also timed and the weighted speedup reported)")
    p.add_argument("--atol", type=non_negative_float, metavar="A", help="absolute tolerance (tolerance mode)")
    p.add_argument("--rtol", type=non_negative_float, metavar="R", help="relative tolerance (tolerance mode)")
    p.add_argument("--dtype", type=dtype_name, metavar="T",
                   help="element type of regions with no known dtype (tolerance mode; default float32): "
                        + " ".join(dtypes.COMPARABLE))
    p.add_argument("--region-dtype", type=region_dtype, action="append", default=[], metavar="ID=T",
                   help="element type of one region (repeatable), e.g. --region-dtype 3=bfloat16")
    p.add_argument("--region-shape", type=region_shape, action="append", default=[], metavar="ID=SHAPE",
                   help="tensor shape of a region for the mismatch report's coordinates, e.g. 3=1024,1024")
    g = p.add_argument_group("perturbed inputs and determinism (docs/replay.md)")
    g.add_argument("--perturb", type=int, metavar="K",
                   help="also validate on K perturbed copies of the captured input (numeric regions of known dtype "
                        "redrawn; indices, pointers and unknown regions kept)")
    g.add_argument("--seed", type=non_negative_int, default=0, metavar="S", help="seed of the perturbations (0)")
    g.add_argument("--keep", type=non_negative_int, action="append", default=[], metavar="REGION",
                   help="never perturb this region (repeatable)")
    g.add_argument("--runs", type=positive_int, default=api.DEFAULT_RUNS, metavar="N",
                   help=f"replays of the captured kernel to detect nondeterminism ({api.DEFAULT_RUNS}; 1 skips the "
                        "check)")
    p.add_argument("--device", type=non_negative_int, default=0,
                   help="GPU ordinal (0): any GPU of the capture's architecture; the report says which ran")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    inspect_tools.add_sanitize_arguments(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    check_cubin(args.cubin)
    one_set = len(args.paths) == 1 and api.is_set(args.paths[0])
    if args.sanitize:
        if any(api.is_set(p) for p in args.paths):
            raise UsageError("--sanitize checks one reproducer, not a set",
                             f"pass one member, e.g. {args.paths[0] / 'members' / '0'}")
        return inspect_tools.handle_sanitize(args)
    inspect_tools.check_tool_flags(args, "--sanitize")
    per_region = dict(args.region_dtype)
    dtype = args.dtype
    if per_region and dtype is None and args.atol is None and args.rtol is None:
        dtype = "float32"  # per-region dtypes ask for an element-wise comparison
    report = api.validate_inputs(args.paths, cubin=args.cubin, perturb=args.perturb, seed=args.seed,
                                 keep=args.keep, runs=args.runs, atol=args.atol, rtol=args.rtol, dtype=dtype,
                                 dtypes=per_region, device=args.device, shapes=dict(args.region_shape))
    # A set's variant is also timed on every member: its speedup on the workload.
    timing = api.replay_set(args.paths[0], cubin=args.cubin, device=args.device) \
        if one_set and args.cubin is not None and report.verdict != "fail" else None
    if args.json:
        print(json.dumps({**report.to_dict(), "set_timing": timing.to_dict() if timing else None}, indent=1))
    else:
        print(api.format_trust_report(report))
        if timing is not None:
            print(api.format_set_run(timing))
    return report.exit_status
