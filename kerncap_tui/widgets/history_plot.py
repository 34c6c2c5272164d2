"""The timing history as a plot: one column per timed variant (median as a point, a line
down to its fastest run), the baseline's median as a dashed rule, validation by glyph
and colour. Plain Unicode text (no plotting dependency), so it renders over SSH, with
NO_COLOR and in SVG snapshots alike. Shown once there are MIN_VARIANTS timed variants."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

MIN_VARIANTS = 3
Y_LABEL = 10  # width of the axis labels
POINTS = {"pass": ("●", "green"), "fail": ("✗", "bold red"), "error": ("!", "yellow"), "skipped": ("○", "dim")}


def _us(ms: float) -> str:
    us = ms * 1e3
    return f"{us:,.1f} µs" if us < 10_000 else f"{ms:,.2f} ms"


def plot_lines(variants: list, width: int, height: int) -> list[Text]:
    """The plot as `height` lines of at most `width` cells (variants: history.Variant)."""
    timed = [v for v in variants if v.median_ms]
    rows = max(height - 2, 3)
    cols = max(width - Y_LABEL - 1, 8)
    step = max(2, min(6, cols // max(len(timed), 1)))
    shown = timed[-(cols // step):] if len(timed) * step > cols else timed
    values = [v.median_ms for v in shown] + [v.min_ms for v in shown if v.min_ms]
    base = next((v for v in variants if v.id == 0 and v.median_ms), None)
    if base is not None:
        values.append(base.median_ms)
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or hi * 0.05 or 1e-6
    lo, hi = max(lo - pad, 0.0), hi + pad

    def row_of(ms: float) -> int:  # 0 is the top row
        return min(rows - 1, max(0, round((hi - ms) / (hi - lo) * (rows - 1))))

    grid = [[(" ", "")] * cols for _ in range(rows)]
    if base is not None:
        r = row_of(base.median_ms)
        grid[r] = [("┄", "magenta")] * cols
    for i, v in enumerate(shown):
        x = i * step + step // 2
        top = row_of(v.median_ms)
        if v.min_ms:
            for r in range(top + 1, row_of(v.min_ms) + 1):
                grid[r][x] = ("│", "dim")
        glyph, style = POINTS.get(v.validation, ("●", ""))
        grid[top][x] = (glyph, style)
    labels = {0: _us(hi), rows // 2: _us((hi + lo) / 2), rows - 1: _us(lo)}
    out = []
    for r in range(rows):
        line = Text(labels.get(r, "").rjust(Y_LABEL - 1)[: Y_LABEL - 1] + " ┤", style="dim")
        for ch, style in grid[r]:
            line.append(ch, style=style)
        out.append(line)
    axis = Text(" " * Y_LABEL + "└" + "─" * cols, style="dim")
    xs = [" "] * (cols + Y_LABEL + 1)
    for i, v in reversed(list(enumerate(shown))):  # newest first: they keep their label
        name = "b" if v.id == 0 else str(v.id)
        x = Y_LABEL + 1 + i * step + step // 2 - (len(name) - 1) // 2
        if x + len(name) <= len(xs) and all(c == " " for c in xs[max(x - 1, 0):x + len(name) + 1]):
            xs[x:x + len(name)] = list(name)
    out += [axis, Text("".join(xs).rstrip(), style="dim")]
    return out[:height] if height >= 5 else out


class HistoryPlot(Widget):
    """Median per variant against the baseline (hidden below MIN_VARIANTS timed variants)."""

    DEFAULT_CSS = "HistoryPlot { height: 10; }"

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.variants: list = []

    def show(self, variants: list) -> None:
        self.variants = list(variants)
        self.display = sum(1 for v in self.variants if v.median_ms) >= MIN_VARIANTS
        self.refresh()

    def render(self) -> Text:
        if sum(1 for v in self.variants if v.median_ms) < MIN_VARIANTS:
            return Text("")
        title = Text("median (│ to fastest) · ┄ baseline · ● pass ✗ fail"[: max(self.size.width, 1)], style="dim")
        lines = [title, *plot_lines(self.variants, self.size.width, max(self.size.height - 1, 5))]
        return Text("\n").join(lines)
