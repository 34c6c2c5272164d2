"""`kerncap profile [--json] [--output F] [--top N] [--timeout S] [--sampled] [--nvtx P] [--by-nvtx] [--buckets] -- CMD…`"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kerncap import api


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile",
        help="rank the app's kernels by total GPU time",
        description="Run the app once under the capture library and rank its kernels by total GPU time. "
        "The profile is saved into the workspace (or --output).",
        epilog="example: kerncap profile --top 10 -- python train.py --steps 5",
    )
    p.add_argument("--json", action="store_true", help="print the profile as JSON instead of a table")
    p.add_argument("--wide", action="store_true",
                   help="full kernel names in the table (by default they are shortened to fit the terminal, "
                        "80 columns in a pipe; every number column is always shown)")
    p.add_argument("--output", "-o", type=Path, metavar="FILE", help="save the profile JSON here")
    p.add_argument("--workspace", type=Path, default=api.DEFAULT_WORKSPACE, metavar="DIR",
                   help="where profiles are saved by default (default: %(default)s)")
    p.add_argument("--top", type=int, default=20, metavar="N", help="rows in the table; 0 for all (default: 20)")
    p.add_argument("--timeout", type=float, metavar="S", help="stop the app after S seconds")
    timing = p.add_mutually_exclusive_group()
    timing.add_argument("--sampled", action="store_true",
                        help="count every launch and time a sample of each kernel's with CUDA events, without "
                             "CUPTI's ~20 %% per launch (estimates with intervals; not with --nvtx, --by-nvtx, "
                             "--buckets)")
    timing.add_argument("--exact", action="store_true",
                        help="time every launch through CUPTI's activity records (the default)")
    p.add_argument("--nvtx", metavar="PATTERN",
                   help="count only launches inside NVTX ranges whose path (e.g. 'forward.S1024/layer.5') matches")
    p.add_argument("--nvtx-match", choices=api.NVTX_MATCH_MODES, default="substring",
                   help="how --nvtx matches the range path (default: substring)")
    p.add_argument("--by-nvtx", action="store_true",
                   help="also rank GPU time per (NVTX range path, kernel), like Nsight Systems' NVTX summary")
    p.add_argument("--buckets", action="store_true",
                   help="also group each kernel's launches by signature (grid, block, dynamic smem, scalar "
                        "arguments) with count and time per bucket")
    p.add_argument("--cmd", metavar="CMD", help="the app's command as one string (instead of `-- CMD…`)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    command = api.app_command(args.app_command, args.cmd)
    # With --json our stdout carries the JSON: the app's stdout goes to stderr.
    sink = _app_output_to_stderr if args.json else None
    result = api.profile(command, timeout=args.timeout, output=sink, nvtx=args.nvtx, nvtx_match=args.nvtx_match,
                         by_nvtx=args.by_nvtx, buckets=args.buckets, sampled=args.sampled)
    path = result.save(args.output or api.Workspace(args.workspace).new_profile_path())
    if args.json:
        json.dump(result.to_dict(), sys.stdout, indent=1)
        print()
        print(f"kerncap: profile saved to {path}", file=sys.stderr)
    else:
        print_table(result, top=args.top, wide=args.wide)
        if result.nvtx_ranges:
            print()
            print_nvtx_table(result, top=args.top, wide=args.wide)
        if result.buckets:
            print()
            print_bucket_table(result, top=args.top, wide=args.wide)
        print(f"profile saved to {path}")
    for w in result.warnings:
        print(f"kerncap profile: warning: {w}", file=sys.stderr)
    return 0


def _app_output_to_stderr(stream: str, data: bytes) -> None:
    api.print_app_output("stderr", data)


def print_table(result: api.ProfileResult, *, top: int = 20, file=None, width: int | None = None,
                wide: bool = False) -> None:
    print(api.format_profile(result, top=top, width=width, wide=wide), file=file or sys.stdout)


def print_nvtx_table(result: api.ProfileResult, *, top: int = 20, file=None, width: int | None = None,
                     wide: bool = False) -> None:
    """GPU time per (NVTX range path, kernel), most first (--by-nvtx)."""
    print(api.format_nvtx_table(result, top=top, width=width, wide=wide), file=file or sys.stdout)


def print_bucket_table(result: api.ProfileResult, *, top: int = 20, file=None, width: int | None = None,
                       wide: bool = False) -> None:
    """Each ranked kernel's buckets (launch signatures) with count and share of its time (--buckets)."""
    print(api.format_bucket_tables(result, top=top, width=width, wide=wide), file=file or sys.stdout)
