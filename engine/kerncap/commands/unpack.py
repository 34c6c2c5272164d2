"""`kerncap unpack FILE [-o DIR] [--json]`"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kerncap import api
from kerncap.commands.pack import size_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "unpack",
        help="restore a reproducer from a .kcap file",
        description="Restore the reproducer directory held by a .kcap file, checking every entry's hash.",
    )
    p.add_argument("path", type=Path, metavar="FILE", help="pack file written by `kerncap pack`")
    p.add_argument("-o", "--output", type=Path, metavar="DIR", help="new (or empty) directory (default: FILE without .kcap)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    r = api.unpack(args.path, args.output)
    if args.json:
        print(json.dumps(r.as_dict(), indent=1))
        return 0
    for note in r.notes:
        print(f"kerncap unpack: warning: {note}", file=sys.stderr)
    print(f"unpacked {args.path} -> {r.path}: {r.files} files, {r.blobs} chunks")
    print(f"  {size_line(r)}")
    return 0
