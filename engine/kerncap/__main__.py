"""`python -m kerncap` and the `kerncap` command (pyproject's script entry point).

Importing the command line takes a moment (the engine's modules, zstandard, …); a
Ctrl-C in that moment ends with "interrupted" and status 130, as one during a command
does, not with a traceback of the import."""

import signal
import sys


def _hold_sigint() -> bool:
    """Hold SIGINT while the command line imports: a KeyboardInterrupt raised inside the
    import machinery's own callbacks is "ignored" by the interpreter, which prints its
    traceback and goes on (seen in tests/test_adversarial.py's random interrupts). Held,
    it arrives once the import is done, where run() handles it."""
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    except (AttributeError, OSError, ValueError):  # no pthread_sigmask here, or not the main thread
        return False
    return True


def run() -> int:
    held = _hold_sigint()
    try:
        from kerncap.cli import main

        if held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a Ctrl-C held meanwhile arrives now
        return main()
    except KeyboardInterrupt:
        print("kerncap: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(run())
