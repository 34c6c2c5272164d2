"""The live loop in one view: beside the Source editor on a wide terminal, the timing
history (compact) and its plot, so a save's verdict appears next to the edit.

Shown automatically from SPLIT_MIN_COLUMNS columns; f2 turns it on or off whatever the
width, f3 / f4 make it narrower / wider."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Label

from kerncap_tui import messages
from kerncap_tui.charts import speedup_cells
from kerncap_tui.widgets.history_plot import HistoryPlot

SPLIT_MIN_COLUMNS = 140
WIDTHS = (32, 80)  # the split's narrowest and widest
STEP = 8
VALID = {"pass": ("✓", "green"), "fail": ("✗", "bold red"), "inconclusive": ("?", "yellow"), "error": ("!", "yellow"),
         "skipped": ("–", "dim")}


class LiveHistory(Vertical):
    DEFAULT_CLASSES = "session-pane"  # told of the open session (kerncap_tui.messages)
    DEFAULT_CSS = """
    LiveHistory { width: 48; border-left: vkey $panel; }
    LiveHistory #live-title { height: 1; background: $panel; width: 1fr; padding: 0 1; }
    LiveHistory DataTable { height: 1fr; }
    LiveHistory HistoryPlot { height: 11; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.forced: bool | None = None  # None: by the terminal's width
        self.split_width = 48

    def compose(self) -> ComposeResult:
        yield Label("history · f2 split · f3/f4 width", id="live-title")
        yield DataTable(id="live-table", cursor_type="row", zebra_stripes=True, show_cursor=False)
        yield HistoryPlot(id="live-plot")

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns("variant", "median ms", "speedup", "ok")

    def on_session_opened(self, message: messages.SessionOpened) -> None:
        self.show(message.history)

    def on_build_finished(self, message: messages.BuildFinished) -> None:
        self.show(message.history)

    def show(self, history) -> None:
        t = self.query_one(DataTable)
        t.clear()
        variants = history.variants if history else []
        for v in reversed(variants):  # newest first: the last save's verdict on top
            glyph, style = VALID.get(v.validation, (v.validation, ""))
            t.add_row(Text(v.label, style="bold" if v.id == 0 else ""),
                      f"{v.median_ms:.4f}" if v.median_ms is not None else "—",
                      speedup_cells(history, v)[0], Text(glyph, style=style))
        self.query_one(HistoryPlot).show(variants)

    def fit(self, screen_width: int) -> None:
        """Show or hide for this terminal width (unless the user chose with f2)."""
        self.display = self.forced if self.forced is not None else screen_width >= SPLIT_MIN_COLUMNS
        self.styles.width = self.split_width

    def toggle(self, screen_width: int) -> None:
        self.forced = not self.display
        self.fit(screen_width)

    def resize(self, delta: int, screen_width: int) -> None:
        self.split_width = max(WIDTHS[0], min(WIDTHS[1], self.split_width + delta))
        self.fit(screen_width)
