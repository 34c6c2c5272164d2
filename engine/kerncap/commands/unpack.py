"""`kerncap unpack FILE [-o DIR] [--max-bytes SIZE] [--max-ratio R] [--json]`"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kerncap import api
from kerncap.commands.arguments import byte_size, positive_float
from kerncap.commands.pack import size_line


def register(sub: argparse._SubParsersAction) -> None:
    defaults = api.UnpackLimits()
    p = sub.add_parser(
        "unpack",
        help="restore a reproducer from a .kcap file",
        description="Restore the reproducer directory held by a .kcap file, checking every entry's hash. "
        "Only plain files and directories are made (no links, no set-ID or world-writable bits), and a pack "
        "that declares more than the limits, or chunks its manifest does not use, is refused before anything "
        "is written.",
    )
    p.add_argument("path", type=Path, metavar="FILE", help="pack file written by `kerncap pack`")
    p.add_argument("-o", "--output", metavar="DIR", help="new (or empty) directory (default: FILE without .kcap)")
    p.add_argument("--max-bytes", type=byte_size, default=defaults.max_bytes, metavar="SIZE",
                   help="refuse a pack that unpacks to more than SIZE (default: 1T)")
    p.add_argument("--max-ratio", type=positive_float, default=defaults.max_ratio, metavar="R",
                   help=f"refuse a pack that unpacks to more than R times its own size, past "
                        f"{defaults.free_bytes >> 30} GiB (default: {defaults.max_ratio:g})")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    limits = api.UnpackLimits(max_bytes=args.max_bytes, max_ratio=args.max_ratio)
    r = api.unpack(args.path, args.output, limits=limits)
    if args.json:
        print(json.dumps(r.as_dict(), indent=1))
        return 0
    for note in r.notes:
        print(f"kerncap unpack: warning: {note}", file=sys.stderr)
    print(f"unpacked {args.path} -> {r.path}: {r.files} files, {r.blobs} chunks")
    print(f"  {size_line(r)}")
    return 0
