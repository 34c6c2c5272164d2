"""The workbench on a reproducer set (kerncap.api.ReproducerSet): the Profile tab lists the members
with their weights (each member's share of the kernel's in-app time) and their last
result, the Memory tab shows the selected member, and a save in the set's source/
rebuilds one variant for every member, validates and times every member, and records
one History row whose speedup is the workload-weighted one, with the worst member in
its note (also shown under the History table)."""

from __future__ import annotations

from pathlib import Path

from textual.containers import Vertical
from textual.widgets import DataTable, Static

from kerncap_tui import engine
from kerncap.core.units import speedup_text
from kerncap_tui.messages import BuildLog, HistoryChanged
from kerncap_tui.widgets.history_pane import HistoryPane


class SetMembersPane(Vertical):
    """The members of the open set: weight, dispatch, launches, signature, last result."""

    def __init__(self, s, **kw) -> None:
        super().__init__(**kw)
        self.set = s

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
                      speedup_text(r.speedup if r else None), valid, m.signature, key=str(m.index))
        refused = len(self.set.refused)
        status = f"{len(self.set.members)} member(s) of {self.set.demangled}"
        if refused:
            status += f" · {refused} bucket(s) not captured (kerncap info)"
        if run and run.workload:
            worst = run.runs[run.workload.worst_member].member
            status += f" · weighted {speedup_text(run.workload.weighted)} · worst #{worst.index}"
        self.query_one("#members-status", Static).update(status + " · enter: show in Memory")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        index = int(event.row_key.value)
        member = next(m for m in self.set.members if m.index == index)
        self.app.show_member(member)


def annotate_history(pane: HistoryPane, history) -> None:
    """Under the History table of a set: the latest variant's weighted speedup and worst
    member (its note)."""
    latest = history.variants[-1] if history and history.variants else None
    if latest is not None and latest.id and latest.note:
        status = pane.query_one("#history-status", Static)
        status.styles.height = "auto"  # the note takes a line of its own
        status.update(f"{latest.label}: {latest.note}\n{status.content}")


def workload_ms(s, run) -> float | None:
    """The set's time on the workload's scale: sum of weight x member time, each member's
    variant time scaled by its own baseline, so that baseline / variant is the
    workload-weighted speedup (SetRun.workload)."""
    if any(r.baseline is None for r in run.runs):
        return None
    scale = sum(m.weight * r.baseline.median_ms for m, r in zip(s.members, run.runs))
    if run.workload is None:
        return scale
    return scale / run.workload.weighted


def _verdict(run) -> tuple[str, str]:
    errors = [r for r in run.runs if r.error]
    failed = [r for r in run.runs if r.validation is not None and not r.validation.passed]
    if errors:
        return "error", f"member #{errors[0].member.index}: {errors[0].error}"
    if failed:
        trust = run.trust  # pass | fail | inconclusive over every member's inputs
        verdict = trust.verdict if trust is not None else "fail"
        return verdict, "member(s) " + ", ".join(f"#{r.member.index}" for r in failed) + \
            (" differ" if verdict == "fail" else f": {verdict}") + (f" ({trust.summary()})" if trust else "")
    return "pass", ""


def record_baseline(app) -> None:
    s = app.set
    app.post_message(BuildLog(f"timing the captured cubin on {len(s.members)} member(s) (baseline) …"))
    run = engine.run_set(s, None)
    validation, detail = _verdict(run)
    app.history.record(baseline=True, median_ms=workload_ms(s, run), validation=validation,
                       note=detail or f"weighted over {len(s.members)} members")
    app.call_from_thread(app.show_set_run, run)
    app.post_message(BuildLog(f"baseline: workload {workload_ms(s, run) or 0:.4f} ms, validation {validation}"))
    app.post_message(HistoryChanged())


def build(app, worker) -> None:
    """recompile the set's source → (baseline once) → validate and time every member →
    one History row. A newer save cancels the worker; its result is dropped."""
    s = app.set
    app.post_message(BuildLog(f"recompiling the set's source for {len(s.members)} member(s) …"))
    v = engine.recompile_set(s)
    app.post_message(BuildLog(f"built {v.path.name}: {v.builds} build(s) in {v.seconds:.2f} s"))
    if worker.is_cancelled:
        app.post_message(BuildLog("superseded by a newer save", "dim"))
        return
    if app.history.baseline is None:
        record_baseline(app)
    run = engine.run_set(s, v.path)
    if worker.is_cancelled:
        app.post_message(BuildLog("superseded by a newer save", "dim"))
        return
    validation, detail = _verdict(run)
    note = detail
    if run.workload:
        worst = run.runs[run.workload.worst_member]
        note = (f"weighted {speedup_text(run.workload.weighted, 3)} over {len(s.members)} members; worst "
                f"#{worst.member.index} {speedup_text(worst.speedup)} ({worst.member.signature})"
                + (f"; {detail}" if detail else ""))
    rel = str(Path(v.path).relative_to(s.root))
    recorded = app.history.record(median_ms=workload_ms(s, run), validation=validation, cubin=rel,
                                  build_seconds=v.seconds, note=note)
    app.call_from_thread(app.show_set_run, run)
    app.post_message(BuildLog(f"{recorded.label}: {note or validation}", "bold" if validation == "pass" else "bold red"))
    app.post_message(HistoryChanged())
