"""`kerncap` command line. Each subcommand lives in `kerncap.commands.<name>` and
exposes `register(subparsers)`; its handler returns the process exit status."""

from __future__ import annotations

import argparse
import importlib
import sys

from kerncap import __version__
from kerncap.errors import KerncapError

COMMANDS = ["profile", "extract", "replay", "validate", "recompile", "sources", "info", "list", "pack", "unpack",
            "prune", "store", "tui"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kerncap",
        description="Extract one CUDA kernel dispatch into a standalone, VA-faithful reproducer.",
    )
    parser.add_argument("--version", action="version", version=f"kerncap {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"kerncap.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"kerncap.commands.{name}":
                continue  # command not implemented in this build
            raise
        module.register(sub)
    return parser


def split_app_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split `kerncap extract K -- python app.py` at the first `--`."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, app_cmd = split_app_command(argv)
    parser = build_parser()
    args = parser.parse_args(own)
    args.app_command = app_cmd
    try:
        return int(args.handler(args) or 0)
    except KerncapError as exc:
        print(f"kerncap {args.command}: error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"kerncap {args.command}: interrupted", file=sys.stderr)
        return 130
