"""Timing history: every variant against the baseline (bar, median, speedup with its
confidence interval or "within noise", what the validation covered, Nsight Compute /
compute-sanitizer results once measured, and what `kerncap apply` found in the app once a
variant was applied: "in app"); diff any two (sources or metrics), restore
any one, profile or sanitize one; a plot of the medians once there are a few."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from kerncap_tui import variant_inspect as VI
from kerncap.core.units import interval_text, speedup_text
from kerncap_tui.terminal import plain
from kerncap_tui import messages
from kerncap_tui.charts import bar, speedup_cells
from kerncap_tui.widgets.history_plot import HistoryPlot

BAR_WIDTH = 16
# A sequence's extra columns (the median is the whole sequence's time).
SEQUENCE_COLUMNS = ("rebuilt kernel", "its launches ms")
IN_APP = "in app"  # shown once a variant was applied (kerncap apply: --check verdict, kernel speedup in the app)
VALIDATION_STYLE = {"pass": ("✓ pass", "green"), "fail": ("✗ FAIL", "bold red"),
                    "inconclusive": ("? inconclusive", "yellow"), "error": ("! error", "yellow"),
                    "skipped": ("– skipped", "dim")}


def speedup_phrase(v) -> str:
    """One phrase for the log and notifications: "1.32× [1.21–1.35]", "within noise
    (0.97–1.08)", "1.06× (no interval)" (the engine's: kerncap.api.speedup_phrase)."""
    from kerncap import api

    return api.speedup_phrase(v)


def in_app_cell(v) -> Text:
    """The last `kerncap apply` of the row (Variant.in_app): the --check verdict over the
    launches compared, then the kernel's in-app GPU-time speedup with its interval."""
    a = v.in_app
    if not a:
        return Text("")
    if a.get("check") == "fail":
        text = Text(f"✗ launch {a.get('mismatch_launch')}", style="bold red")
    elif a.get("check") in ("unsteady", "nothing"):  # the app's own runs differ, or nothing compared: no verdict
        text = Text(f"? {a.get('compared')}/{a.get('launches')}", style="yellow")
    elif a.get("check") == "pass":
        text = Text(f"✓ {a.get('compared')}/{a.get('launches')}", style="green")
    else:
        text = Text(f"{a.get('substituted')}/{a.get('launches')} run", style="dim")
    k, low, high = a.get("kernel_speedup"), a.get("kernel_low"), a.get("kernel_high")
    if k is not None:
        text.append(f" · {speedup_text(k)}" + (f" [{interval_text(low, high)}]" if low is not None else ""))
    return text


def validation_cell(v) -> Text:
    label, style = VALIDATION_STYLE.get(v.validation, (v.validation, ""))
    if v.validation == "pass" and v.validation_detail:
        label = f"✓ {v.validation_detail}"
    return Text(label, style=style)


