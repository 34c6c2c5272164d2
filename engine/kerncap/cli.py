"""`kerncap` command line.

Each subcommand is a module of `kerncap.commands` with `register(subparsers)`; its
handler returns the exit status. A new command is one module and one entry in
COMMANDS. Handlers reach the engine only through `kerncap.api`.

Exit statuses (docs/cli.md): 0 success or pass, 1 a verdict of failure (validation
FAIL), 2 usage error, 3 could not run (damaged input, no GPU, environment). With
--json an error is also printed on stdout as {"error": {...}}.
"""

from __future__ import annotations

import argparse
import json
import sys

from kerncap import __version__
from kerncap.commands import (
    build,
    check,
    dump,
    extract,
    info,
    mcp,
    pack,
    profile,
    prune,
    recompile,
    replay,
    sources,
    store,
    sweep,
    tui,
    unpack,
    validate,
)
from kerncap.commands import list as list_command
from kerncap.errors import EXIT_CANNOT_RUN, KerncapError, UsageError

# The order of `kerncap --help`.
COMMANDS = (profile, extract, replay, validate, dump, recompile, build, sources, info, list_command, pack, unpack,
            prune, store, tui, check, sweep, mcp)


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so that --json can report it."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message}", f"see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kerncap",
        description="Extract one CUDA kernel dispatch into a standalone, VA-faithful reproducer.",
        epilog="exit status: 0 success/pass, 1 verdict of failure (validation FAIL), 2 usage error, "
               "3 could not run (damaged input, no GPU, environment)",
    )
    parser.add_argument("--version", action="version", version=f"kerncap {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    for module in COMMANDS:
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
    as_json = "--json" in own
    command = next((a for a in own if not a.startswith("-")), None)
    try:
        args = build_parser().parse_args(own)
        args.app_command = app_cmd
        command = args.command
        return int(args.handler(args) or 0)
    except KerncapError as exc:
        return report(exc, command, as_json)
    except OSError as exc:  # a disk, a permission, a read-only mount: one message, no traceback
        where = f" ({exc.filename})" if exc.filename else ""
        return report(KerncapError(f"{exc.strerror or exc}{where}",
                                   "check free space and permissions of that location, then run the command again"),
                      command, as_json)
    except KeyboardInterrupt:
        print(f"kerncap {command or ''}: interrupted".replace("  ", " "), file=sys.stderr)
        return 130


def report(exc: KerncapError, command: str | None, as_json: bool) -> int:
    """Print an error (stderr; with --json also as JSON on stdout) and return its exit status."""
    status = exc.exit_code if isinstance(exc.exit_code, int) else EXIT_CANNOT_RUN
    name = f"kerncap {command}" if command else "kerncap"
    print(f"{name}: error: {exc.message}", file=sys.stderr)
    if exc.hint:
        print(f"  hint: {exc.hint}", file=sys.stderr)
    if as_json:
        print(json.dumps(exc.to_json(), indent=1))
    return status
