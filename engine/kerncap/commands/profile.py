"""`kerncap profile [--json] [--output F] [--top N] [--timeout S] [--nvtx P] [--by-nvtx] [--buckets] -- CMD…`"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kerncap.profile import ProfileResult, format_dim, run_profile, short_kernel_name
from kerncap.selection import NVTX_MATCH_MODES
from kerncap.run import default_sink, resolve_app_command
from kerncap.workspace import DEFAULT_WORKSPACE, Workspace


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile",
        help="rank the app's kernels by total GPU time",
        description="Run the app once under the capture library and rank its kernels by total GPU time. "
        "The profile is saved into the workspace (or --output).",
        epilog="example: kerncap profile --top 10 -- python train.py --steps 5",
    )
    p.add_argument("--json", action="store_true", help="print the profile as JSON instead of a table")
    p.add_argument("--output", "-o", type=Path, metavar="FILE", help="save the profile JSON here")
    p.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE, metavar="DIR",
                   help="where profiles are saved by default (default: %(default)s)")
    p.add_argument("--top", type=int, default=20, metavar="N", help="rows in the table; 0 for all (default: 20)")
    p.add_argument("--timeout", type=float, metavar="S", help="stop the app after S seconds")
    p.add_argument("--nvtx", metavar="PATTERN",
                   help="count only launches inside NVTX ranges whose path (e.g. 'forward.S1024/layer.5') matches")
    p.add_argument("--nvtx-match", choices=NVTX_MATCH_MODES, default="substring",
                   help="how --nvtx matches the range path (default: substring)")
    p.add_argument("--by-nvtx", action="store_true",
                   help="also rank GPU time per (NVTX range path, kernel), like Nsight Systems' NVTX summary")
    p.add_argument("--buckets", action="store_true",
                   help="also group each kernel's launches by signature (grid, block, dynamic smem, scalar "
                        "arguments) with count and time per bucket")
    p.add_argument("--cmd", metavar="CMD", help="the app's command as one string (instead of `-- CMD…`)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    command = resolve_app_command(args.app_command, args.cmd)
    # With --json our stdout carries the JSON: the app's stdout goes to stderr.
    sink = _app_output_to_stderr if args.json else None
    result = run_profile(command, timeout=args.timeout, output=sink, nvtx=args.nvtx, nvtx_match=args.nvtx_match,
                         by_nvtx=args.by_nvtx, buckets=args.buckets)
    path = result.save(args.output or Workspace(args.workspace).new_profile_path())
    if args.json:
        json.dump(result.to_dict(), sys.stdout, indent=1)
        print()
        print(f"kerncap: profile saved to {path}", file=sys.stderr)
    else:
        print_table(result, top=args.top)
        if result.nvtx_ranges:
            print_nvtx_table(result, top=args.top)
        if result.buckets:
            print_bucket_table(result, top=args.top)
        print(f"profile saved to {path}")
    for w in result.warnings:
        print(f"kerncap profile: warning: {w}", file=sys.stderr)
    return 0


def _app_output_to_stderr(stream: str, data: bytes) -> None:
    default_sink("stderr", data)


def print_table(result: ProfileResult, *, top: int = 20, file=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file or sys.stdout)
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("#", justify="right", style="dim")
    table.add_column("kernel", overflow="ellipsis", no_wrap=True, max_width=72)
    for col in ("calls", "total ms", "%", "avg µs", "min µs", "max µs"):
        table.add_column(col, justify="right")
    table.add_column("grid", justify="right")
    table.add_column("block", justify="right")
    shown = result.kernels if top <= 0 else result.kernels[:top]
    for rank, k in enumerate(shown, 1):
        table.add_row(
            str(rank), short_kernel_name(k.display_name, 72), f"{k.calls:,}", f"{k.total_ns / 1e6:,.3f}",
            f"{k.percent:.1f}", f"{k.avg_ns / 1e3:,.2f}", f"{k.min_ns / 1e3:,.2f}", f"{k.max_ns / 1e3:,.2f}",
            format_dim(k.grid), format_dim(k.block),
        )
    console.print(table)
    hidden = len(result.kernels) - len(shown)
    more = f" ({hidden} more not shown; --top 0 shows all)" if hidden > 0 else ""
    console.print(
        f"{len(result.kernels)} kernels, {result.dispatches:,} dispatches in {result.processes} process(es), "
        f"{result.total_ns / 1e6:,.3f} ms of GPU time; the app ran {result.wall_seconds:.1f} s{more}",
        highlight=False,
    )


def _console(file=None):
    from rich.console import Console

    return Console(file=file or sys.stdout)


def print_nvtx_table(result: ProfileResult, *, top: int = 20, file=None) -> None:
    """GPU time per (NVTX range path, kernel), most first."""
    from rich.table import Table

    from kerncap.nvtx_summary import RangeKernel

    rows = [RangeKernel(**r) for r in result.nvtx_ranges]
    table = Table(box=None, header_style="bold", pad_edge=False, title="GPU time per NVTX range and kernel",
                  title_justify="left")
    table.add_column("#", justify="right", style="dim")
    table.add_column("range", overflow="ellipsis", no_wrap=True, max_width=40)
    table.add_column("kernel", overflow="ellipsis", no_wrap=True, max_width=48)
    for col in ("calls", "total ms", "%", "avg µs"):
        table.add_column(col, justify="right")
    shown = rows if top <= 0 else rows[:top]
    for rank, r in enumerate(shown, 1):
        table.add_row(str(rank), r.path_text, short_kernel_name(r.demangled or r.kernel, 48), f"{r.calls:,}",
                      f"{r.total_ns / 1e6:,.3f}", f"{r.percent:.1f}", f"{r.avg_ns / 1e3:,.2f}")
    console = _console(file)
    console.print(table)
    if len(rows) > len(shown):
        console.print(f"({len(rows) - len(shown)} more rows; --top 0 shows all)", highlight=False)


def print_bucket_table(result: ProfileResult, *, top: int = 20, file=None) -> None:
    """Each ranked kernel's buckets (launch signatures) with count and share of its time."""
    from rich.table import Table

    from kerncap.buckets import Bucket, time_shares

    by_kernel: dict[str, list[Bucket]] = {}
    for d in result.buckets:
        b = Bucket.from_dict(d)
        by_kernel.setdefault(b.kernel, []).append(b)
    kernels = [k for k in result.kernels if k.name in by_kernel]
    console = _console(file)
    for k in kernels if top <= 0 else kernels[:top]:
        buckets = by_kernel[k.name]
        table = Table(box=None, header_style="bold", pad_edge=False, title_justify="left",
                      title=f"{short_kernel_name(k.display_name, 72)}: {len(buckets)} bucket(s)")
        for col in ("calls", "total ms", "share %", "avg µs"):
            table.add_column(col, justify="right")
        table.add_column("signature", overflow="fold")
        for b, share in zip(buckets, time_shares(buckets)):
            table.add_row(f"{b.launches:,}", f"{b.time_ns / 1e6:,.3f}", f"{100 * share:.1f}",
                          f"{b.avg_ns / 1e3:,.2f}", b.signature())
        console.print(table)
