"""`kerncap info DIR [--json]`"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kerncap import api


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "info",
        help="summarise a reproducer",
        description="Show what a reproducer holds: kernel, launch, parameters, memory regions, globals, provenance.",
    )
    p.add_argument("path", type=Path, metavar="DIR", help="reproducer directory (or its capture/ directory)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    summary = api.info(args.path)
    print(json.dumps(summary, indent=1) if args.json else api.format_info(summary))
    return 0
