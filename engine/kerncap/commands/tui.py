"""`kerncap tui [DIR]`: the workbench (the same as `kerncap-tui [DIR]`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from kerncap import api
from kerncap.frontends import render


def register(sub) -> None:
    p = sub.add_parser("tui", help="open the workbench (Textual TUI); no DIR: the bundled demo")
    p.add_argument("dir", nargs="?", help="reproducer (or workspace holding profile.json)")
    p.add_argument("--no-mouse", action="store_true", help="do not capture the mouse (plain terminal selection over SSH)")
    # kerncap_tui.terminal.GLYPH_CHOICES (not imported here: Textual loads only for the workbench)
    p.add_argument("--glyphs", choices=("auto", "unicode", "ascii"), default=None,
                   help="ascii for a terminal without Unicode (default: $KERNCAP_GLYPHS, else from TERM and the locale)")
    render.add(p, api.options.TIMER)  # what times the workbench's builds and its baseline
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: Textual is loaded only when the workbench opens, not for every command.
    from kerncap_tui.app import run as run_tui

    return run_tui(Path(args.dir) if args.dir else None, no_mouse=args.no_mouse, prog="kerncap tui", glyphs=args.glyphs,
                   timer=args.timer)
