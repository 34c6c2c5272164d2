"""`kerncap recompile DIR`: rebuild only the captured kernel from the reproducer's
edited source, with the original flags, for the captured GPU."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from kerncap import api


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
    p.add_argument("--trust", action="store_true",
                   help="run recorded compile flags outside the allow-list (host-compiler plugins, a host compiler "
                        "outside the system, response files, output paths): only for a reproducer you trust")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--full", action="store_true",
                     help="CUDA: compile the whole translation unit (default: only what the captured kernel needs, "
                          "falling back to the whole unit when that fails)")
    how.add_argument("--reduced", action="store_true",
                     help="CUDA: compile only what the captured kernel needs, without falling back")
    p.add_argument("--kernel", metavar="K",
                   help="a sequence (docs/sequences.md): rebuild kernel K (its number or a part of its name, as "
                        "`kerncap info` lists them) and write the sequence variant that uses it")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="print the compiler's output even when it is quiet, and where the time went")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if api.is_set(args.reproducer):
        return recompile_set_cli(args)
    if args.list_configs:
        return list_configs(args.reproducer, args.json)
    variant = None
    if args.kernel is not None:
        result, variant = api.recompile_sequence_kernel(args.reproducer, args.kernel, trust=args.trust, mode=_mode(args))
    else:  # a sequence is refused by recompile itself: it needs --kernel
        result = api.recompile(args.reproducer, args.config, trust=args.trust, mode=_mode(args))
    if args.json:
        print(json.dumps({"cubin": str(result.cubin), "seconds": round(result.seconds, 3),
                          "command": result.command, "log": result.log, "mode": result.mode,
                          "phases": result.phases, "notes": result.notes, "summary": result.summary,
                          "variant": None if variant is None else str(variant)},
                         indent=2))
        return 0
    print("$ " + shlex.join(result.command))  # always: the user sees what ran
    if args.verbose or result.log.strip():
        print(result.log.rstrip())
    for note in result.notes:
        print(note)
    if args.verbose and result.summary:
        print(result.summary)
    if args.verbose and result.phases:
        print("time: " + result.phase_line()
              + ("" if "link" in result.phases or result.mode == "triton" else " (no link step: ptxas writes the cubin)"))
    print(f"{result.cubin}  ({result.seconds:.2f} s)")
    target = variant or result.cubin
    if variant is not None:
        print(f"sequence variant {variant}")
    print(f"replay it with: kerncap replay {args.reproducer} --cubin {target}")
    return 0


def list_configs(reproducer: Path, as_json: bool) -> int:
    found = api.autotune_configs(reproducer)
    cands = found.candidates
    if as_json:
        print(json.dumps([{"config": c.config, "grid": c.grid, "grid_error": c.grid_error, "captured": c.captured}
                          for c in cands], indent=2))
        return 0
    if not cands:
        print(f"{reproducer}: the capture recorded no autotune configs for {found.function}")
        return 0
    print(f"{len(cands)} autotune configs of {found.function} (grid in programs); pin one with --config:")
    width = max(len(c.config) for c in cands)
    for c in cands:
        grid = c.grid if c.grid else f"unknown ({c.grid_error})" if c.grid_error else "unknown"
        print(f"  {'*' if c.captured else ' '} {c.config:<{width}}  grid {grid}")
    if any(c.captured for c in cands):
        print("  * the captured config")
    else:
        print(f"  the captured config is none of these (e.g. refined by coordinate descent): "
              f"{found.captured_constexprs}, grid {found.captured_grid}")
    return 0


def _mode(args: argparse.Namespace) -> str:
    return "full" if args.full else "reduced" if args.reduced else "auto"


def recompile_set_cli(args: argparse.Namespace) -> int:
    """One variant every member of a set uses, built from the set's source/."""
    reproducer_set = api.ReproducerSet.open(args.reproducer)
    if args.list_configs:
        return list_configs(reproducer_set.members[0].path, args.json)
    v = api.recompile_set(reproducer_set, args.config, trust=args.trust, mode=_mode(args))
    if args.json:
        print(json.dumps({"variant": str(v.path), "seconds": round(v.seconds, 3), "builds": v.builds,
                          "cubins": {str(i): str(c) for i, c in v.cubins.items()},
                          "commands": [r.command for r in v.results]}, indent=2))
        return 0
    for r in v.results:
        print("$ " + shlex.join(r.command))  # always: the user sees what ran
        if args.verbose or r.log.strip():
            print(r.log.rstrip())
        for note in r.notes:
            print(note)
    print(f"{v.path}  ({v.builds} build(s), {v.seconds:.2f} s)")
    for i, c in v.cubins.items():
        print(f"  member {i}: {c}")
    print(f"replay it with: kerncap replay {args.reproducer} --cubin {v.path}")
    return 0
