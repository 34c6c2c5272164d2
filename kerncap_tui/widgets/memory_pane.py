"""Memory-region map: the address space drawn to scale (kerncap_tui.widgets.memory_map,
zoomable around the selected region), regions by address (flags: referenced by an
argument, written by the kernel, all zero, unchanged) and module globals; the selected
one shows typed pre/post/difference values of its first few KB."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Label, Select, Static

from kerncap.core.units import human_bytes
from kerncap.errors import KerncapError
from kerncap_tui import messages
from kerncap_tui import regions as R
from kerncap_tui.terminal import one_line, plain
from kerncap_tui.widgets.memory_map import MemoryMap


# The flags column: "written" is the manifest's (post differs from pre), so `=` is a region
# the kernel left as it was (read, or written with the same bytes).
FLAGS_LEGEND = "A argument points here · W the kernel changed it · = it did not · 0 all zero"


class MemoryPane(Vertical):
    DEFAULT_CLASSES = "session-pane"  # told of the open session (kerncap_tui.messages)
    BINDINGS = [
        Binding("t", "next_dtype", "Dtype", id="memory.dtype"),
        Binding("plus,equals_sign", "zoom_in", "Zoom in", id="memory.zoom-in"),
        Binding("minus", "zoom_out", "Zoom out", id="memory.zoom-out"),
        Binding("0", "zoom_fit", "Fit map", id="memory.zoom-fit", show=False),  # palette: the footer keeps q Quit
    ]

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.capture = None
        self.rows: dict[str, R.MapRow] = {}
        self.selected: str | None = None
        self.dtype = "float32"

    def compose(self) -> ComposeResult:
        yield MemoryMap(id="memory-map")
        yield DataTable(id="region-table", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="value-bar"):
            yield Label("", id="value-title")
            yield Select([(d, d) for d in R.DTYPES], value="float32", allow_blank=False, id="dtype", compact=True)
        yield DataTable(id="value-table", cursor_type="row", zebra_stripes=True)
        yield Static(FLAGS_LEGEND, classes="status")

    def on_mount(self) -> None:
        t = self.query_one("#region-table", DataTable)
        for label in ("flags", "name", "base", "size", "kind"):
            t.add_column(label, key=label)
        v = self.query_one("#value-table", DataTable)
        for label in ("#", "offset", "pre", "post", "post − pre"):
            v.add_column(label, key=label)

    def on_session_opened(self, message: messages.SessionOpened) -> None:
        if message.capture is not None:
            self.show(message.capture)

    def on_launch_shown(self, message: messages.LaunchShown) -> None:
        """A sequence's selected launch: its arguments mark the regions (flag A)."""
        launch = message.capture.sequence.launches[message.launch]
        self.show(message.capture, launch.params, keep=self.selected)
        self.query_one(".status", Static).update(
            f"launch {launch.index}: A its argument · W the sequence changed it · = it did not · 0 zero")

    def show(self, capture, params=None, keep: str | None = None) -> None:
        self.capture = capture
        t = self.query_one("#region-table", DataTable)
        t.clear()
        self.rows = {row.key: row for row in R.map_rows(capture, params)}
        for row in self.rows.values():
            t.add_row(row.flags, plain(one_line(row.label)), f"0x{row.base:x}", human_bytes(row.size),
                      plain(one_line(row.kind)), key=row.key)
        self.query_one(MemoryMap).show(list(self.rows.values()))
        if keep in self.rows:
            t.move_cursor(row=list(self.rows).index(keep))
            self.select(keep)
        elif self.rows:
            self.select(next(iter(self.rows)))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "region-table" and event.row_key is not None:
            self.select(str(event.row_key.value))

    def select(self, key: str) -> None:
        self.selected = key
        self.query_one(MemoryMap).focus_key = key
        self.load_values(key, self.dtype)

    @work(thread=True, exclusive=True, group="memory-preview")
    def load_values(self, key: str, dtype: str) -> None:
        """Reading (and hash-verifying) a 4 MiB chunk is blocking work: off the event loop."""
        try:
            pre, post = R.preview_bytes(self.capture, key)
            rows, error = R.value_rows(pre, post, dtype), None
        except KerncapError as exc:
            rows, error = [], exc
        self.app.call_from_thread(self._fill_values, key, dtype, rows, error)

    def _fill_values(self, key: str, dtype: str, rows: list[R.ValueRow], error) -> None:
        if key != self.selected or dtype != self.dtype:
            return
        v = self.query_one("#value-table", DataTable)
        v.clear()
        row = self.rows[key]
        title = self.query_one("#value-title", Label)
        if error is not None:
            title.update(plain(f"{one_line(row.label)}: {error.message}"))
            self.app.notify(f"{error.message}\n{error.hint or ''}", severity="error", title="memory")
            return
        changed = sum(r.changed for r in rows)
        title.update(plain(f"{one_line(row.label)} · first {len(rows)} × {dtype} · {changed} changed"))
        for r in rows:
            style = "bold" if r.changed else "dim"
            diff = R.format_value(r.diff) if r.changed else "·"
            v.add_row(
                Text(str(r.index), style=style), f"+0x{r.offset:x}", R.format_value(r.pre),
                R.format_value(r.post), Text(diff, style=style), key=str(r.index),
            )

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.value != self.dtype and isinstance(event.value, str):
            self.dtype = event.value
            if self.selected:
                self.load_values(self.selected, self.dtype)

    def action_zoom_in(self) -> None:
        self.query_one(MemoryMap).zoom_in()

    def action_zoom_out(self) -> None:
        self.query_one(MemoryMap).zoom_out()

    def action_zoom_fit(self) -> None:
        self.query_one(MemoryMap).zoom_fit()

    def action_next_dtype(self) -> None:
        names = list(R.DTYPES)
        self.query_one(Select).value = names[(names.index(self.dtype) + 1) % len(names)]
