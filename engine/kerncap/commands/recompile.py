"""`kerncap recompile DIR`: rebuild only the captured kernel from the reproducer's
edited source, with the original flags, for the captured GPU."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kerncap.recompile import recompile


def register(sub) -> None:
    p = sub.add_parser("recompile", help="rebuild only the kernel from the reproducer's editable source")
    p.add_argument("reproducer", type=Path,
                   help="reproducer directory (from `kerncap extract`), or a set (one variant for every member, "
                        "built from SET/source)")
    p.add_argument("--config", help="Triton only: compile options to pin instead of the captured ones, e.g. "
                   "num_warps=4,num_stages=2, or another autotune config (its constexprs too, e.g. "
                   "XBLOCK=8,R0_BLOCK=512,num_warps=4: launched with that config's grid)")
    p.add_argument("--list-configs", action="store_true",
                   help="Triton only: list the autotune configs the capture recorded, as --config values, and exit")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--verbose", "-v", action="store_true", help="print the compiler command and output")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from kerncap.sets import is_set

    if is_set(args.reproducer):
        return recompile_set_cli(args)
    if args.list_configs:
        return list_configs(args.reproducer, args.json)
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


def recompile_set_cli(args: argparse.Namespace) -> int:
    """One variant every member of a set uses, built from the set's source/."""
    from kerncap.sets import ReproducerSet, recompile_set

    if args.list_configs:
        return list_configs(ReproducerSet.open(args.reproducer).members[0].path, args.json)
    v = recompile_set(ReproducerSet.open(args.reproducer), args.config)
    if args.json:
        print(json.dumps({"variant": str(v.path), "seconds": round(v.seconds, 3), "builds": v.builds,
                          "cubins": {str(i): str(c) for i, c in v.cubins.items()}}, indent=2))
        return 0
    print(f"{v.path}  ({v.builds} build(s), {v.seconds:.2f} s)")
    for i, c in v.cubins.items():
        print(f"  member {i}: {c}")
    print(f"replay it with: kerncap replay {args.reproducer} --cubin {v.path}")
    return 0
