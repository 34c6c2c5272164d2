"""The workbench on a reproducer set (kerncap.api.SetSession): the Profile tab lists the
members with their weights (each member's share of the kernel's in-app time) and their
last result, the Memory tab shows the selected member. A save in the set's source/ is
the session's build (one variant for every member, each validated and timed, one
History row whose speedup is the workload-weighted one, the worst member in its note,
also shown under the History table)."""

from __future__ import annotations

from textual.containers import Vertical
from textual.widgets import DataTable, Static

from kerncap.core.units import speedup_text
from kerncap_tui.terminal import one_line, plain
from kerncap_tui import messages


class SetMembersPane(Vertical):
    """The members of the open set: weight, dispatch, launches, signature, last result."""

    def __init__(self, s, **kw) -> None:
        super().__init__(**kw)
        self.set = s

    def on_build_finished(self, message: messages.BuildFinished) -> None:
        run = getattr(message.result, "set_run", None)
        if run is not None:
            self.show_results(run)

    def compose(self):
        yield DataTable(id="members-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="members-status", classes="status")

    def on_mount(self) -> None:
        t = self.query_one(DataTable)
        for label in ("#", "weight", "dispatch", "launches", "speedup", "valid", "signature"):
            t.add_column(label, key=label)
        self.show_results(None)

    def show_results(self, run) -> None:
        """`run`: the last kerncap.api.SetRun (None before the first build)."""
        t = self.query_one(DataTable)
        t.clear()
        by_index = {r.member.index: r for r in run.runs} if run else {}
        for m in self.set.members:
            r = by_index.get(m.index)
            valid = "" if r is None else ("error" if r.error else "✓ pass" if r.validation and r.validation.passed
                                          else "✗ FAIL" if r.validation else "")
            t.add_row(str(m.index), f"{100 * m.weight:5.1f}%", str(m.dispatch),
                      "?" if not m.bucket else f"{m.bucket.launches:,}",
                      speedup_text(r.speedup if r else None), valid, plain(one_line(m.signature)), key=str(m.index))
        refused = len(self.set.refused)
        status = f"{len(self.set.members)} member(s) of {self.set.demangled}"
        if refused:
            status += f" · {refused} bucket(s) not captured (kerncap info)"
        if run and run.workload:
            worst = run.runs[run.workload.worst_member].member
            status += f" · weighted {speedup_text(run.workload.weighted)} · worst #{worst.index}"
        self.query_one("#members-status", Static).update(plain(status + " · enter: show in Memory"))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        index = int(event.row_key.value)
        member = next(m for m in self.set.members if m.index == index)
        self.app.show_member(member)
