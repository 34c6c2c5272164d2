"""`python -m kerncap` and the `kerncap` command (pyproject's script entry point).

Importing the command line takes a moment (the engine's modules, zstandard, …); a
Ctrl-C in that moment ends with "interrupted" and status 130, as one during a command
does, not with a traceback of the import; a SIGTERM with "terminated (SIGTERM)" and
143. Both are held by the module's very first statement, through the interpreter's
built-in `_signal` (always loaded: importing `signal` itself would be a first import
during which a Ctrl-C is a traceback)."""

import _signal

_SIGNALS = {_signal.SIGINT, _signal.SIGTERM}

try:  # first: the window before it is only the interpreter's start and kerncap/__init__.py
    _signal.pthread_sigmask(_signal.SIG_BLOCK, _SIGNALS)
    _HELD = True
except (AttributeError, OSError, ValueError):  # no pthread_sigmask here, or not the main thread
    _HELD = False

import sys  # noqa: E402  (after the hold, on purpose)


def _release() -> None:
    """Let a held Ctrl-C or SIGTERM arrive (here, where run() handles it)."""
    global _HELD
    if _HELD:
        _HELD = False
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, _SIGNALS)


def run() -> int:
    """Hold SIGINT while the command line imports: a KeyboardInterrupt raised inside the
    import machinery's own callbacks is "ignored" by the interpreter, which prints its
    traceback and goes on (seen in tests/test_adversarial.py's random interrupts). Held,
    it arrives once the import is done."""
    try:
        try:
            from kerncap.cli import handle_sigterm, main

            handle_sigterm()  # a SIGTERM held meanwhile ends the command as it would later on
        finally:
            _release()  # a Ctrl-C held meanwhile arrives now (also when the import failed)
        return main()
    except KeyboardInterrupt as exc:  # also Terminated (SIGTERM), a KeyboardInterrupt
        if type(exc).__name__ == "Terminated":
            print("kerncap: terminated (SIGTERM)", file=sys.stderr)
            return 143
        print("kerncap: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(run())
