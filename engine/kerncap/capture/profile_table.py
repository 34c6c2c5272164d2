"""The `kerncap profile` table: every number column always printed in full, the kernel
name fitted into what is left of the width (80 in a pipe) by core.units.fit_kernel_name.
`--wide` prints full names instead (and `--json` has them all)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence

from kerncap.capture.profile import ProfileResult
from kerncap.core.units import fit_kernel_name, format_dim

MIN_NAME = 12
NUMBER_COLUMNS = ("calls", "total ms", "%", "avg µs", "min µs", "max µs", "grid", "block")


def terminal_width(default: int = 80) -> int:
    """COLUMNS, else the terminal's width, else `default` (in a pipe)."""
    return shutil.get_terminal_size((default, 24)).columns


def format_table(result: ProfileResult, *, top: int = 20, width: int | None = None, wide: bool = False) -> list[str]:
    """The table's lines; none is longer than `width` unless the numbers alone are."""
    width = terminal_width() if width is None else width
    shown = result.kernels if top <= 0 else result.kernels[:top]
    rows = [
        [str(rank), f"{k.calls:,}", f"{k.total_ns / 1e6:,.3f}", f"{k.percent:.1f}", f"{k.avg_ns / 1e3:,.2f}",
         f"{k.min_ns / 1e3:,.2f}", f"{k.max_ns / 1e3:,.2f}", format_dim(k.grid), format_dim(k.block)]
        for rank, k in enumerate(shown, 1)
    ]
    heads = ["#", *NUMBER_COLUMNS]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)]
    # "#", two spaces, the name, two spaces, then number columns one space apart.
    numbers = sum(widths[1:]) + len(widths) - 2
    room = max(MIN_NAME, width - widths[0] - 4 - numbers)
    names = [k.display_name if wide else fit_kernel_name(k.display_name, room) for k in shown]
    name_width = max([len("kernel"), *map(len, names)])

    def line(first: str, name: str, cells: Sequence[str]) -> str:
        nums = " ".join(c.rjust(w) for c, w in zip(cells, widths[1:]))
        return f"{first.rjust(widths[0])}  {name.ljust(name_width)}  {nums}".rstrip()

    out = [line("#", "kernel", NUMBER_COLUMNS)]
    out += [line(r[0], n, r[1:]) for r, n in zip(rows, names)]
    return out


def summary_line(result: ProfileResult, shown: int) -> str:
    hidden = len(result.kernels) - shown
    more = f" ({hidden} more not shown; --top 0 shows all)" if hidden > 0 else ""
    return (f"{len(result.kernels)} kernels, {result.dispatches:,} dispatches in {result.processes} process(es), "
            f"{result.total_ns / 1e6:,.3f} ms of GPU time; the app ran {result.wall_seconds:.1f} s{more}")
