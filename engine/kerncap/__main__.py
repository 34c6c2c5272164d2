"""`python -m kerncap` and the `kerncap` command (pyproject's script entry point).

Importing the command line takes a moment (the engine's modules, zstandard, …); a
Ctrl-C in that moment ends with "interrupted" and status 130, as one during a command
does, not with a traceback of the import. SIGINT is held by the module's very first
statement, through the interpreter's built-in `_signal` (always loaded: importing
`signal` itself would be a first import during which a Ctrl-C is a traceback)."""

import _signal

try:  # first: the window before it is only the interpreter's start and kerncap/__init__.py
    _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGINT})
    _HELD = True
except (AttributeError, OSError, ValueError):  # no pthread_sigmask here, or not the main thread
    _HELD = False

import sys  # noqa: E402  (after the hold, on purpose)


def _release() -> None:
    """Let a held Ctrl-C arrive (here, where run() handles it)."""
    global _HELD
    if _HELD:
        _HELD = False
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {_signal.SIGINT})


def run() -> int:
    """Hold SIGINT while the command line imports: a KeyboardInterrupt raised inside the
    import machinery's own callbacks is "ignored" by the interpreter, which prints its
    traceback and goes on (seen in tests/test_adversarial.py's random interrupts). Held,
    it arrives once the import is done."""
    try:
        try:
            from kerncap.cli import main
        finally:
            _release()  # a Ctrl-C held meanwhile arrives now (also when the import failed)
        return main()
    except KeyboardInterrupt:
        print("kerncap: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(run())
