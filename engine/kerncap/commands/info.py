"""`kerncap info DIR [--json]`"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kerncap import api
from kerncap.errors import EXIT_CANNOT_RUN, EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "info",
        help="summarise a reproducer",
        description="Show what a reproducer holds: kernel, launch, parameters, memory regions, globals, provenance, "
        "and whether its payloads are all there. Exit status 3 when some are missing or damaged.",
    )
    p.add_argument("path", type=Path, metavar="DIR",
                   help="reproducer directory (or its capture/ directory), or a reproducer set")
    p.add_argument("--verify", action="store_true", help="also read every payload and check its hash")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    summary = api.info(args.path, verify=args.verify)  # a set's SetInfo, or a reproducer's
    print(json.dumps(summary, indent=1) if args.json else summary.text())
    return EXIT_OK if summary.payloads_ok else EXIT_CANNOT_RUN  # damaged input
