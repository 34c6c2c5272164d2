"""`kerncap pack DIR [-o FILE] [--force] [--json]`"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kerncap import api
from kerncap.core.units import human_bytes


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pack",
        help="write a reproducer into one compressed file",
        description="Write a reproducer (manifest, cubins, sources, history, each distinct chunk once) "
        "into one zstd-compressed .kcap file; `kerncap unpack` restores it.",
    )
    p.add_argument("path", type=Path, metavar="DIR", help="reproducer directory")
    p.add_argument("-o", "--output", metavar="FILE", help="pack file (default: DIR.kcap)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=handle)


def size_line(r: api.PackResult) -> str:
    return (f"{human_bytes(r.logical)} logical, {human_bytes(r.stored)} stored, {human_bytes(r.packed)} packed "
            f"({r.ratio:.1f}x smaller than the directory)")


def handle(args: argparse.Namespace) -> int:
    r = api.pack(args.path, args.output, force=args.force)
    if args.json:
        print(json.dumps(r.as_dict(), indent=1))
        return 0
    for note in r.notes:
        print(f"kerncap pack: warning: {note}", file=sys.stderr)
    print(f"packed {args.path} -> {r.path}: {r.files} files, {r.blobs} chunks")
    print(f"  {size_line(r)}")
    for item in r.left_out:
        print(f"  left out: {item}")
    return 0
