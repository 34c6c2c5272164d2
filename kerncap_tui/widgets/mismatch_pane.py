"""Where a variant's output differs: the failing region as a heatmap of its 2-D view
(colour: the worst |error| of each cell, NaN and inf apart), downsampled to the terminal
with the scale shown; a cursor with the cell's rows, columns and its worst element's
pre / expected / got values; histograms of the values and of the errors.

Self-contained: fed one `kerncap.api.MismatchMap` per failing item (`show`) and
posting what it needs (`Requested`: another shape or a zoomed view, or the maps of a
variant; `WriteArrays`); whoever owns the replay server answers them (in the workbench:
kerncap_tui.mismatch_actions)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Input, Label, Static

from kerncap import api
from kerncap.core.units import human_bytes
from kerncap.errors import KerncapError
from kerncap_tui.terminal import one_line, plain

# |error| colours, small to large (perceptually ordered); NaN and inf stand apart.
RAMP = ("#2b1a4f", "#3b3b8f", "#2f6db5", "#1f9ea8", "#35b779", "#8fd744", "#fde725", "#ffb000", "#ff5a36")
NAN_COLOUR, INF_COLOUR, EMPTY_COLOUR, UNREAD_COLOUR = "#ff3df5", "#ffffff", "#1c1c1c", "#3a3a3a"
SPARK = " ▁▂▃▄▅▆▇█"


@dataclass
class MismatchRequest:
    """What the pane asks for: the maps of `cubin` against `against` (None: the captured
    post-state; a cubin: another variant) on `perturbation` (None: the captured input)."""
    cubin: str | None
    label: str
    against: str | None = None
    against_label: str = "captured post-state"
    perturbation: int | None = None
    items: tuple[str, ...] = ()
    shape: tuple[int, ...] | None = None
    views: dict[str, api.TensorView] = field(default_factory=dict)
    grid: tuple[int, int] = (96, 200)


@dataclass
class Pixel:
    count: int
    key: int          # the worst severity key (mismatch.py), 0 without mismatches
    cell: tuple[int, int] | None  # the grid cell holding that worst element
    read: bool = True


def error_of(key: int) -> float | str:
    if key >> 32 == 0xFFFFFFFF:
        return "nan"
    if key >> 32 == 0xFFFFFFFE:
        return "inf"
    import struct

    return struct.unpack("<f", struct.pack("<I", key >> 32))[0]


def pool(m: api.MismatchMap, rows: int, cols: int) -> list[list[Pixel]]:
    """The grid max-pooled to rows × cols pixels (each keeps its worst cell)."""
    rows, cols = max(1, min(rows, m.grid_rows)), max(1, min(cols, m.grid_cols))
    covered = None
    if m.covered_rows is not None:
        covered = [False] * m.view.rows
        for a, b in m.covered_rows:
            for r in range(a, min(b, m.view.rows)):
                covered[r] = True
    out = []
    for py in range(rows):
        y0, y1 = py * m.grid_rows // rows, max((py + 1) * m.grid_rows // rows, py * m.grid_rows // rows + 1)
        line = []
        for px in range(cols):
            x0, x1 = px * m.grid_cols // cols, max((px + 1) * m.grid_cols // cols, px * m.grid_cols // cols + 1)
            cc = m.cell_count[y0:y1, x0:x1]
            count = int(cc.sum())
            key, cell = 0, None
            if count:
                w = m.cell_worst[y0:y1, x0:x1] * (cc > 0)
                iy, ix = divmod(int(w.argmax()), x1 - x0)
                key, cell = int(w[iy, ix]), (y0 + iy, x0 + ix)
            read = True
            if covered is not None:
                r0 = m.cell_rows(y0)[0]
                r1 = m.cell_rows(y1 - 1)[1]
                read = any(covered[r0:r1])
            line.append(Pixel(count, key, cell, read))
        out.append(line)
    return out


def pixel_of(g: int, cells: int, pixels: int) -> int:
    """The pixel (of `pixels` pooling `cells` as pool() does) that holds cell g."""
    p = min(g * pixels // cells, pixels - 1)
    while p + 1 < pixels and (p + 1) * cells // pixels <= g:
        p += 1
    while p > 0 and p * cells // pixels > g:
        p -= 1
    return p


def colour_scale(pixels: list[list[Pixel]]) -> tuple[float, float]:
    """log10 range of the finite worst errors on screen."""
    logs = [math.log10(e) for row in pixels for p in row if p.count
            for e in [error_of(p.key)] if isinstance(e, float) and e > 0]
    return (min(logs), max(logs)) if logs else (0.0, 0.0)


def colour(p: Pixel, lo: float, hi: float) -> str:
    if not p.read:
        return UNREAD_COLOUR
    if not p.count:
        return EMPTY_COLOUR
    e = error_of(p.key)
    if e == "nan":
        return NAN_COLOUR
    if e == "inf":
        return INF_COLOUR
    if e <= 0 or hi <= lo:
        return RAMP[-1] if e > 0 else RAMP[0]
    t = (math.log10(e) - lo) / (hi - lo)
    return RAMP[min(len(RAMP) - 1, int(t * len(RAMP)))]


def value_text(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


class MismatchHeatmap(Widget, can_focus=True):
    """The grid as half-block pixels (two per character, top and bottom) with a cursor."""

    DEFAULT_CSS = "MismatchHeatmap { height: 1fr; min-height: 4; }"
    BINDINGS = [
        Binding("up", "move(-1, 0)", "Up", show=False),
        Binding("down", "move(1, 0)", "Down", show=False),
        Binding("left", "move(0, -1)", "Left", show=False),
        Binding("right", "move(0, 1)", "Right", show=False),
        Binding("pageup", "move(-8, 0)", "Page up", show=False),
        Binding("pagedown", "move(8, 0)", "Page down", show=False),
    ]
    cursor: reactive[tuple[int, int]] = reactive((0, 0))

    class Rescaled(Message):
        """The pixels were recomputed for a new size (the scale line follows)."""

    class CursorMoved(Message):
        def __init__(self, pixel: Pixel | None, rows: tuple[int, int], cols: tuple[int, int]) -> None:
            super().__init__()
            self.pixel, self.rows, self.cols = pixel, rows, cols

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.map: api.MismatchMap | None = None
        self.pixels: list[list[Pixel]] = []

    def show(self, m: api.MismatchMap | None) -> None:
        self.map = m
        self.pixels = []
        self.cursor = (0, 0)
        self.refresh()

    def pixel_shape(self) -> tuple[int, int]:
        return max(1, self.size.height) * 2, max(1, self.size.width)

    def ensure_pixels(self) -> None:
        if self.map is None:
            return
        rows, cols = self.pixel_shape()
        rows, cols = min(rows, self.map.grid_rows), min(cols, self.map.grid_cols)
        if not self.pixels or len(self.pixels) != rows or len(self.pixels[0]) != cols:
            self.pixels = pool(self.map, rows, cols)
            self.post_message(self.Rescaled())

    def render(self) -> Text:
        if self.map is None:
            return Text("")
        self.ensure_pixels()
        lo, hi = colour_scale(self.pixels)
        out = Text()
        cy, cx = self.cursor
        for y in range(0, len(self.pixels), 2):
            top, bottom = self.pixels[y], self.pixels[y + 1] if y + 1 < len(self.pixels) else None
            for x, p in enumerate(top):
                style = f"{colour(p, lo, hi)} on {colour(bottom[x], lo, hi) if bottom else 'default'}"
                glyph = "▀"
                if (cy // 2, cx) == (y // 2, x) and self.has_focus:
                    glyph, style = ("▀" if cy % 2 == 0 else "▄"), "bold #000000 on #ffffff"
                out.append(glyph, style=style)
            out.append("\n")
        return out

    def on_resize(self) -> None:
        old = (len(self.pixels), len(self.pixels[0])) if self.pixels else None
        self.pixels = []
        self.ensure_pixels()
        if old and self.pixels:  # the cursor stays on the same part of the view
            y, x = self.cursor
            self.cursor = (y * len(self.pixels) // old[0], x * len(self.pixels[0]) // old[1])
        self.refresh()

    def pixel_at(self, y: int, x: int) -> Pixel | None:
        self.ensure_pixels()
        if 0 <= y < len(self.pixels) and self.pixels and 0 <= x < len(self.pixels[0]):
            return self.pixels[y][x]
        return None

    def pixel_span(self, y: int, x: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """View rows and cols [a, b) a pixel covers."""
        m = self.map
        rows, cols = len(self.pixels), len(self.pixels[0])
        g0, g1 = y * m.grid_rows // rows, max((y + 1) * m.grid_rows // rows, y * m.grid_rows // rows + 1)
        h0, h1 = x * m.grid_cols // cols, max((x + 1) * m.grid_cols // cols, x * m.grid_cols // cols + 1)
        return (m.cell_rows(g0)[0], m.cell_rows(g1 - 1)[1]), (m.cell_cols(h0)[0], m.cell_cols(h1 - 1)[1])

    def action_move(self, dy: int, dx: int) -> None:
        self.ensure_pixels()
        if not self.pixels:
            return
        y = min(max(self.cursor[0] + dy, 0), len(self.pixels) - 1)
        x = min(max(self.cursor[1] + dx, 0), len(self.pixels[0]) - 1)
        self.cursor = (y, x)

    def jump_to_index(self, index: int) -> bool:
        """The cursor onto the pixel holding element `index` of the item."""
        self.ensure_pixels()
        cell = self.map.cell_of(index) if self.map else None
        if cell is None or not self.pixels:
            return False
        rows, cols = len(self.pixels), len(self.pixels[0])
        self.cursor = (pixel_of(cell[0], self.map.grid_rows, rows), pixel_of(cell[1], self.map.grid_cols, cols))
        return True

    def watch_cursor(self) -> None:
        if self.map is None or not self.pixels:
            return
        y, x = self.cursor
        rows, cols = self.pixel_span(y, x)
        self.post_message(self.CursorMoved(self.pixel_at(y, x), rows, cols))
        self.refresh()


class MismatchPane(Vertical):
    # Fixed heights around the map: its size (and so its scale and the cursor's cell)
    # must not change with the length of the text below it.
    DEFAULT_CSS = """
    MismatchPane #mismatch-title { height: 2; }
    MismatchPane #mismatch-scale { height: 1; }
    MismatchPane #mismatch-cursor { height: 2; }
    MismatchPane #mismatch-hist { height: 5; }
    MismatchPane #mismatch-shape-bar { height: 1; }
    """
    BINDINGS = [
        Binding("f", "first", "First mismatch", id="mismatch.first"),
        Binding("w", "write", "Write arrays", id="mismatch.write"),
        Binding("r", "next_region", "Next region", id="mismatch.next", show=False),
        Binding("s", "shape", "Shape", id="mismatch.shape", show=False),
        Binding("plus,equals_sign", "zoom_in", "Zoom in", id="mismatch.zoom-in", show=False),
        Binding("minus", "zoom_out", "Zoom out", id="mismatch.zoom-out", show=False),
        Binding("v", "load_selected", "Selected variant", id="mismatch.load", show=False),
    ]

    class Requested(Message):
        """The pane needs maps (another variant, a shape, a zoomed view)."""

        def __init__(self, request: MismatchRequest) -> None:
            super().__init__()
            self.request = request

    class LoadSelected(Message):
        """`v`: the maps of the variant selected in History (against the marked one, if any)."""

        def __init__(self, grid: tuple[int, int]) -> None:
            super().__init__()
            self.grid = grid

    class WriteArrays(Message):
        """`w`: write the current item's arrays (pre, expected, got) as .npy files."""

        def __init__(self, request: MismatchRequest, item: str) -> None:
            super().__init__()
            self.request, self.item = request, item

    DEFAULT_CLASSES = "session-pane"  # told of the open session (kerncap_tui.messages)

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.maps: list[api.MismatchMap] = []
        self.index = 0
        self.request: MismatchRequest | None = None

    # -- the open session ------------------------------------------------------------------
    def on_session_opened(self, _message) -> None:
        """Another reproducer: the maps of the last one mean nothing here."""
        self.request = None
        if self.is_mounted:
            self.show_message("select a variant in History (4), then v here: where its output differs")

    def on_build_finished(self, message) -> None:
        """A build recorded a variant that did not validate: say where to look."""
        v = getattr(getattr(message, "result", None), "variant", None)
        if v is not None and v.id and v.validation in ("fail", "inconclusive") and not self.maps:
            self.query_one("#mismatch-title", Label).update(plain(
                f"{v.label} did not validate ({v.validation}): select it in History (4), then v here"))

    def compose(self) -> ComposeResult:
        yield Label("select a variant in History (4), then v here: where its output differs", id="mismatch-title")
        yield MismatchHeatmap(id="mismatch-heatmap")
        yield Static("", id="mismatch-scale", classes="status")
        yield Static("", id="mismatch-cursor")
        yield Static("", id="mismatch-hist")
        with Horizontal(id="mismatch-shape-bar"):
            yield Label("shape ", classes="status")
            yield Input(placeholder="e.g. 1024,1024 (enter)", id="mismatch-shape", compact=True)

    # -- data in ----------------------------------------------------------------------------
    def show(self, maps: list[api.MismatchMap], request: MismatchRequest | None = None) -> None:
        """New maps (one per item; the failing ones first)."""
        self.maps = sorted(maps, key=lambda m: m.passed)
        self.request = request or self.request
        self.index = 0
        self._show_current()

    def show_message(self, text: str) -> None:
        self.maps = []
        self.query_one("#mismatch-title", Label).update(plain(text))
        self.query_one(MismatchHeatmap).show(None)
        for sel in ("#mismatch-scale", "#mismatch-cursor", "#mismatch-hist"):
            self.query_one(sel, Static).update("")

    @property
    def current(self) -> api.MismatchMap | None:
        return self.maps[self.index] if self.maps else None

    def _show_current(self) -> None:
        m = self.current
        if m is None:
            self.show_message("no item to show")
            return
        failing = sum(not x.passed for x in self.maps)
        others = f" · {self.index + 1}/{len(self.maps)} (r next)" if len(self.maps) > 1 else ""
        self.query_one("#mismatch-title", Label).update(Text.assemble(
            (f"{m.actual_label or 'got'}", "bold"), " vs ", (m.expected_label or "expected", "bold"),
            f" · {one_line(m.name)} ({human_bytes(m.size)}, {m.dtype or 'raw bytes'}) · {failing} failing{others}\n",
            (m.summary(), "bold red" if not m.passed else "green")))
        self.query_one(MismatchHeatmap).show(m)
        self._show_scale()
        self.query_one("#mismatch-hist", Static).update(self.histograms(m))
        self.query_one("#mismatch-cursor", Static).update("f: first mismatch · arrows: cursor · w: write arrays")

    def _show_scale(self) -> None:
        m = self.current
        heat = self.query_one(MismatchHeatmap)
        heat.ensure_pixels()
        if m is None or not heat.pixels:
            return
        rows, cols = len(heat.pixels), len(heat.pixels[0])
        lo, hi = colour_scale(heat.pixels)
        ramp = Text()
        for c in RAMP:
            ramp.append("█", style=c)
        how = "GPU" if m.computed == "gpu" else m.computed.replace("cpu", "CPU")
        per = f"{m.view.rows / rows:.3g} rows × {m.view.cols / cols:.3g} cols per pixel"
        self.query_one("#mismatch-scale", Static).update(Text.assemble(
            f"{m.view.rows:,}×{m.view.cols:,}{' folded' if m.view.wrapped else ''} · {per} · |err| ",
            f"{10 ** lo:.2g} ", ramp, f" {10 ** hi:.2g} · ", ("█", NAN_COLOUR), " NaN ", ("█", INF_COLOUR),
            " inf ", ("█", EMPTY_COLOUR), " equal · computed on the ", how))

    @staticmethod
    def histograms(m: api.MismatchMap) -> Text:
        """A sparkline per side over the occupied value bins, and the error histogram."""
        out = Text()
        vh = m.value_hist
        bins = {b for s in ("pre", "expected", "actual") for b in range(4, len(vh[s])) if vh[s][b]}
        # most negative first: negative bins by falling magnitude, then positive ones by rising
        signed = sorted(bins, key=lambda b: -(b - 132) - 1 if b >= 132 else b - 4)
        for side, name in (("pre", "pre     "), ("expected", "expected"), ("actual", "got     ")):
            h = vh[side]
            peak = max([int(h[b]) for b in signed] + [1])
            spark = "".join(SPARK[min(8, math.ceil(8 * int(h[b]) / peak))] if h[b] else " " for b in signed[:60])
            nan, inf = m.nonfinite(side)
            zeros = int(h[3])
            out.append(f"{name} ", style="bold")
            out.append(spark or "—", style="cyan")
            out.append(f"  0: {zeros:,} · NaN {nan:,} · inf {inf:,}\n", style="dim")
        if signed:
            out.append(f"         values {api.mismatch_bin_label('value', signed[0])} … "
                       f"{api.mismatch_bin_label('value', signed[-1])} (sign, log2 bins)\n",
                       style="dim")
        eh = m.err_hist
        nz = [b for b in range(len(eh)) if eh[b]]
        if nz or m.nan_errors or m.inf_errors:
            peak = max([int(eh[b]) for b in nz] + [1])
            lo, hi = (nz[0], nz[-1]) if nz else (0, -1)
            spark = "".join(SPARK[min(8, math.ceil(8 * int(eh[b]) / peak))] if eh[b] else " " for b in range(lo, hi + 1))
            out.append("|err|    ", style="bold")
            out.append(spark[:60] or "—", style="yellow")
            rng = f"  {api.mismatch_bin_label('err', lo)} … {api.mismatch_bin_label('err', hi)}" if nz else ""
            out.append(f"{rng} · NaN {m.nan_errors:,} · inf {m.inf_errors:,}", style="dim")
        return out

    def on_mismatch_heatmap_rescaled(self, _event: MismatchHeatmap.Rescaled) -> None:
        self._show_scale()

    # -- the cursor ----------------------------------------------------------------------------
    def on_mismatch_heatmap_cursor_moved(self, event: MismatchHeatmap.CursorMoved) -> None:
        m = self.current
        if m is None:
            return
        (r0, r1), (c0, c1) = event.rows, event.cols
        where = f"rows {r0:,}–{r1 - 1:,} × cols {c0:,}–{c1 - 1:,}"
        p = event.pixel
        if p is None or not p.count:
            text = Text(f"{where}: {'not read (sampled)' if p is not None and not p.read else 'no mismatch'}")
        else:
            flat = p.cell[0] * m.grid_cols + p.cell[1]
            vals = m.cell_values.get(flat)
            text = Text(f"{where}: {p.count:,} mismatch{'es' if p.count != 1 else ''}")
            if vals is not None:
                index, pre, exp, got = vals
                coords = m.view.tensor_coords(index)
                at = "[" + ", ".join(map(str, coords)) + "]" if coords is not None else f"element {index:,}"
                err = error_of(p.key)
                text.append(f" · worst {at}: pre {value_text(pre)} · expected ", style="")
                text.append(value_text(exp), style="bold")
                text.append(" · got ")
                text.append(value_text(got), style="bold red")
                text.append(f" (|err| {value_text(err)})")
        self.query_one("#mismatch-cursor", Static).update(text)

    # -- actions -------------------------------------------------------------------------------
    def action_first(self) -> None:
        m = self.current
        if m is None or not m.first:
            self.app.notify("no mismatch in this item", title="mismatch")
            return
        heat = self.query_one(MismatchHeatmap)
        heat.focus()
        if not heat.jump_to_index(m.first[0].index):
            f = m.first[0]
            self.query_one("#mismatch-cursor", Static).update(
                f"first mismatch: element {f.index:,} (outside the view): expected {value_text(f.expected)} "
                f"got {value_text(f.actual)}")

    def action_next_region(self) -> None:
        if len(self.maps) > 1:
            self.index = (self.index + 1) % len(self.maps)
            self._show_current()

    def action_shape(self) -> None:
        self.query_one("#mismatch-shape", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        m = self.current
        if event.input.id != "mismatch-shape" or m is None or self.request is None:
            return
        try:
            shape = api.parse_shape(event.value) if event.value.strip() else None
        except KerncapError as exc:
            self.app.notify(f"{exc.message}\n{exc.hint}", title="shape", severity="error")
            return
        self._ask(items=(m.name.replace("region ", "").replace("global ", "global:"),), shape=shape, views={})

    def action_zoom_in(self) -> None:
        m, heat = self.current, self.query_one(MismatchHeatmap)
        if m is None or self.request is None or not heat.pixels:
            return
        (r0, r1), (c0, c1) = heat.pixel_span(*heat.cursor)
        h, w = max(1, (m.view.rows // 8)), max(1, (m.view.cols // 8))
        cy, cx = (r0 + r1) // 2, (c0 + c1) // 2
        view = m.view.window(cy - h // 2, cy + h - h // 2, cx - w // 2, cx + w - w // 2)
        self._ask(views={m.name: view})

    def action_zoom_out(self) -> None:
        if self.request is not None and self.request.views:
            self._ask(views={})

    def action_write(self) -> None:
        m = self.current
        if m is None or self.request is None:
            self.app.notify("nothing to write: load a variant's maps first", title="mismatch")
            return
        self.post_message(self.WriteArrays(self.request, m.name))

    def action_load_selected(self) -> None:
        """The maps of the variant selected in History (against the marked one, if any)."""
        self.post_message(self.LoadSelected(self.query_one(MismatchHeatmap).pixel_shape()))

    def _ask(self, **changes) -> None:
        from dataclasses import replace

        self.post_message(self.Requested(replace(self.request, **changes)))
