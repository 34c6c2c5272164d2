"""`kerncap tui [DIR]`: the workbench. The TUI package is imported only when this
command runs, so the engine never depends on Textual."""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("tui", help="open the workbench (Textual TUI); no DIR: the bundled demo")
    p.add_argument("dir", nargs="?", help="reproducer (or workspace holding profile.json)")
    p.add_argument("--no-mouse", action="store_true", help="do not capture the mouse (plain terminal selection over SSH)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kerncap.errors import KerncapError

    try:
        from kerncap_tui.app import run as run_tui
    except ImportError as exc:
        raise KerncapError(f"the workbench is not installed ({exc})", "pip install 'kerncap' with its TUI dependencies (textual, watchdog, gitpython)") from None
    return run_tui(Path(args.dir) if args.dir else None, no_mouse=args.no_mouse)
