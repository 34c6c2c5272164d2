"""Timing history: every variant against the baseline (bar, median, speedup with its
confidence interval or "within noise", what the validation covered); diff any two,
restore any one."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from kerncap_tui.charts import bar, interval_text, speedup_text

BAR_WIDTH = 16
VALIDATION_STYLE = {"pass": ("✓ pass", "green"), "fail": ("✗ FAIL", "bold red"),
                    "inconclusive": ("? inconclusive", "yellow"), "error": ("! error", "yellow"),
                    "skipped": ("– skipped", "dim")}


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


def speedup_phrase(v) -> str:
    """One phrase for the log and notifications: "1.32× [1.21–1.35]", "within noise
    (0.97–1.08)", "1.06× (no interval)"."""
    if v.speedup is None:
        return "not compared"
    span = interval_text(v.speedup_low, v.speedup_high)
    if v.speedup_low is None:
        return f"{speedup_text(v.speedup)} (no interval)"
    if not v.significant:
        return f"within noise ({speedup_text(v.speedup)}, {span})"
    return f"{speedup_text(v.speedup)} [{span}]"


def validation_cell(v) -> Text:
    label, style = VALIDATION_STYLE.get(v.validation, (v.validation, ""))
    if v.validation == "pass" and v.validation_detail:
        label = f"✓ {v.validation_detail}"
    return Text(label, style=style)


class HistoryPane(Vertical):
    BINDINGS = [
        Binding("space", "mark", "Mark", id="history.mark"),
        Binding("d", "diff", "Diff", id="history.diff"),
        Binding("ctrl+r", "restore", "Restore", id="history.restore"),
    ]

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.history = None
        self.marked: int | None = None

    def compose(self) -> ComposeResult:
        yield DataTable(id="history-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="history-status", classes="status")

    def on_mount(self) -> None:
        t = self.query_one(DataTable)
        for label in ("", "variant", "median ms", "time vs baseline", "speedup", "interval", "valid", "commit"):
            t.add_column(label, key=label or "mark")

    def show(self, history) -> None:
        self.history = history
        t = self.query_one(DataTable)
        cursor = t.cursor_row
        t.clear()
        variants = history.variants if history else []
        timed = [v.median_ms for v in variants if v.median_ms]
        scale = max(timed) if timed else 0.0
        for v in variants:
            speedup, interval = speedup_cells(history, v)
            t.add_row(
                "●" if v.id == self.marked else " ",
                Text(v.label, style="bold" if v.id == 0 else ""),
                f"{v.median_ms:.4f}" if v.median_ms is not None else "—",
                Text(bar(v.median_ms, scale, BAR_WIDTH), style="cyan" if v.id else "magenta"),
                speedup,
                interval,
                validation_cell(v),
                (v.commit or "")[:8],
                key=str(v.id),
            )
        if variants:
            t.move_cursor(row=min(max(cursor, 0), len(variants) - 1))
        summary = f"{len(variants)} variant(s)"
        if any(v.id for v in variants):
            best = history.best_significant()
            if best is not None:
                summary += (f" · best: {best.label} {speedup_text(best.speedup)} "
                            f"[{interval_text(best.speedup_low, best.speedup_high)}]")
            else:
                summary += " · none significantly faster"
            if any(v.id and not history.has_interval(v) for v in variants):
                summary += " · (…): no interval"
        self.query_one("#history-status", Static).update(summary + " · space mark · d diff · ctrl+r restore")

    def selected(self):
        t = self.query_one(DataTable)
        if not self.history or not t.row_count:
            return None
        row_key, _ = t.coordinate_to_cell_key(t.cursor_coordinate)
        return self.history.get(int(row_key.value))

    def action_mark(self) -> None:
        v = self.selected()
        if v is not None:
            self.marked = None if self.marked == v.id else v.id
            self.show(self.history)

    def action_diff(self) -> None:
        v = self.selected()
        if v is None:
            return
        other = self.history.get(self.marked) if self.marked is not None else self.history.baseline
        if other is None or other.id == v.id:
            self.app.notify("mark another variant with space (or record a baseline) to diff against", title="history")
            return
        self.app.show_diff(other, v)

    def action_restore(self) -> None:
        v = self.selected()
        if v is not None:
            self.app.restore_variant(v)
