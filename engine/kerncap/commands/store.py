"""`kerncap store DIR… [--store S] [--json]` and `kerncap hydrate DIR… [--json]`"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kerncap import api
from kerncap.core.units import human_bytes


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "store",
        help="move reproducers' payloads into the workspace's shared chunk store",
        description="Add every chunk of each reproducer to the content-addressed, zstd-compressed store "
        "that all captures of the workspace share (a chunk another capture already stored costs nothing), "
        "then remove the reproducer's own blob files. info, list, prune and pack read the chunks from the "
        "store; replay writes them back first (`kerncap hydrate` does it by hand).",
    )
    p.add_argument("paths", type=Path, nargs="+", metavar="DIR", help="reproducer directories")
    p.add_argument("--store", type=Path, metavar="S",
                   help="store directory (default: WORKSPACE/store for a reproducer under WORKSPACE/reproducers/, "
                   "else ./kerncap-workspace/store)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(handler=handle_store)

    h = sub.add_parser(
        "hydrate",
        help="write back the blob files of reproducers whose payloads are in the store",
        description="Restore capture/blobs/ of each reproducer from the store named in its capture/stored.json "
        "(each chunk verified against its hash). Replay does this by itself.",
    )
    h.add_argument("paths", type=Path, nargs="+", metavar="DIR", help="reproducer directories")
    h.add_argument("--json", action="store_true", help="print the results as JSON")
    h.set_defaults(handler=handle_hydrate)


def handle_store(args: argparse.Namespace) -> int:
    results = [api.store(p, args.store) for p in args.paths]
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=1))
        return 0
    for r in results:
        print(f"stored {r.path} in {r.store}: {r.chunks} chunks, {r.objects_added} new "
              f"(+{human_bytes(r.bytes_added)} in the store), {human_bytes(r.bytes_freed)} freed in the reproducer")
    return 0


def handle_hydrate(args: argparse.Namespace) -> int:
    results = [api.hydrate(p) for p in args.paths]
    if args.json:
        print(json.dumps([{"path": str(r.path), "chunks": r.chunks, "bytes": r.bytes} for r in results], indent=1))
        return 0
    for r in results:
        print(f"hydrated {r.path}: {r.chunks} chunks, {human_bytes(r.bytes)} written" if r.chunks
              else f"{r.path}: every payload is already in place")
    return 0
