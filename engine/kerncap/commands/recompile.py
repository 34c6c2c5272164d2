"""`kerncap recompile DIR`: rebuild only the captured kernel from the reproducer's
edited source, with the original flags, for the captured GPU."""

from __future__ import annotations

import argparse
import json
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
    # one door for every shape: a set builds one variant for its members, a sequence's
    # --kernel one kernel and the sequence variant using it; what cannot, refuses itself
    with api.open(args.reproducer, compile_worker=False) as session:
        if args.list_configs:
            return list_configs(session.autotune_configs(), args.reproducer, args.json)
        result = session.recompile(args.config, mode=_mode(args), trust=args.trust, kernel=args.kernel,
                                   split=args.verbose)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    print(result.text(verbose=args.verbose))
    print(f"replay it with: kerncap replay {args.reproducer} --cubin {result.target}")
    return 0


def list_configs(found: api.AutotuneConfigs, reproducer: Path, as_json: bool) -> int:
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

