"""`python -m kerncap` and the `kerncap` command (pyproject's script entry point).

Importing the command line takes a moment (the engine's modules, zstandard, …); a
Ctrl-C in that moment ends with "interrupted" and status 130, as one during a command
does, not with a traceback of the import."""

import sys


def run() -> int:
    try:
        from kerncap.cli import main
    except KeyboardInterrupt:
        print("kerncap: interrupted", file=sys.stderr)
        return 130
    return main()


if __name__ == "__main__":
    raise SystemExit(run())
