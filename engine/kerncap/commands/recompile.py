"""`kerncap recompile DIR`: rebuild only the captured kernel from the reproducer's
edited source, with the original flags, for the captured GPU."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kerncap.recompile import recompile


def register(sub) -> None:
    p = sub.add_parser("recompile", help="rebuild only the kernel from the reproducer's editable source")
    p.add_argument("reproducer", type=Path, help="reproducer directory (from `kerncap extract`)")
    p.add_argument("--config", help="Triton only: compile options to pin instead of the captured ones, e.g. num_warps=4,num_stages=2")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--verbose", "-v", action="store_true", help="print the compiler command and output")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    result = recompile(args.reproducer, args.config)
    if args.json:
        print(json.dumps({"cubin": str(result.cubin), "seconds": round(result.seconds, 3),
                          "command": result.command, "log": result.log}, indent=2))
        return 0
    if args.verbose:
        print("$ " + " ".join(result.command))
    if args.verbose or result.log.strip():
        print(result.log.rstrip())
    print(f"{result.cubin}  ({result.seconds:.2f} s)")
    print(f"replay it with: kerncap replay {args.reproducer} --cubin {result.cubin}")
    return 0
