"""`kerncap` command line.

Each subcommand is a module of `kerncap.commands` with `register(subparsers)`; its
handler returns the exit status. A new command is one module and one entry in
commands(); a verb on an open reproducer is one entry of kerncap.frontends.verbs.VERBS.
Handlers reach the engine only through `kerncap.api`.

Exit statuses (docs/cli.md): 0 success or pass, 1 a verdict of failure (validation
FAIL), 2 usage error, 3 could not run (damaged input, no GPU, environment). With
--json an error is also printed on stdout as {"error": {...}}.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import threading

from kerncap import __version__
from kerncap.core.fsio import clean_scratch
from kerncap.core.units import printable
from kerncap.errors import EXIT_CANNOT_RUN, EXIT_INTERRUPTED, EXIT_TERMINATED, KerncapError, Terminated, UsageError

def commands() -> tuple:
    """Every command, in the order of `kerncap --help`: a module, or a verb on an open
    reproducer (kerncap.frontends.verbs, rendered by kerncap.commands.verb), each with
    `register(subparsers)` (imported here, when the parser is built: `kerncap tui`'s first
    frame waits for nothing else)."""
    from kerncap.commands import (build, check, dump, extract, fuse, info, mcp, pack, profile, prune, recompile,
                                  replay, sources, store, sweep, tui, unpack, validate, verb)
    from kerncap.commands import list as list_command

    return (profile, extract, *verb.commands(), replay, validate, dump, recompile, fuse, build, sources, info,
            list_command, pack, unpack, prune, store, tui, check, sweep, mcp)


def command_name(command) -> str:
    """A command's name: a verb's own, or its module's last part."""
    return getattr(command, "name", None) or command.__name__.rpartition(".")[2]

class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so that --json can report it."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message}", f"see `{self.prog} --help`")


# A command registered by the module of another name.
ALIASES = {"hydrate": "store"}


@functools.cache
def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of `command` alone (None, or a name no module has: of every command),
    built once per process. Registering every command took a fifth of a second and
    imports the request records, hence much of the engine: `kerncap tui` (the workbench's
    first frame) and `kerncap info` need none of it."""
    parser = _Parser(
        prog="kerncap",
        description="Extract one CUDA kernel dispatch into a standalone, VA-faithful reproducer.",
        epilog="exit status: 0 success/pass, 1 verdict of failure (validation FAIL), 2 usage error, "
               "3 could not run (damaged input, no GPU, environment)",
    )
    parser.add_argument("--version", action="version", version=f"kerncap {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    wanted = ALIASES.get(command, command)
    chosen = [m for m in commands() if command_name(m) == wanted]
    for module in chosen or commands():  # an unknown command: argparse lists them all
        module.register(sub)
    return parser


def split_app_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split `kerncap extract K -- python app.py` at the first `--`."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


# Commands that own the terminal (the workbench) or speak a protocol on stdio (MCP): their
# stream is not text for a person and is not escaped here; the workbench escapes what it
# draws itself, with the same printable (kerncap_tui.terminal).
RAW_OUTPUT = {"tui", "mcp"}
EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for `cmd | head` when cmd dies of it


class _Printable:
    """A text stream that escapes control characters (kerncap.core.units.printable): every
    string a reproducer holds reaches the terminal as text, never as an escape sequence.
    Everything else (buffer, fileno, isatty, flush) is the stream's own."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(printable(text))
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, app_cmd = split_app_command(argv)
    as_json = "--json" in own
    command = next((a for a in own if not a.startswith("-")), None)
    if sys.stdout is None or sys.stderr is None:  # started with `>&-` or `2>&-`
        closed = _closed_streams(command)
        if closed is not None:
            return closed
    saved = sys.stdout, sys.stderr
    if command not in RAW_OUTPUT:
        sys.stdout, sys.stderr = _Printable(sys.stdout), _Printable(sys.stderr)
    _RECEIVED.clear()
    previous = handle_sigterm()
    previous_int = _handle_sigint()
    unraisable, sys.unraisablehook = sys.unraisablehook, _signal_in_a_callback
    try:
        status = _run(own, app_cmd, command, as_json)
        sys.stdout.flush()  # now, not at the interpreter's exit, where a closed pipe cannot be handled
        return status
    except BrokenPipeError:
        return _pipe_closed()
    finally:
        sys.unraisablehook = unraisable
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if previous_int is not None:
            signal.signal(signal.SIGINT, previous_int)
        sys.stdout, sys.stderr = saved


