"""The `kerncap profile` tables: every number column always printed in full, the kernel
name fitted into what is left of the width (80 in a pipe) by core.units.fit_kernel_name.
`--wide` prints full names instead (and `--json` has them all). With --by-nvtx the time
per (NVTX range path, kernel), with --buckets each kernel's launch signatures."""

from __future__ import annotations

import shutil
from collections.abc import Sequence

from kerncap.capture.nvtx_summary import RangeKernel
from kerncap.capture.profile import ProfileResult
from kerncap.core.units import cut_end, cut_middle, fit_kernel_name, format_dim
from kerncap.reproducer.buckets import Bucket, time_shares

MIN_NAME = 12
NUMBER_COLUMNS = ("calls", "total ms", "%", "avg µs", "min µs", "max µs", "grid", "block")
# Sampled timing adds the 90 % interval of each total (as +-% of it) and the launches timed.
SAMPLED_COLUMNS = ("calls", "total ms", "±%", "%", "timed", "avg µs", "min µs", "max µs", "grid", "block")


def interval_cell(k) -> str:
    """The half-width of a sampled total's 90 % interval, in % of the total."""
    if k.timed is None or k.total_lo_ns is None or k.total_hi_ns is None:
        return "-"
    if not k.timed:
        return "?"
    half = (k.total_hi_ns - k.total_lo_ns) / 2
    return f"{100 * half / k.total_ns:.1f}" if k.total_ns else "0.0"


def terminal_width(default: int = 80) -> int:
    """COLUMNS, else the terminal's width, else `default` (in a pipe)."""
    return shutil.get_terminal_size((default, 24)).columns


def format_table(result: ProfileResult, *, top: int = 20, width: int | None = None, wide: bool = False) -> list[str]:
    """The table's lines; none is longer than `width` unless the numbers alone are."""
    width = terminal_width() if width is None else width
    shown = result.kernels if top <= 0 else result.kernels[:top]
    sampled = result.timing == "sampled"
    rows = []
    for rank, k in enumerate(shown, 1):
        cells = [f"{k.calls:,}", f"{k.total_ns / 1e6:,.3f}", f"{k.percent:.1f}", f"{k.avg_ns / 1e3:,.2f}",
                 f"{k.min_ns / 1e3:,.2f}", f"{k.max_ns / 1e3:,.2f}", format_dim(k.grid), format_dim(k.block)]
        if sampled:
            cells[2:2] = [interval_cell(k)]
            cells[4:4] = [f"{k.timed or 0:,}"]
        rows.append([f"{rank}*" if k.autotune_helper else str(rank), *cells])
    heads = ["#", *(SAMPLED_COLUMNS if sampled else NUMBER_COLUMNS)]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)]
    # "#", two spaces, the name, two spaces, then number columns one space apart.
    numbers = sum(widths[1:]) + len(widths) - 2
    room = max(MIN_NAME, width - widths[0] - 4 - numbers)
    names = [k.display_name if wide else fit_kernel_name(k.display_name, room) for k in shown]
    name_width = max([len("kernel"), *map(len, names)])

    def line(first: str, name: str, cells: Sequence[str]) -> str:
        nums = " ".join(c.rjust(w) for c, w in zip(cells, widths[1:]))
        return f"{first.rjust(widths[0])}  {name.ljust(name_width)}  {nums}".rstrip()

    out = [line("#", "kernel", heads[1:])]
    out += [line(r[0], n, r[1:]) for r, n in zip(rows, names)]
    return out


def summary_line(result: ProfileResult, shown: int) -> str:
    hidden = len(result.kernels) - shown
    more = f" ({hidden} more not shown; --top 0 shows all)" if hidden > 0 else ""
    timing = ""
    if result.timing == "sampled":
        timed = sum(k.timed or 0 for k in result.kernels)
        timing = (f"; sampled timing: {timed:,} launches timed, totals estimated (±: 90 % interval; without "
                  "--sampled CUPTI times every launch)")
    return (f"{len(result.kernels)} kernels, {result.dispatches:,} dispatches in {result.processes} process(es), "
            f"{result.total_ns / 1e6:,.3f} ms of GPU time; the app ran {result.wall_seconds:.1f} s{timing}{more}")


def _columns(heads: Sequence[str], rows: list[list[str]]) -> list[int]:
    return [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)]


