"""Nsight Compute's key metrics of two variants side by side, with B's change against A."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

from kerncap import api
from kerncap_tui.terminal import plain


class MetricsDiffScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    MetricsDiffScreen { align: center middle; }
    #metrics-box { width: 76; height: auto; max-height: 20; border: thick $primary; background: $surface; }
    #metrics-title { width: 1fr; background: $panel; padding: 0 1; }
    #metrics-table { height: auto; }
    """
    BINDINGS = [Binding("escape,q", "dismiss", "Close", id="metrics-diff.close")]

    def __init__(self, a_label: str, a, b_label: str, b) -> None:
        """a, b: kerncap.api.NcuResult."""
        super().__init__()
        self.a_label, self.a, self.b_label, self.b = a_label, a, b_label, b

    def compose(self) -> ComposeResult:
        with Vertical(id="metrics-box"):
            yield Label(plain(f"Nsight Compute: A = {self.a_label}, B = {self.b_label}   (esc: close)"), id="metrics-title")
            yield DataTable(id="metrics-table", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        t = self.query_one(DataTable)
        t.add_columns("metric", f"A {self.a_label}", f"B {self.b_label}", "B vs A")
        for m in api.KEY_METRICS:
            va, vb = self.a.metrics.get(m.key), self.b.metrics.get(m.key)
            delta = api.format_metric_change(m.key, va, vb)
            better = _better(m.key, va, vb)
            style = "" if better is None else ("green" if better else "red")
            t.add_row(m.label, api.format_metric(m.key, va), api.format_metric(m.key, vb), Text(delta, style=style), key=m.key)
        t.focus()


def _better(key: str, a: float | None, b: float | None) -> bool | None:
    """Whether B improved on A for metrics with a direction (time and DRAM traffic: lower)."""
    if a is None or b is None or a == b or key not in ("duration_ns", "dram_read_bytes", "dram_write_bytes"):
        return None
    return b < a
