"""`kerncap info DIR [--json]`"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kerncap.info import format_summary, summarize


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "info",
        help="summarise a reproducer",
        description="Show what a reproducer holds: kernel, launch, parameters, memory regions, globals, provenance.",
    )
    p.add_argument("path", type=Path, metavar="DIR", help="reproducer directory (or its capture/ directory), or a set")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from kerncap.sets import ReproducerSet, is_set

    if is_set(args.path):
        from kerncap.set_report import format_set_info, summarize_set

        summary = summarize_set(ReproducerSet.open(args.path))
        print(json.dumps(summary, indent=1) if args.json else format_set_info(summary))
        return 0
    summary = summarize(args.path)
    print(json.dumps(summary, indent=1) if args.json else format_summary(summary))
    return 0
