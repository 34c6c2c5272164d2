"""`kerncap list [DIR…] [--workspace DIR] [--json]`"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kerncap import api
from kerncap.core.units import cut_end, human_bytes, text_table
from kerncap.errors import EXIT_CANNOT_RUN, EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "list",
        help="list the captures of a workspace",
        description="List the reproducers under WORKSPACE/reproducers/ and under each DIR given: "
        "kernel, command, date, sizes and the baseline's validation status. A reproducer that cannot be read, "
        "or whose payloads are missing or damaged, is named on its row; exit status 3 then.",
    )
    p.add_argument("dirs", type=Path, nargs="*", metavar="DIR", help="further reproducers, or directories of them")
    p.add_argument("--workspace", type=Path, default=api.DEFAULT_WORKSPACE, metavar="DIR",
                   help=f"workspace directory (default: ./{api.DEFAULT_WORKSPACE})")
    p.add_argument("--verify", action="store_true", help="also read every payload and check its hash")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(handler=handle)


def _size(n: int | None) -> str:
    return "?" if n is None else human_bytes(n)


def format_list(rows: list[dict]) -> str:
    table = [
        [cut_end(r["kernel"], 48) if not r["error"] else "(unreadable)", cut_end(r["command"], 40), (r["time"] or "?")[:16].replace("T", " "),
         _size(r["logical"]), "DAMAGED" if r.get("payloads") not in (None, "ok")
         else "in store" if r.get("in_store") else _size(r["stored"]), r["validation"] or "-",
         r["path"]]
        for r in rows
    ]
    out = text_table(["kernel", "command", "captured", "logical", "stored", "valid", "path"], table, right={3, 4})
    out += [f"  ! {r['path']}: {r['error']}" for r in rows if r["error"]]
    out += [f"  ! {r['path']}: payloads: {r['payloads']}" for r in rows if r.get("payloads") not in (None, "ok")]
    out += [f"  ! {r['path']}: {p}" for r in rows for p in r.get("problems") or ()]
    return "\n".join(out)


def handle(args: argparse.Namespace) -> int:
    rows = api.list_reproducers(args.workspace, args.dirs, verify=args.verify)
    if args.json:
        print(json.dumps(rows, indent=1))
    elif not rows:
        print(f"no reproducers under {args.workspace / 'reproducers'}"
              + (" or " + ", ".join(map(str, args.dirs)) if args.dirs else "")
              + "; `kerncap extract KERNEL -- CMD` makes one")
    else:
        print(format_list(rows))
    damaged = any(r["error"] or r.get("payloads") not in (None, "ok") or r.get("problems") for r in rows)
    return EXIT_CANNOT_RUN if damaged else EXIT_OK
