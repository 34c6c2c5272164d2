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
    p.add_argument("--config", help="Triton only: compile options to pin instead of the captured ones, e.g. "
                   "num_warps=4,num_stages=2, or another autotune config (its constexprs too, e.g. "
                   "XBLOCK=8,R0_BLOCK=512,num_warps=4: launched with that config's grid)")
    p.add_argument("--list-configs", action="store_true",
                   help="Triton only: list the autotune configs the capture recorded, as --config values, and exit")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--full", action="store_true",
                     help="CUDA: compile the whole translation unit (default: only what the captured kernel needs, "
                          "falling back to the whole unit when that fails)")
    how.add_argument("--reduced", action="store_true",
                     help="CUDA: compile only what the captured kernel needs, without falling back")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="print the compiler command, its output and where the time went")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.list_configs:
        return list_configs(args.reproducer, args.json)
    mode = "full" if args.full else "reduced" if args.reduced else "auto"
    result = recompile(args.reproducer, args.config) if mode == "auto" else recompile(args.reproducer, args.config, mode)
    phases = getattr(result, "phases", {}) or {}
    notes = getattr(result, "notes", []) or []
    if args.json:
        print(json.dumps({"cubin": str(result.cubin), "seconds": round(result.seconds, 3),
                          "command": result.command, "log": result.log, "mode": getattr(result, "mode", None),
                          "phases": phases, "notes": notes, "summary": getattr(result, "summary", "")},
                         indent=2))
        return 0
    if args.verbose:
        print("$ " + " ".join(result.command))
    if args.verbose or result.log.strip():
        print(result.log.rstrip())
    for note in notes:
        print(note)
    if args.verbose and getattr(result, "summary", ""):
        print(result.summary)
    if args.verbose and phases:
        print("time: " + ", ".join(f"{name} {s:.2f} s" for name, s in phases.items())
              + ("" if "link" in phases else " (no link step: ptxas writes the cubin)"))
    print(f"{result.cubin}  ({result.seconds:.2f} s)")
    print(f"replay it with: kerncap replay {args.reproducer} --cubin {result.cubin}")
    return 0


def list_configs(reproducer: Path, as_json: bool) -> int:
    from kerncap.triton import configs, pinned

    spec = pinned.load_spec(reproducer)
    cands = configs.candidates(spec)
    if as_json:
        print(json.dumps([{"config": c.config, "grid": c.grid, "grid_error": c.grid_error, "captured": c.captured}
                          for c in cands], indent=2))
        return 0
    if not cands:
        print(f"{reproducer}: the capture recorded no autotune configs for {spec['function']}")
        return 0
    print(f"{len(cands)} autotune configs of {spec['function']} (grid in programs); pin one with --config:")
    width = max(len(c.config) for c in cands)
    for c in cands:
        grid = c.grid if c.grid else f"unknown ({c.grid_error})" if c.grid_error else "unknown"
        print(f"  {'*' if c.captured else ' '} {c.config:<{width}}  grid {grid}")
    if any(c.captured for c in cands):
        print("  * the captured config")
    else:
        print(f"  the captured config is none of these (e.g. refined by coordinate descent): "
              f"{configs.captured_constexprs(spec)}, grid {spec['launch']['grid']}")
    return 0
