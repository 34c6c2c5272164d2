"""`kerncap prune DIR [--no-validate [-o OUT]] [--device D] [--json]`"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kerncap import api
from kerncap.commands.arguments import non_negative_int
from kerncap.errors import UsageError

SHOWN_REASONS = 20


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prune",
        help="shrink a reproducer to the memory its kernel (or sequence) can reach, if replay proves it",
        description="Keep only the regions reachable from the kernel's arguments by following pointers in the "
                    "captured memory (a sequence: from every launch's arguments and every copy and fill of the "
                    "window, following pointers before and after it). The pruned reproducer replaces DIR only "
                    "if replaying it validates byte-exact against the captured post-state (needs the GPU); "
                    "otherwise DIR stays as it is and the reason is printed and recorded in DIR/reproducer.json.",
        epilog="without a GPU: kerncap prune DIR --no-validate writes an unvalidated DIR-pruned next to DIR",
    )
    p.add_argument("path", type=Path, metavar="DIR", help="reproducer directory")
    p.add_argument("--no-validate", action="store_true",
                   help="no GPU here: write the pruned reproducer to DIR-pruned (or -o) without replaying it; "
                        "DIR is left untouched")
    p.add_argument("-o", "--output", type=Path, metavar="OUT", help="with --no-validate: where to write it")
    p.add_argument("--device", type=non_negative_int, default=0, help="GPU ordinal for the validation (0)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if args.output is not None and not args.no_validate:
        raise UsageError("--output needs --no-validate",
                           "a validated prune replaces DIR in place; pass --no-validate to write a copy elsewhere")
    report = api.prune(args.path, validate=not args.no_validate, output=args.output, device=args.device)
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
        return 0
    print(report.summary())
    if report.by_reason_text():
        print(report.by_reason_text())
    if report.kept == "pruned":
        reasons = sorted(report.reasons.items())
        for rid, why in reasons[:SHOWN_REASONS]:
            print(f"  region {rid:<6} {why}")
        if len(reasons) > SHOWN_REASONS:
            print(f"  … {len(reasons) - SHOWN_REASONS} more (kerncap info {report.output} lists them all)")
    for note in report.notes:
        print(f"note: {note}")
    return 0
