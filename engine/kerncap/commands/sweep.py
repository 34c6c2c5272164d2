"""`kerncap sweep DIR (--configs F | --autotune | --variants CUBIN…) [--junit F] [--json]`"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kerncap import api
from kerncap.commands import fanout_args
from kerncap.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="validate and time many Triton configs or cubin variants of one reproducer on all GPUs",
        description="Compile each Triton config (on CPU workers) and validate and time it, and each variant cubin, "
                    "against the captured cubin, spread over the GPUs (one worker each, a resident replay server "
                    "per worker). Exit status 0 when some variant passes, 1 when none does, 3 when none could run. "
                    "See docs/cluster.md.",
    )
    p.add_argument("path", type=Path, metavar="DIR", help="the reproducer")
    p.add_argument("--configs", type=Path, metavar="F",
                   help="Triton configs, one --config value per line (num_warps=4,num_stages=3) or a JSON list")
    p.add_argument("--config", action="append", default=[], metavar="C", help="one more config (repeatable)")
    p.add_argument("--autotune", action="store_true", help="also every config the app's autotuner weighed")
    p.add_argument("--variants", type=Path, nargs="+", default=[], metavar="CUBIN", help="variant cubins to sweep")
    p.add_argument("--junit", type=Path, metavar="F", help="write a JUnit XML report to F")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    fanout_args.add(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if args.variants and (args.configs or args.config or args.autotune):
        raise UsageError("--variants does not go with --configs, --config or --autotune: a sweep is of Triton "
                         "configs or of variant cubins, not both",
                         "run one `kerncap sweep` for the configs and another for the cubins")
    configs = list(api.load_sweep_configs(args.configs)) if args.configs else []
    configs += args.config
    if args.autotune:
        configs += [c.config for c in api.autotune_configs(args.path).candidates]
    if not configs and not args.variants:
        raise UsageError("nothing to sweep", "pass --configs FILE, --config C, --autotune or --variants CUBIN...")

    def progress(entry: api.SweepEntry) -> None:
        print(f"kerncap sweep: {entry.status:<5} {entry.label}", file=sys.stderr, flush=True)

    with fanout_args.fanout(args, compiles=bool(configs)) as fan:
        report = api.sweep(args.path, fan, configs=configs, variants=args.variants,
                           options=fanout_args.options(args), ship=args.ship, on_entry=progress)
    if args.junit:
        api.write_junit(report, args.junit)
    print(json.dumps(report.to_dict(), indent=1) if args.json else api.format_sweep(report))
    return report.exit_status