def format_nvtx_table(result: ProfileResult, *, top: int = 20, width: int | None = None,
                      wide: bool = False) -> list[str]:
    """GPU time per (NVTX range path, kernel), most first (`profile --by-nvtx`): a title,
    the table, and a line for the rows not shown."""
    width = terminal_width() if width is None else width
    rows = [RangeKernel(**r) for r in result.nvtx_ranges]
    shown = rows if top <= 0 else rows[:top]
    heads = ["#", "calls", "total ms", "%", "avg µs"]
    cells = [[str(i), f"{r.calls:,}", f"{r.total_ns / 1e6:,.3f}", f"{r.percent:.1f}", f"{r.avg_ns / 1e3:,.2f}"]
             for i, r in enumerate(shown, 1)]
    widths = _columns(heads, cells)
    # "#", the range and the kernel two spaces apart, then the numbers one space apart;
    # the kernel gets what it needs up to three fifths of the room, the range the rest.
    room = max(2 * MIN_NAME, width - widths[0] - 6 - sum(widths[1:]) - len(widths[1:]) + 1)
    names = [r.demangled or r.kernel for r in shown]
    name_need = max([len("kernel"), *(len(fit_kernel_name(n, room)) for n in names)])
    path_room = max(MIN_NAME, room - min(name_need, room * 3 // 5))
    paths = [r.path_text if wide else cut_middle(r.path_text, path_room) for r in shown]
    path_width = max([len("range"), *map(len, paths)])
    names = names if wide else [fit_kernel_name(n, max(MIN_NAME, room - path_width)) for n in names]
    name_width = max([len("kernel"), *map(len, names)])

    def line(c: Sequence[str], path: str, name: str) -> str:
        nums = " ".join(x.rjust(w) for x, w in zip(c[1:], widths[1:]))
        return f"{c[0].rjust(widths[0])}  {path.ljust(path_width)}  {name.ljust(name_width)}  {nums}".rstrip()

    out = ["GPU time per NVTX range and kernel", line(heads, "range", "kernel")]
    out += [line(c, p, n) for c, p, n in zip(cells, paths, names)]
    if len(rows) > len(shown):
        out.append(f"({len(rows) - len(shown)} more rows; --top 0 shows all)")
    return out


def format_bucket_tables(result: ProfileResult, *, top: int = 20, width: int | None = None,
                         wide: bool = False) -> list[str]:
    """Each ranked kernel's buckets (launch signatures) with count and share of its time
    (`profile --buckets`): per kernel a title line, then one row per bucket."""
    width = terminal_width() if width is None else width
    by_kernel: dict[str, list[Bucket]] = {}
    for d in result.buckets:
        b = Bucket.from_dict(d)
        by_kernel.setdefault(b.kernel, []).append(b)
    kernels = [k for k in result.kernels if k.name in by_kernel]
    heads = ["calls", "total ms", "share %", "avg µs"]
    out: list[str] = []
    for k in kernels if top <= 0 else kernels[:top]:
        buckets = by_kernel[k.name]
        cells = [[f"{b.launches:,}", f"{b.time_ns / 1e6:,.3f}", f"{100 * share:.1f}", f"{b.avg_ns / 1e3:,.2f}"]
                 for b, share in zip(buckets, time_shares(buckets))]
        widths = _columns(heads, cells)
        room = max(MIN_NAME, width - sum(widths) - len(widths) - 1)
        title = f": {len(buckets)} bucket(s)"
        name = k.display_name if wide else fit_kernel_name(k.display_name, max(MIN_NAME, width - len(title)))
        if out:
            out.append("")
        out.append(name + title)
        out.append((" ".join(h.rjust(w) for h, w in zip(heads, widths)) + "  signature").rstrip())
        for c, b in zip(cells, buckets):
            sig = b.signature() if wide else cut_end(b.signature(), room)
            out.append(" ".join(x.rjust(w) for x, w in zip(c, widths)) + "  " + sig)
    return out


def profile_text(result: ProfileResult, *, top: int = 20, width: int | None = None, wide: bool = False) -> str:
    """The table `kerncap profile` prints: the `top` kernels (0: all), every number column
    in full and the kernel names fitted into `width` (default: the terminal's, 80 in a
    pipe; `wide`: full names), then a summary line."""
    lines = format_table(result, top=top, width=width, wide=wide)
    note = autotune_note(result)
    return "\n".join([*lines, summary_line(result, len(lines) - 1), *([note] if note else [])])


def autotune_note(result: ProfileResult) -> str | None:
    """What the rows marked * are, when XLA's autotuner ran in the app: its helpers' share,
    and the first kernel that is the app's own (the one to extract)."""
    helpers = [k for k in result.kernels if k.autotune_helper]
    if not helpers:
        return None
    ns = sum(k.total_ns for k in helpers)
    first = next(((i, k) for i, k in enumerate(result.kernels, 1) if not k.autotune_helper), None)
    own = f"; the first of the app's own is #{first[0]} ({first[1].display_name})" if first else ""
    return (f"* XLA's autotuner: {len(helpers)} kernel(s), {sum(k.calls for k in helpers):,} launches, "
            f"{100 * ns / result.total_ns if result.total_ns else 0:.1f} % of GPU time, ran while XLA compiled; "
            f"the fusions it tried ran then too, and extract skips those runs (docs/capture-format.md){own}")


def nvtx_text(result: ProfileResult, *, top: int = 20, width: int | None = None, wide: bool = False) -> str:
    """The table `kerncap profile --by-nvtx` adds: GPU time per (NVTX range path, kernel)."""
    return "\n".join(format_nvtx_table(result, top=top, width=width, wide=wide))


def buckets_text(result: ProfileResult, *, top: int = 20, width: int | None = None, wide: bool = False) -> str:
    """The tables `kerncap profile --buckets` adds: each ranked kernel's launch signatures
    with count and share of its time."""
    return "\n".join(format_bucket_tables(result, top=top, width=width, wide=wide))
