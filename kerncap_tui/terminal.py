"""What the workbench sends to the terminal: text from a reproducer made harmless, the
glyphs the terminal can show, the colours it can take.

Text. Every string that comes from a reproducer, a profile, a manifest, a file name or a
tool's output passes through `shown` / `plain` before a widget draws it: the CLI's own
filter (kerncap.core.units.printable), so an `ESC ]0;…BEL` in a kernel name reads as
`\\x1b]0;…` in the workbench exactly as in `kerncap info`, and a `[/b]` in it is text,
not Textual markup (which would end the workbench with a MarkupError). `ControlFilter`,
a line filter on everything drawn, drops any control character that still reaches a
line (a path not routed through `shown`): it never reaches the terminal stream.

Glyphs. A terminal without Unicode (TERM=linux, vt100, …, or a locale that is not UTF-8)
gets `PlainGlyphs`: every non-ASCII character drawn, ours and Textual's (borders, the
header's icon, the palette's magnifier), becomes ASCII of the same width.
`KERNCAP_GLYPHS=unicode|ascii` (or `kerncap tui --glyphs`) overrides the choice.

Colour. TERM=dumb gets the 16 standard colours: Textual would send 24-bit colour to a
terminal whose colour support it could not detect."""

from __future__ import annotations

import os
from collections.abc import Mapping

from rich.cells import cell_len
from rich.color import ColorSystem
from rich.segment import Segment
from rich.text import Text
from textual.filter import LineFilter

from kerncap.core.units import printable
from kerncap.errors import UsageError

GLYPHS_ENV = "KERNCAP_GLYPHS"
GLYPH_CHOICES = ("auto", "unicode", "ascii")
# Terminals that show no Unicode (or only a console font's few hundred glyphs: no emoji,
# no block elements beyond a handful).
PLAIN_TERMS = {"dumb", "linux", "vt52", "vt100", "vt102", "vt220", "vt320", "ansi", "cons25", "sun", "pcansi", "unknown"}


# -- text from a reproducer --------------------------------------------------------------------
def shown(text: object) -> str:
    """`text` as the workbench shows it: control characters escaped, as the CLI prints them."""
    return printable(str(text))


def one_line(text: object) -> str:
    """A name (kernel, file, region) in one row: newlines and tabs escaped too."""
    return printable(str(text), newlines=False)


def plain(text: object, style: str = "") -> Text:
    """A Label's, Static's or DataTable cell's content: escaped, and never read as markup."""
    return Text(shown(text), style=style)


def _drop_controls(text: str) -> str:
    if printable(text) == text:
        return text
    return "".join(ch for ch in text if printable(ch) == ch)


class _TextFilter(LineFilter):
    """Rewrites the text of every drawn segment (cell widths are kept: the strip keeps its length)."""

    def fix(self, text: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def apply(self, segments: list[Segment], background) -> list[Segment]:
        fixed = [self.fix(text) if not control else text for text, _, control in segments]
        if all(new is seg.text for new, seg in zip(fixed, segments)):
            return segments
        return [Segment(new, style, control) for new, (_, style, control) in zip(fixed, segments)]


class ControlFilter(_TextFilter):
    """Drops control characters from what is drawn: the last guard before the terminal
    stream (they are zero cells wide, so nothing moves)."""

    def fix(self, text: str) -> str:
        return _drop_controls(text)


# -- glyphs -------------------------------------------------------------------------------------
# One ASCII character per cell; the legends go through the same table, so "█ written"
# becomes "# written" beside the "#" cells it explains.
ASCII = {
    "█": "#", "▓": "%", "▒": ":", "░": ".", "▞": "/", "▤": "=", "▦": "+", "≈": "~",
    "▀": "^", "▄": "_", "▁": "_", "▂": "_", "▃": "-", "▅": "=", "▆": "=", "▇": "#",
    "▏": "|", "▎": "|", "▍": "|", "▌": "|", "▋": "|", "▊": "|", "▉": "|", "▐": "|", "▕": "|", "▔": "-",
    "─": "-", "━": "-", "┄": "-", "╌": "-", "╸": "-", "╺": "-", "╴": "-", "╶": "-", "│": "|", "┃": "|",
    "┆": "|", "╎": "|", "┌": "+", "┐": "+", "└": "+", "┘": "+", "├": "+", "┤": "+", "┬": "+", "┴": "+",
    "┼": "+", "┏": "+", "┓": "+", "┗": "+", "┛": "+", "╭": "+", "╮": "+", "╰": "+", "╯": "+", "═": "=",
    "║": "|", "╔": "+", "╗": "+", "╚": "+", "╝": "+",
    "▶": ">", "▸": ">", "◀": "<", "▲": "^", "▼": "v", "↑": "^", "↓": "v", "→": ">", "←": "<", "⏎": "<",
    "✓": "+", "✔": "+", "✗": "x", "✘": "x", "●": "o", "○": "o", "◆": "*", "⭘": "o", "•": "*",
    "·": ".", "…": "~", "—": "-", "–": "-", "−": "-", "×": "x", "µ": "u", "≥": ">", "≤": "<", "±": "~",
    "🔎": "/ ",
}


class PlainGlyphs(_TextFilter):
    """Every non-ASCII character drawn becomes ASCII of its width (unknown ones '?')."""

    def fix(self, text: str) -> str:
        if text.isascii():
            return text
        return "".join(ch if ch.isascii() else ASCII.get(ch) or "?" * cell_len(ch) for ch in text)


def _locale(environ: Mapping[str, str]) -> str:
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        if environ.get(name):
            return environ[name]
    return ""


def glyph_choice(choice: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """`choice` (--glyphs), else $KERNCAP_GLYPHS, else auto; a value that is none of
    GLYPH_CHOICES is a usage error naming them."""
    environ = os.environ if environ is None else environ
    value = (choice or environ.get(GLYPHS_ENV) or "auto").strip().lower()
    if value not in GLYPH_CHOICES:
        source = "--glyphs" if choice else GLYPHS_ENV
        raise UsageError(f"{source}={value!r} is not one of {', '.join(GLYPH_CHOICES)}",
                         f"e.g. {GLYPHS_ENV}=ascii for a terminal without Unicode")
    return value


def plain_glyphs(environ: Mapping[str, str] | None = None, choice: str | None = None) -> bool:
    """Whether to draw ASCII only: `choice` (--glyphs), else $KERNCAP_GLYPHS, else TERM
    and the locale (a locale that is set and names no UTF-8 has no Unicode; an unset one
    says nothing: Python reads it as UTF-8)."""
    environ = os.environ if environ is None else environ
    value = glyph_choice(choice, environ)
    if value != "auto":
        return value == "ascii"
    term = environ.get("TERM", "").lower()
    if term in PLAIN_TERMS or term.startswith("vt"):
        return True
    loc = _locale(environ).lower().replace("-", "")
    return bool(loc) and "utf8" not in loc


# -- colour --------------------------------------------------------------------------------------
def is_dumb(environ: Mapping[str, str] | None = None) -> bool:
    environ = os.environ if environ is None else environ
    return environ.get("TERM", "").lower() in ("dumb", "unknown")


def limit_colours(app, environ: Mapping[str, str] | None = None) -> None:
    """TERM=dumb: the 16 standard colours. Rich detects no colour system there and
    Textual renders a missing one as 24-bit; TEXTUAL_COLOR_SYSTEM still wins."""
    environ = os.environ if environ is None else environ
    if is_dumb(environ) and not environ.get("TEXTUAL_COLOR_SYSTEM"):
        app.console._color_system = ColorSystem.STANDARD