def _signal_in_a_callback(unraisable) -> None:
    """A Ctrl-C or SIGTERM that lands inside a callback the interpreter cannot raise from
    (importlib's module-lock weakref callback, in an import the engine makes on first use)
    was printed as "Exception ignored in … Traceback" and the command went on. It is sent
    again instead, from a thread a moment later (sent from here it would raise inside this
    hook, ignored again): it raises where it can, and the command ends with its one line."""
    exc = unraisable.exc_value
    if isinstance(exc, Terminated):
        signal.signal(signal.SIGTERM, _terminate)  # _terminate had made the next SIGTERM fatal
        sig = signal.SIGTERM
    elif isinstance(exc, KeyboardInterrupt):
        sig = signal.SIGINT
    else:
        sys.__unraisablehook__(unraisable)
        return
    again = threading.Timer(0.02, os.kill, (os.getpid(), sig))
    again.daemon = True
    again.start()


# The signals that arrived during the command. C code can turn the exception a signal
# raises into its own: a SIGTERM inside numpy's first import (the engine imports it on
# first use) surfaced as numpy's ImportError ("PyCapsule_Import could not import module
# datetime") and a traceback (tests/test_adversarial.py's random interrupts).
_RECEIVED: list[int] = []


def _terminate(_signum, _frame) -> None:
    _RECEIVED.append(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Terminated()


def _interrupt(_signum, _frame) -> None:
    _RECEIVED.append(signal.SIGINT)
    raise KeyboardInterrupt()


def _handle_sigint():
    """Ctrl-C as Python's own handler answers it, but noted (`_RECEIVED`). The previous
    handler, or None when another one is installed (an embedding program's) or this is
    not the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        previous = signal.getsignal(signal.SIGINT)
        if previous is not signal.default_int_handler:
            return None
        signal.signal(signal.SIGINT, _interrupt)
    except (ValueError, OSError):
        return None
    return previous


def handle_sigterm():
    """SIGTERM ends a command as Ctrl-C does (Terminated is a KeyboardInterrupt): temp
    files and scratch directories removed, child processes stopped, one line, status 143.
    The previous handler (to restore), or None when it was not installed (not the main
    thread, or an embedding program handles SIGTERM itself). The workbench and the MCP
    server install their own while they run."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        previous = signal.getsignal(signal.SIGTERM)
        if previous not in (signal.SIG_DFL, None):
            return None
        signal.signal(signal.SIGTERM, _terminate)
    except (ValueError, OSError):
        return None
    return previous


def _remove_leftovers() -> None:
    """What killed kerncap processes (SIGKILL, a crash) left in kerncap's scratch
    directory: removed, and named."""
    for left in clean_scratch():
        print(f"kerncap: {left.removed()}", file=sys.stderr)


def _run(own: list[str], app_cmd: list[str], command: str | None, as_json: bool) -> int:
    try:
        args = build_parser(command).parse_args(own)
        args.app_command = app_cmd
        command = args.command
        _remove_leftovers()
        return int(args.handler(args) or 0)
    except KerncapError as exc:
        return report(exc, command, as_json)
    except BrokenPipeError:  # `kerncap info DIR | head -1`: the reader is done; so are we, quietly
        return _pipe_closed()
    except OSError as exc:  # a disk, a permission, a read-only mount: one message, no traceback
        where = f" ({exc.filename})" if exc.filename else ""
        return report(KerncapError(f"{exc.strerror or exc}{where}",
                                   "check free space and permissions of that location, then run the command again"),
                      command, as_json)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated)
        return _stopped(command, isinstance(exc, Terminated))
    except Exception:
        if not _RECEIVED:
            raise
        # what the signal's exception became inside C code (an ImportError of numpy's)
        return _stopped(command, _RECEIVED[-1] == signal.SIGTERM)


def _stopped(command: str | None, terminated: bool) -> int:
    what = "terminated (SIGTERM)" if terminated else "interrupted"
    print(f"kerncap {command or ''}: {what}".replace("  ", " "), file=sys.stderr)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


def _closed_streams(command: str | None) -> int | None:
    """A closed stderr becomes /dev/null (on fd 2, so that no file kerncap opens, nor an
    app it starts, gets that number). A closed stdout is refused (status 3): what the
    command prints would be lost, and an app started would write into whatever file
    kerncap opened on fd 1. None when the command can go on."""
    if sys.stderr is None:
        null = os.open(os.devnull, os.O_WRONLY)
        if null != 2:
            os.dup2(null, 2)
            os.close(null)
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115  (the process's own stream)
    if sys.stdout is not None:
        return None
    return report(KerncapError("standard output is closed (`>&-`): kerncap has nowhere to print what it says",
                               "give it an output: `>/dev/null` to discard it, or `>FILE`"), command, False)


def _pipe_closed() -> int:
    """End as a Unix tool does when its reader went away: no message. stdout is pointed
    at /dev/null so that the interpreter's last flush at exit does not complain either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
    return EXIT_PIPE_CLOSED


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
