"""Timing bars from Unicode blocks (wide enough to compare variants at 80 columns, plain
text so they survive NO_COLOR and snapshot tests) and the speedup cells of History (the
numbers themselves: kerncap.core.units)."""

from __future__ import annotations

from rich.text import Text

from kerncap.core.units import interval_text, speedup_text

_EIGHTHS = " ▏▎▍▌▋▊▉"


def bar(value: float | None, scale: float, width: int) -> str:
    """A left-aligned bar of `width` cells for value/scale (clamped to [0, 1])."""
    if value is None or scale <= 0:
        return " " * width
    eighths = round(max(0.0, min(1.0, value / scale)) * width * 8)
    full, rest = divmod(eighths, 8)
    text = "█" * full + (_EIGHTHS[rest] if rest else "")
    return text.ljust(width)


def speedup_cells(history, v) -> tuple[Text, Text]:
    """The speedup and interval cells: a number only when the interval excludes 1.0,
    "within noise" otherwise; records without an interval show the bare ratio dimmed."""
    if v.id == 0:
        return Text("—", style="dim"), Text("")
    s = history.speedup(v)
    if s is None:
        return Text("—", style="dim"), Text("")
    if not history.has_interval(v):
        return Text(f"({speedup_text(s)})", style="dim"), Text("no interval", style="dim")
    span = interval_text(v.speedup_low, v.speedup_high)
    if not v.significant:
        return Text("within noise", style="dim"), Text(span, style="dim")
    return Text(speedup_text(s), style="bold green" if v.speedup_low > 1.0 else "bold red"), Text(span)