class HistoryPane(Vertical):
    DEFAULT_CLASSES = "session-pane"  # told of the open session (kerncap_tui.messages)
    BINDINGS = [
        Binding("space", "mark", "Mark", id="history.mark"),
        Binding("d", "diff", "Diff", id="history.diff"),
        Binding("ctrl+r", "restore", "Restore", id="history.restore"),
        # In the status line and the palette, not the footer: at 80 columns it must keep `q Quit`.
        Binding("n", "ncu", "Nsight Compute", id="history.ncu", show=False),
        Binding("k", "sanitize", "Sanitize", id="history.sanitize", show=False),
        Binding("a", "apply", "Apply in the app", id="history.apply", show=False),
        Binding("m", "metrics_diff", "Metrics diff", id="history.metrics-diff", show=False),
        Binding("c", "cancel_tool", "Cancel tool", id="history.cancel", show=False),
    ]
    BASE_COLUMNS = ("", "variant", "median ms", "time vs baseline", "speedup", "interval", "valid", "commit")

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.history = None
        self.marked: int | None = None
        self.inspect: dict[int, VI.VariantInspect] = {}
        self._extra: tuple[str, ...] = ()
        self.is_set = False
        self.capture = None  # a sequence's rows name the rebuilt kernel and its launches' time

    # -- the open session ------------------------------------------------------------------
    def on_session_opened(self, message: messages.SessionOpened) -> None:
        self.is_set = bool(getattr(message.session, "is_set", False))
        self.capture = message.capture
        self.marked = None
        self.show(message.history, {})

    def on_build_finished(self, message: messages.BuildFinished) -> None:
        self.show(message.history, message.inspect)

    def on_tool_finished(self, message: messages.ToolFinished) -> None:
        self.show(message.history, message.inspect)

    def compose(self) -> ComposeResult:
        yield DataTable(id="history-table", cursor_type="row", zebra_stripes=True)
        yield HistoryPlot(id="history-plot")
        yield Static("", id="history-status", classes="status")

    def on_mount(self) -> None:
        self._columns(())

    def _columns(self, extra: tuple[str, ...]) -> None:
        """The base columns, then the tool columns that have a value in some variant."""
        t = self.query_one(DataTable)
        t.clear(columns=True)
        for label in self.BASE_COLUMNS + extra:
            t.add_column(label, key=label or "mark")
        self._extra = extra

    def show(self, history, inspect: dict | None = None) -> None:
        self.history = history
        if inspect is not None:
            self.inspect = inspect
        extra = (tuple(h for _, h in VI.METRIC_COLUMNS) if any(i.ncu for i in self.inspect.values()) else ()) + (
            ("sanitizer",) if any(i.sanitize for i in self.inspect.values()) else ())
        if getattr(self.capture, "sequence", None) is not None:
            extra = SEQUENCE_COLUMNS + extra
        if history and any(v.in_app for v in history.variants):
            extra += (IN_APP,)
        t = self.query_one(DataTable)
        cursor = t.cursor_row
        if extra != self._extra:
            self._columns(extra)
        t.clear()
        variants = history.variants if history else []
        timed = [v.median_ms for v in variants if v.median_ms]
        scale = max(timed) if timed else 0.0
        for v in variants:
            speedup, interval = speedup_cells(history, v)
            info = self.inspect.get(v.id)
            tools = []
            if any(h in extra for _, h in VI.METRIC_COLUMNS):
                metrics = info.ncu.metrics if info and info.ncu else {}
                tools += [VI.metric_cell(key, metrics.get(key)) if metrics else "" for key, _ in VI.METRIC_COLUMNS]
            if "sanitizer" in extra:
                tools.append(VI.sanitize_cell(info))
            if extra[:2] == SEQUENCE_COLUMNS:
                tools = [*self._sequence_cells(v), *tools]
            if IN_APP in extra:
                tools.append(in_app_cell(v))
            t.add_row(
                "●" if v.id == self.marked else " ",
                Text(v.label, style="bold" if v.id == 0 else ""),
                # `kt`: CUPTI's kernel records timed it (--timer kernel), ~2 µs under an events median
                f"{v.median_ms:.4f}{' kt' if v.timer == 'kernel' else ''}" if v.median_ms is not None else "—",
                Text(bar(v.median_ms, scale, BAR_WIDTH), style="cyan" if v.id else "magenta"),
                speedup,
                interval,
                validation_cell(v),
                (v.commit or "")[:8],
                *tools,
                key=str(v.id),
            )
        if variants:
            t.move_cursor(row=min(max(cursor, 0), len(variants) - 1))
        summary = f"{len(variants)} variant(s)"
        if extra[:2] == SEQUENCE_COLUMNS:
            summary += " · median: the whole sequence"
        if any(v.id for v in variants):
            best = history.best_significant()
            if best is not None:
                summary += (f" · best: {best.label} {speedup_text(best.speedup)} "
                            f"[{interval_text(best.speedup_low, best.speedup_high)}]")
            else:
                summary += " · none significantly faster"
            if any(v.id and not history.has_interval(v) for v in variants):
                summary += " · (…): no interval"
        if any(v.timer == "kernel" for v in variants):
            summary += " · kt: timed by the kernel's records (--timer kernel)"
        status = self.query_one("#history-status", Static)
        status.update(plain(summary + " · space mark · d diff · m metrics diff · n ncu · k sanitize · ctrl+r restore"))
        latest = variants[-1] if variants else None
        if latest is not None and latest.fusion is not None:
            # a fusion's row: what it replaced and left out of the comparison, on a line of its own
            from kerncap import api

            status.styles.height = "auto"
            status.update(plain(f"{latest.label}: fusion {latest.fusion['name']} of launches {latest.fusion['first']}-"
                                f"{latest.fusion['last']}: {api.fusion_phrase(latest)}\n{status.content}"))
        if self.is_set and latest is not None and latest.id and latest.note:
            # A set's row: its weighted speedup and worst member, on a line of its own.
            status.styles.height = "auto"
            status.update(plain(f"{latest.label}: {latest.note}\n{status.content}"))
        self.query_one(HistoryPlot).show(variants)

    def _sequence_cells(self, v) -> tuple[str, str]:
        """(the rebuilt kernel, its launches' replayed time): median_ms is the whole sequence's."""
        from kerncap import api

        if v.fusion is not None:
            f = v.fusion
            fused, replaced = f.get("fused_ms"), f.get("replaced_ms")
            return (f"fused {f['first']}-{f['last']} {f['name']}",
                    "—" if fused is None or replaced is None else f"{fused:.4f} (was {replaced:.4f})")
        if v.kernel is None:
            return "captured", "—"
        ms = api.changed_launch_ms(v, self.capture)
        k = self.capture.sequence.kernels[v.kernel]
        return f"{v.kernel} {(k.demangled or k.name).split('(')[0]}", "—" if ms is None else f"{ms:.4f}"

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

    # -- Nsight Compute / compute-sanitizer (kerncap_tui.inspect_actions) -------------------
    def action_ncu(self) -> None:
        v = self.selected()
        if v is not None:
            self.app.run_ncu(v)

    def action_sanitize(self) -> None:
        v = self.selected()
        if v is not None:
            self.app.run_sanitize(v)

    def action_apply(self) -> None:
        v = self.selected()
        if v is not None:
            self.app.run_apply(v)

    def action_cancel_tool(self) -> None:
        self.app.cancel_tool()

    def action_metrics_diff(self) -> None:
        v = self.selected()
        if v is None:
            return
        other = self.history.get(self.marked) if self.marked is not None else self.history.baseline
        if other is None or other.id == v.id:
            self.app.notify("mark another variant with space (or record a baseline) to compare metrics with",
                            title="history")
            return
        self.app.show_metrics_diff(other, v)
