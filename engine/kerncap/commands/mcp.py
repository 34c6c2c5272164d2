"""`kerncap mcp --root DIR… [--http HOST:PORT]`: the Model Context Protocol server."""

from __future__ import annotations

import argparse
from pathlib import Path

from kerncap import api
from kerncap.commands.arguments import positive_int
from kerncap.frontends import render


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mcp",
        help="serve kerncap's tools to agents over the Model Context Protocol",
        description="Run an MCP server (stdio by default; streamable HTTP with --http) whose tools profile and "
                    "extract apps, show reproducers, read and write their sources, recompile, validate, replay and "
                    "compare variants, each returning the CLI's --json data. Paths outside the --root directories "
                    "are refused. Needs the mcp extra: pip install 'kerncap[mcp]'. See docs/mcp.md.",
    )
    p.add_argument("--root", type=Path, action="append", required=True, metavar="DIR",
                   help="a directory of reproducers or a workspace the tools may use (repeatable; relative tool "
                        "paths are taken from the first)")
    p.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP on HOST:PORT instead of stdio")
    p.add_argument("--max-resident", type=positive_int, default=4, metavar="N",
                   help="resident replay servers kept open (one per reproducer, least recently used closed first; 4)")
    # the one replay timeout of every front end (it said "no limit" while the client killed at 300 s)
    render.add(p, api.options.REPLAY_TIMEOUT)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from kerncap.frontends import mcp_server  # the mcp SDK is an optional extra: imported when asked for

    if args.http:
        mcp_server.parse_http(args.http)  # a usage error before anything starts
    mcp_server.serve(args.root, http=args.http, max_resident=args.max_resident, replay_timeout=args.replay_timeout)
    return 0
