"""`kerncap check DIR… [--baseline F] [--threshold PCT] [--write-baseline F] [--junit F] [--json]`"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kerncap import api
from kerncap.commands import fanout_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="validate and time a corpus of reproducers (CI regression test)",
        description="Validate (byte-exact unless a tolerance is given) and time every reproducer under the DIRs and "
                    "its best recorded variant (the workbench's history.json), spread over the GPUs; --apply then runs each "
                    "best variant in its app. Exit status 0 "
                    "only if every case passes and, with --baseline, no median is more than --threshold percent "
                    "above the stored one; 1 a verdict failed; 3 a case could not run. See docs/ci.md.",
    )
    p.add_argument("dirs", type=Path, nargs="+", metavar="DIR", help="reproducers, or directories holding them")
    p.add_argument("--baseline", type=Path, metavar="F", help="stored medians to compare with (--write-baseline)")
    p.add_argument("--threshold", type=float, default=10.0, metavar="PCT",
                   help="a median this many percent above the baseline's is a regression (10)")
    p.add_argument("--write-baseline", type=Path, metavar="F", help="store this run's medians of passing cases in F")
    p.add_argument("--junit", type=Path, metavar="F", help="write a JUnit XML report to F")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--apply", action="store_true",
                   help="then run each reproducer's (and set's) best variant in the app it was captured from, on this "
                        "machine's GPU: --check over every launch, timed (docs/apply.md); needs --trust")
    p.add_argument("--apply-runs", type=int, default=api.options.ApplyRequest.runs, metavar="R",
                   help="with --apply: timed runs of the app each way, interleaved (0: no timing; %(default)s)")
    p.add_argument("--trust", action="store_true",
                   help="with --apply: run the commands the reproducers recorded (read them first: kerncap info DIR)")
    fanout_args.add(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    def progress(case: api.CheckCase) -> None:
        print(f"kerncap check: {case.status:<9} {case.key}", file=sys.stderr, flush=True)

    with fanout_args.fanout(args) as fan:
        report = api.check(args.dirs, fan, options=fanout_args.options(args), baseline=args.baseline,
                           threshold_pct=args.threshold, ship=args.ship, on_case=progress, apply=args.apply,
                           apply_runs=args.apply_runs, trust=args.trust)
    if args.junit:
        api.write_junit(report, args.junit)
    if args.write_baseline:
        api.write_check_baseline(report, args.write_baseline)
    print(json.dumps(report.to_dict(), indent=1) if args.json else api.format_check(report))
    return report.exit_status
