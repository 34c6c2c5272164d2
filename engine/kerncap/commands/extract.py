"""`kerncap extract KERNEL [--match M] [--dispatch N|N,M,…] [--buckets] [--nvtx P] [--rank R] [--pid P]
[--device D] [--output DIR] … -- CMD…`; `kerncap extract [KERNEL] --sequence nvtx|graph|run [--count C]
[--until K] …` captures a window of launches (docs/sequences.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kerncap import api
from kerncap.errors import KerncapError, UsageError


def dispatch_arg(text: str) -> int | list[int]:
    """'3' -> 3; '3,17,40' -> [3, 17, 40] (a set)."""
    try:
        values = api.dispatch_list(text)
    except KerncapError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    return values if "," in text else values[0]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "extract",
        help="capture one dispatch of a kernel into a standalone reproducer",
        description="Run the app, capture one dispatch of KERNEL (its binary, launch, arguments and the device "
        "memory it can reach, at the original addresses) and write a reproducer directory.",
        epilog="example: kerncap extract gemm --dispatch 3 --output ./gemm-repro -- ./app --size 4096",
    )
    p.add_argument("kernel", metavar="KERNEL", nargs="?", default="",
                   help="kernel name or pattern (see --match); not needed with --sequence nvtx")
    p.add_argument("--match", choices=api.MATCH_MODES, default="substring",
                   help="substring of the mangled or demangled name (default), regex search, or exact mangled name")
    p.add_argument("--dispatch", type=dispatch_arg, default=0, metavar="N",
                   help="capture the N-th matching launch, from 0, per process (default: 0); a list N,M,... captures "
                        "each of them in one run into a reproducer set")
    p.add_argument("--buckets", action="store_true",
                   help="capture one dispatch of every launch signature (grid, block, dynamic smem, scalar "
                        "arguments) in one run into a reproducer set weighted by each bucket's in-app time")
    seq = p.add_argument_group("a sequence of launches as one reproducer (docs/sequences.md)")
    seq.add_argument("--sequence", choices=api.SEQUENCE_MODES, metavar="MODE",
                     help="nvtx: every launch of instance N (--dispatch) of the --nvtx range; graph: the whole CUDA "
                          "graph launch running dispatch N of KERNEL; run: the launches from dispatch N of KERNEL on "
                          "(--count or --until)")
    seq.add_argument("--count", type=int, metavar="C", help="--sequence run: C launches")
    seq.add_argument("--until", metavar="PATTERN",
                     help="--sequence run: up to and including the next launch of a kernel matching PATTERN")
    sel = p.add_argument_group("which launches count (docs/selection.md)")
    sel.add_argument("--nvtx", metavar="PATTERN",
                     help="only launches inside NVTX ranges whose path matches, e.g. 'forward.S1024/layer.5'")
    sel.add_argument("--nvtx-match", choices=api.NVTX_MATCH_MODES, default="substring",
                     help="how --nvtx matches the range path (default: substring)")
    sel.add_argument("--rank", type=int, metavar="R",
                     help="only the process of rank R (RANK, LOCAL_RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID)")
    sel.add_argument("--pid", type=int, metavar="P", help="only the process with pid P")
    sel.add_argument("--device", type=int, metavar="D", help="only launches on CUDA device D (as the app numbers it)")
    p.add_argument("--output", "-o", type=Path, metavar="DIR",
                   help="reproducer directory (default: WORKSPACE/reproducers/<kernel>-<time>)")
    p.add_argument("--workspace", type=Path, default=api.DEFAULT_WORKSPACE, metavar="DIR",
                   help="workspace for the default --output (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="replace a non-empty --output (only once the capture succeeded)")
    p.add_argument("--keep-running", action="store_true", help="let the app run to its end after the capture")
    p.add_argument("--timeout", type=float, metavar="S", help="stop the app after S seconds")
    p.add_argument("--source-dir", type=Path, metavar="DIR", help="the app's source tree, to copy the kernel's sources")
    p.add_argument("--build-dir", type=Path, metavar="DIR", help="the app's build tree (compile_commands.json)")
    p.add_argument("--intercept", choices=api.INTERCEPT_PATHS,
                   help="how driver calls reach kerncap: entry, interposed driver entry points with CUPTI only at "
                        "the dispatch (cheaper per launch), or cupti callbacks (docs/interposer.md); "
                        "default: KERNCAP_INTERCEPT, else entry")
    p.add_argument("--keep-run-dir", action="store_true", help="keep the per-process run directory (debugging)")
    p.add_argument("--prune", action="store_true",
                   help="then keep only the memory the kernel can reach through pointers, if replay validates "
                        "that byte-exact (needs the GPU; see `kerncap prune`)")
    p.add_argument("--cmd", metavar="CMD", help="the app's command as one string (instead of `-- CMD…`)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    command = api.app_command(args.app_command, args.cmd)
    if not args.kernel and not args.sequence:
        raise UsageError("no kernel name given", "run `kerncap profile -- CMD` to see the kernel names")
    # the same arguments as the workbench's extract dialog and MCP's extract
    sequence = api.sequence_extract_arguments(args.sequence, count=args.count, until=args.until).get("sequence")
    output = args.output or api.Workspace(args.workspace).new_reproducer_path(
        args.kernel or (args.nvtx or "sequence").replace("/", "_"))
    selection = api.Selection(nvtx=args.nvtx, nvtx_match=args.nvtx_match, rank=args.rank, pid=args.pid,
                              device=args.device)
    result = api.extract(
        args.kernel, command, output=output, dispatch=args.dispatch, match=args.match,
        keep_running=args.keep_running, timeout=args.timeout, source_dir=args.source_dir,
        build_dir=args.build_dir, force=args.force, keep_run_dir=args.keep_run_dir, prune=args.prune,
        selection=selection, buckets=args.buckets, intercept=args.intercept, sequence=sequence,
    )
    if isinstance(result, api.ExtractResult):
        print(api.format_extract(result))
    else:
        print(api.format_set_extract(result))
    for w in result.warnings:
        print(f"kerncap extract: warning: {w}", file=sys.stderr)
    return 0
