"""The captured address space as a map: regions along the virtual address range, sizes
to scale, marked by what the kernel did with them, zoomable around the selected one.

Captured regions can sit gigabytes apart; drawn linearly, the gaps would squeeze every
region into one cell. So gaps count at most GAP_CAP of the regions' total bytes and a cut
gap is drawn as `≈`; region sizes stay to scale with each other (a region too small for
one cell still gets one). Host regions (pinned or registered host memory the device
reaches) are drawn as a kind of their own, in the same address space: with unified
addressing the kernel sees them at their host addresses. Module globals live in the
module, not in this range: they are listed in the table only. CUDA arrays live where the
driver puts them: they are drawn after the address range, past a `│`, to scale with each
other, as a kind of their own."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from kerncap.core.units import human_bytes
from kerncap_tui.regions import MapRow

GAP_CAP = 0.05
ZOOMS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# (glyph, style) by what the kernel did: wrote it, an argument points into it, all zero, other.
MARKS = {"written": ("█", "red"), "argument": ("▓", "cyan"), "zero": ("░", "grey50"), "other": ("▒", "default"),
         "array": ("▤", "magenta"), "array written": ("▦", "red"), "separator": ("│", "dim")}
LEGEND = "█ written  ▓ argument  ░ all zero  ▒ other  ≈ gap cut"
ARRAY_LEGEND = "  │ ▤ CUDA array (▦ written)"  # shown when there are arrays to draw
HOST_GLYPH = "▞"  # host memory, coloured by what the kernel did with it
HOST_LEGEND = "  ▞ host memory"  # shown when there are host regions to draw


def mark_of(row: MapRow) -> str:
    if row.key.startswith("a"):
        return "array written" if row.written else "array"
    if row.written:
        return "written"
    if row.by_argument:
        return "argument"
    return "zero" if row.zero else "other"


@dataclass(frozen=True)
class Segment:
    key: str | None   # region key; None for a gap
    start: int        # address
    size: int         # bytes
    drawn: float      # bytes it counts for in the layout (gaps may be cut)
    cut: bool = False
    address: bool = True  # False: a CUDA array (or the separator before them), outside the range


@dataclass
class MapView:
    cells: list[tuple[str, str | None]]  # (glyph, region key or None) per visible cell
    labels: str
    start: int                          # first visible address (approximate inside a cut gap)
    end: int
    bytes_per_cell: float
    total_cells: int


def segments(rows: list[MapRow]) -> list[Segment]:
    regions = sorted((r for r in rows if r.on_map and r.size > 0), key=lambda r: r.base)
    total = sum(r.size for r in regions)
    cap = max(total * GAP_CAP, 1.0)
    out: list[Segment] = []
    for i, r in enumerate(regions):
        if i:
            prev = regions[i - 1]
            gap = r.base - (prev.base + prev.size)
            if gap > 0:
                out.append(Segment(None, prev.base + prev.size, gap, min(gap, cap), gap > cap))
        out.append(Segment(r.key, r.base, r.size, float(r.size)))
    arrays = [r for r in rows if r.key.startswith("a") and r.size > 0]
    if arrays:
        end = out[-1].start + out[-1].size if out else 0
        out.append(Segment("|", end, 0, 0.0, address=False))
        out += [Segment(r.key, end, 0, float(r.size), address=False) for r in arrays]
    return out


def glyph_of(key: str, mark: str) -> str:
    return HOST_GLYPH if key.startswith("h") else MARKS[mark][0]


def _cells(segs: list[Segment], marks: dict[str, str], per_cell: float):
    cells: list[tuple[str, str | None]] = []
    starts: dict[int, Segment] = {}
    for s in segs:
        n = max(1, round(s.drawn / per_cell)) if s.key or s.cut else round(s.drawn / per_cell)
        if not n:
            continue
        starts[len(cells)] = s
        if s.key == "|":
            cells.append((MARKS["separator"][0], None))
        elif s.key is None:
            cells += [(" ", None)] * n
            if s.cut:
                cells[len(cells) - n + n // 2] = ("≈", None)
        else:
            cells += [(glyph_of(s.key, marks[s.key]), s.key)] * n
    return cells, starts


def layout(rows: list[MapRow], width: int, zoom: int = 1, focus: str | None = None) -> MapView:
    """The cells of a `width`-cell window at `zoom` (1: everything fits), centred on
    region `focus` when zoomed in."""
    width = max(width, 8)
    segs = segments(rows)
    if not segs:
        return MapView([], "", 0, 0, 0.0, 0)
    marks = {r.key: mark_of(r) for r in rows}
    logical = sum(s.drawn for s in segs)
    target = width * zoom
    per_cell = logical / target
    for _ in range(4):  # regions get >= 1 cell: shrink the scale until it all fits `target`
        cells, starts = _cells(segs, marks, per_cell)
        if len(cells) <= target:
            break
        per_cell *= len(cells) / max(target - len(segs), 1)
    total = len(cells)
    first = 0
    if total > width:
        at = next((i for i, s in starts.items() if s.key == focus), 0)
        first = min(max(0, at - width // 3), total - width)
    window = cells[first:first + width]
    begin = max((i for i in starts if i <= first), default=0)
    seg0 = starts[begin]
    start = seg0.start + (int((first - begin) * per_cell) if not seg0.cut and seg0.address else 0)
    last = max((i for i in starts if i < first + len(window)), default=0)
    seg1 = starts[last]
    end = seg1.start + seg1.size
    labels = [" "] * len(window)
    for i, s in sorted(starts.items()):
        if s.key in (None, "|") or not first <= i < first + len(window):
            continue
        text = s.key if s.key.startswith("a") else ("h" if s.key.startswith("h") else "#") + s.key[1:]
        pos = i - first
        if pos + len(text) <= len(window) and all(c == " " for c in labels[max(0, pos - 1):pos + len(text)]):
            labels[pos:pos + len(text)] = list(text)
    return MapView(window, "".join(labels).rstrip(), start, end, per_cell, total)


class MemoryMap(Widget):
    """A few lines: the strip (twice, for visibility), region ids, the address range."""

    DEFAULT_CSS = "MemoryMap { height: 5; padding: 0 1; }"
    zoom: reactive[int] = reactive(1)
    focus_key: reactive[str | None] = reactive(None)

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.rows: list[MapRow] = []

    def show(self, rows: list[MapRow]) -> None:
        self.rows = list(rows)
        self.zoom = 1
        self.refresh()

    def zoom_in(self) -> None:
        self.zoom = next((z for z in ZOOMS if z > self.zoom), ZOOMS[-1])

    def zoom_out(self) -> None:
        self.zoom = max((z for z in ZOOMS if z < self.zoom), default=ZOOMS[0])

    def zoom_fit(self) -> None:
        self.zoom = ZOOMS[0]

    def render(self) -> Text:
        width = max(self.size.width, 8)
        view = layout(self.rows, width, self.zoom, self.focus_key)
        if not view.cells:
            return Text("no captured regions to draw", style="dim")
        marks = {r.key: mark_of(r) for r in self.rows}
        strip = Text()
        prev = None
        shade = False
        for glyph, key in view.cells:
            if key != prev and key is not None:
                shade = not shade  # neighbours alternate, so adjacent regions stay apart
            prev = key
            style = MARKS[marks[key]][1] if key else "dim"
            if key is not None and key == self.focus_key:
                style += " reverse"
            elif key is not None and not shade:
                style += " dim"
            strip.append(glyph, style=style)
        scale = f"1 cell ≈ {human_bytes(int(view.bytes_per_cell))}" if view.bytes_per_cell >= 1 else "1 cell < 1 B"
        zoom = f"zoom {self.zoom}× (+/- 0)"
        span = f"0x{view.start:x} … 0x{view.end:x}"
        info = f"{span}  {scale}  {zoom}"
        out = Text()
        out.append_text(strip)
        out.append("\n")
        out.append_text(strip)
        out.append("\n")
        out.append(view.labels, style="dim")
        out.append("\n")
        out.append(info[:width], style="dim")
        out.append("\n")
        legend = (LEGEND + (HOST_LEGEND if any(r.host for r in self.rows) else "")
                  + (ARRAY_LEGEND if any(r.key.startswith("a") for r in self.rows) else ""))
        out.append(legend[:width], style="dim")
        return out

    def watch_zoom(self) -> None:
        self.refresh()

    def watch_focus_key(self) -> None:
        self.refresh()
