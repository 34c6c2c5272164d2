"""Profile ranking: kernels by total GPU time, sortable by any column, filtered by name.
Enter on a kernel asks the app to extract it. The captured kernel is marked. A
reproducer without a profile shows the app's launch counts up to the capture instead
(launches.json, recorded by `kerncap extract`: counts, no times). A sequence
(docs/sequences.md) shows its launches in order instead, each with its stream and its
replayed time (a worker times them on the session's replay server once it opens)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Input, Static

from kerncap import api
from kerncap.core.units import format_dim
from kerncap.errors import KerncapError
from kerncap_tui import messages
from kerncap_tui.messages import ExtractRequested
from kerncap_tui.terminal import one_line, plain

PROFILE_FILE = "profile.json"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


# key, label, value of a KernelStat used for display and for sorting
COLUMNS = [
    ("percent", "%", lambda k: (f"{k.percent:5.1f}", k.percent)),
    ("total", "total ms", lambda k: (_ms(k.total_ns), k.total_ns)),
    ("calls", "calls", lambda k: (str(k.calls), k.calls)),
    ("avg", "avg µs", lambda k: (f"{k.avg_ns / 1e3:.1f}", k.avg_ns)),
    ("kernel", "kernel", lambda k: (k.demangled or k.name, (k.demangled or k.name).lower())),
    ("min", "min µs", lambda k: (f"{k.min_ns / 1e3:.1f}", k.min_ns)),
    ("max", "max µs", lambda k: (f"{k.max_ns / 1e3:.1f}", k.max_ns)),
    ("grid", "grid", lambda k: (format_dim(k.grid, sep="×", trim=False), str(k.grid))),
    ("block", "block", lambda k: (format_dim(k.block, sep="×", trim=False), str(k.block))),
]
# The capture run's launch counts (kerncap.api.AppLaunches): no times.
LAUNCH_COLUMNS = [
    ("calls", "launches", lambda k: (f"{k.calls:,}", k.calls)),
    ("kernel", "kernel", lambda k: (k.name, k.name.lower())),
]
CAPTURED_STYLE = "bold reverse"


@dataclass
class LaunchRow:
    """One launch of a sequence, as the pane lists it (`ms`: its replayed median, once timed)."""

    index: int
    name: str
    demangled: str
    stream: int
    grid: tuple
    block: tuple
    ms: float | None = None


SEQUENCE_COLUMNS = [
    ("launch", "#", lambda l: (str(l.index), l.index)),
    ("ms", "ms", lambda l: ("…" if l.ms is None else f"{l.ms:.4f}", -1.0 if l.ms is None else l.ms)),
    ("stream", "stream", lambda l: (str(l.stream), l.stream)),
    ("kernel", "kernel", lambda l: (l.demangled or l.name, (l.demangled or l.name).lower())),
    ("grid", "grid", lambda l: (format_dim(l.grid, sep="×", trim=False), str(l.grid))),
    ("block", "block", lambda l: (format_dim(l.block, sep="×", trim=False), str(l.block))),
]


def fit_columns(table: DataTable, rows: list[list]) -> None:
    """Each column as wide as its widest cell, before the rows go in. The table measures new
    rows only when it next idles, and a frame drawn before that is cached at the labels'
    widths until the rows change again (Textual's DataTable: its row cache does not key on
    the widths): under load a kernel name stayed cut to "init\\x" (tests/tui/test_hostile_text.py)."""
    for n, column in enumerate(table.ordered_columns):
        widths = [column.label.cell_len, *(cell_len(row[n]) for row in rows if n < len(row))]
        column.content_width = max(column.content_width, *widths)


def cell_len(cell) -> int:
    return cell.cell_len if isinstance(cell, Text) else len(str(cell))


class ProfilePane(Vertical):
    DEFAULT_CLASSES = "session-pane"  # told of the open session (kerncap_tui.messages)
    BINDINGS = [
        Binding("slash", "focus_filter", "Filter", id="profile.filter"),
        Binding("s", "sort_next", "Sort", id="profile.sort"),
        Binding("R", "sort_reverse", "Reverse", id="profile.reverse"),
        Binding("x", "extract", "Extract", id="profile.extract"),
        # a sequence: mark a range of launches (its first, then its last), fuse it into one kernel;
        # in the status line and the palette, not the footer: at 80 columns it must keep `q Quit`
        Binding("m", "mark_range", "Mark range", id="profile.mark", show=False),
        Binding("F", "fuse", "Fuse range", id="profile.fuse", show=False),
    ]

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.kernels: list = []
        self.sort_column = "total"
        self.sort_reverse = True
        self.columns = COLUMNS
        self.captured: set[str] = set()  # names (mangled and demangled) of the captured kernel
        self.note = ""
        self.selected_launch: int | None = None  # a sequence: the launch the other panes follow
        self.marked: tuple[int, int] | None = None  # a sequence: the range to fuse (first, last), inclusive
        self.shown_count = 0
        self.profile = None  # the loaded api.ProfileResult (its command prefills extraction)

    # -- the open session ------------------------------------------------------------------
    def on_session_opened(self, message: messages.SessionOpened) -> None:
        k = message.capture.kernel if message.capture is not None else {}
        self.captured = {n for n in (k.get("name"), k.get("demangled")) if n}
        self.profile = None
        self.selected_launch = None
        seq = getattr(message.capture, "sequence", None)
        if seq is not None:
            self.show_sequence(seq)
            if message.session is not None:
                self.time_launches(message.session)
            return
        self.load(message.root)

    # -- a sequence: its launches in order, timed on the session's replay server -------------
    def show_sequence(self, seq) -> None:
        if self.columns is not SEQUENCE_COLUMNS:
            self._use_columns(SEQUENCE_COLUMNS, "launch")
        self.sort_reverse = False
        self.captured = set()
        self.kernels = [LaunchRow(l.index, seq.kernels[l.kernel].name, seq.kernels[l.kernel].demangled, l.stream,
                                  l.grid, l.block) for l in seq.launches]
        self.selected_launch = 0 if self.kernels else None
        self.marked = None
        self.note = ""
        self.refill()

    def _index_cell(self, row: LaunchRow):
        """The launch's number, with the marked range drawn beside it (┏ first, ┃, ┗ last)."""
        text = str(row.index)
        if self.marked is None or not self.marked[0] <= row.index <= self.marked[1]:
            return text
        first, last = self.marked
        mark = "◆" if first == last else "┏" if row.index == first else "┗" if row.index == last else "┃"
        return Text(f"{mark} {text}", style="bold yellow")

    def action_mark_range(self) -> None:
        """m on a launch marks it as the range's first; m on another makes it the range's
        other end; m again starts a new range (on the marked launch alone: clears it)."""
        if self.columns is not SEQUENCE_COLUMNS or self.selected_launch is None:
            self.app.notify("m marks a range of a sequence's launches", title="fusion")
            return
        at = self.selected_launch
        old = self.marked
        if old is not None and old[0] == old[1]:
            self.marked = None if old[0] == at else (min(old[0], at), max(old[0], at))
        else:
            self.marked = (at, at)
        # only the marks change: the rows stay (a refill would move the cursor, and the selection, to the top)
        table = self.query_one(DataTable)
        for lo, hi in {old or (0, -1), self.marked or (0, -1)}:
            for i in range(lo, hi + 1):
                if str(i) in table.rows:
                    table.update_cell(str(i), "launch", self._index_cell(self.kernels[i]), update_width=True)
        self._status()

    def action_fuse(self) -> None:
        if self.columns is not SEQUENCE_COLUMNS:
            self.app.notify("F fuses launches of a sequence (kerncap extract --sequence)", title="fusion")
            return
        if self.marked is None:
            self.app.notify("mark the range's first and last launch with m, then F", title="fusion")
            return
        self.post_message(messages.FuseRequested(*self.marked))

    def _launch_cell(self, row: LaunchRow):
        text = one_line(SEQUENCE_COLUMNS[3][2](row)[0])
        return Text(f"▶ {text}", style=CAPTURED_STYLE) if row.index == self.selected_launch else Text(text)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """A sequence: the launch under the cursor is the selected one; the app has Memory
        and Source follow it."""
        if self.columns is not SEQUENCE_COLUMNS or event.row_key is None:
            return
        row = self.kernels[int(event.row_key.value)]
        if row.index == self.selected_launch:
            return
        old, self.selected_launch = self.selected_launch, row.index
        table = self.query_one(DataTable)
        for i in (old, row.index):
            if i is not None and str(i) in table.rows:
                table.update_cell(str(i), "kernel", self._launch_cell(self.kernels[i]))
        self._status()
        self.post_message(messages.LaunchSelected(row.index))

    @work(thread=True, exclusive=True, group="profile")
    def time_launches(self, session) -> None:
        call = self.app.call_from_thread
        try:
            result = session.replay(api.ReplayRequest(iterations=10, warmup=2, per_launch=True))
        except KerncapError as exc:
            call(self.show_note, f"launch times: {exc.message}")
            return
        call(self.show_launch_times, result.launches or [], result.median_ms,
             getattr(session, "sequence_order", None) or "streams")

    def show_launch_times(self, launches: list[dict], whole_ms: float, order: str = "streams") -> None:
        for row, timed in zip(self.kernels, launches):
            row.ms = timed["median_ms"]
        self.note = f"whole {whole_ms:.4f} ms ({order} order)"
        self.refill()

    def show_note(self, text: str) -> None:
        self.note = text
        self.refill()

    @staticmethod
    def profile_path(root: Path) -> Path | None:
        """The reproducer's own profile.json, else the newest profile of a workspace."""
        own = root / PROFILE_FILE
        if own.is_file():
            return own
        saved = api.Workspace(root).profiles()
        return saved[0] if saved else None

    @work(thread=True, exclusive=True, group="profile")
    def load(self, root: Path) -> None:
        """The profile (or, without one, the capture run's launch counts) of `root`."""
        call = self.app.call_from_thread
        path = self.profile_path(root)
        if path is None:
            try:
                launches = api.AppLaunches.load(root)
            except KerncapError as exc:
                launches = None
                call(self.app.report_error, "profile", exc)
            if launches is not None:
                call(self.show_launches, launches)
                return
            call(self.show_message, f"no profile in {root}: `kerncap profile -- CMD` writes one")
            return
        try:
            profile = api.ProfileResult.load(path)
        except KerncapError as exc:
            call(self.show_message, exc.message)
            call(self.app.report_error, "profile", exc)
            return
        self.profile = profile
        call(self.show, profile.kernels)

    def compose(self) -> ComposeResult:
        yield Input(placeholder="/ filter kernels (substring)", id="profile-filter", compact=True)
        yield DataTable(id="profile-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="profile-status", classes="status")

    def on_mount(self) -> None:
        self._use_columns(COLUMNS, "total")

    def _use_columns(self, columns: list, sort: str) -> None:
        table = self.query_one(DataTable)
        table.clear(columns=True)
        for key, label, _ in columns:
            table.add_column(label, key=key)
        self.columns, self.sort_column, self.sort_reverse = columns, sort, True

    def show(self, kernels: list, note: str = "") -> None:
        if self.columns is not COLUMNS:
            self._use_columns(COLUMNS, "total")
        self.kernels = list(kernels)
        self.note = note
        self.refill()

    def show_launches(self, launches) -> None:
        """The capture run's ranking by launches (kerncap.api.AppLaunches)."""
        if self.columns is not LAUNCH_COLUMNS:
            self._use_columns(LAUNCH_COLUMNS, "calls")
        self.kernels = list(launches.kernels)
        self.captured |= {k.name for k in launches.kernels if k.captured}
        self.note = (f"capture run: {launches.launches:,} launches in {launches.processes} process(es); "
                     f"{launches.note}")
        self.refill()

    def show_message(self, text: str) -> None:
        self.kernels = []
        self.note = ""
        self.refill()
        self.query_one("#profile-status", Static).update(plain(text))

    def _is_captured(self, k) -> bool:
        return k.name in self.captured or (getattr(k, "demangled", "") or "") in self.captured

    def refill(self) -> None:
        table = self.query_one(DataTable)
        needle = self.query_one(Input).value.strip().lower()
        table.clear()
        shown = [
            (i, k) for i, k in enumerate(self.kernels)
            if needle in k.name.lower() or needle in (getattr(k, "demangled", "") or "").lower()
        ]
        sort_index = [c[0] for c in self.columns].index(self.sort_column)
        shown.sort(key=lambda ik: self.columns[sort_index][2](ik[1])[1], reverse=self.sort_reverse)
        rows = []
        for i, k in shown:  # keyed by position: a profile may list one name twice (template instances)
            # Text, not str: a DataTable reads a str cell as markup, and a name is the profile's
            cells = [Text(one_line(fn(k)[0])) for _, _, fn in self.columns]
            if self.columns is SEQUENCE_COLUMNS:
                cells[0] = self._index_cell(k)
                cells[3] = self._launch_cell(k)
            elif self._is_captured(k):
                at = [c[0] for c in self.columns].index("kernel")
                cells[at] = Text(f"▶ {cells[at].plain}", style=CAPTURED_STYLE)
            elif getattr(k, "autotune_helper", False):  # XLA's autotuning, not the app's work
                at = [c[0] for c in self.columns].index("kernel")
                cells[at] = Text(f"* {cells[at].plain}", style="dim")
            rows.append((cells, str(i)))
        fit_columns(table, [cells for cells, _ in rows])
        for cells, key in rows:
            table.add_row(*cells, key=key)
        self.shown_count = len(shown)
        self._status()

    def _status(self) -> None:
        arrow = "↓" if self.sort_reverse else "↑"
        marked = " · ▶ captured" if any(self._is_captured(k) for k in self.kernels) else ""
        if any(getattr(k, "autotune_helper", False) for k in self.kernels):
            marked += " · * XLA autotuning"
        what, verb = ("launches", "") if self.columns is SEQUENCE_COLUMNS else ("kernels", " · enter/x: extract")
        if self.columns is SEQUENCE_COLUMNS and self.selected_launch is not None:
            marked = f" · ▶ launch {self.selected_launch} (Memory, Source follow it)"
            if self.marked is None:
                marked += " · m: mark a range to fuse"
            elif self.marked[0] == self.marked[1]:
                marked += f" · range from {self.marked[0]}: m on its last launch"
            else:
                marked += f" · range {self.marked[0]}-{self.marked[1]}: F fuses it"
        self.query_one("#profile-status", Static).update(plain(
            f"{self.shown_count}/{len(self.kernels)} {what} · sorted by {self.sort_column} {arrow}{marked}{verb}"
            + (f" · {self.note}" if self.note else "")
        ))

    def on_input_changed(self, event: Input.Changed) -> None:
        self.refill()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one(DataTable).focus()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        self.sort_reverse = not self.sort_reverse if key == self.sort_column else key != "kernel"
        self.sort_column = key
        self.refill()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if self.columns is SEQUENCE_COLUMNS:
            return  # a sequence's launch: nothing to extract, it is in the reproducer
        self.post_message(ExtractRequested(self.kernels[int(event.row_key.value)].name))

    def action_focus_filter(self) -> None:
        self.query_one(Input).focus()

    def action_sort_next(self) -> None:
        keys = [c[0] for c in self.columns]
        self.sort_column = keys[(keys.index(self.sort_column) + 1) % len(keys)]
        self.sort_reverse = self.sort_column != "kernel"
        self.refill()

    def action_sort_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.refill()

    def action_extract(self) -> None:
        table = self.query_one(DataTable)
        if table.row_count and self.columns is not SEQUENCE_COLUMNS:
            row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
            self.post_message(ExtractRequested(self.kernels[int(row_key.value)].name))
