"""The workbench's side of the Mismatch pane (kerncap_tui.widgets.mismatch_pane): the
maps of the variant selected in History — against the captured post-state, or against
the variant marked with space (two variants compared) — computed on the GPU by the
resident replay server in a thread worker, and `w`'s arrays written with kerncap.api.dump.

A mixin of KerncapApp (kerncap_tui.app); needs self.root, self.session, report_error."""

from __future__ import annotations

from pathlib import Path

from textual import work

from kerncap import api
from kerncap.errors import KerncapError
from kerncap_tui.widgets.mismatch_pane import MismatchPane, MismatchRequest


class MismatchActions:
    def _open_session(self):
        session = self.session
        if session is None or getattr(session, "is_set", False):
            raise KerncapError(f"{self.root} is not one open reproducer",
                               "open a reproducer (a set's members: open one of them) to map where it differs")
        return session

    def _cubin_of(self, variant) -> str | None:
        return None if variant is None or variant.cubin is None else str(self.root / variant.cubin)

    def on_mismatch_pane_load_selected(self, message: MismatchPane.LoadSelected) -> None:
        from kerncap_tui.widgets.history_pane import HistoryPane

        history = self.query_one(HistoryPane)
        v = history.selected()
        if v is None:
            self.notify("select a variant in History (4) first", title="mismatch")
            return
        marked = history.history.get(history.marked) if history.marked is not None else None
        if marked is not None and marked.id == v.id:
            marked = None
        request = MismatchRequest(cubin=self._cubin_of(v), label=v.label, grid=message.grid)
        if marked is not None:
            request.against = self._cubin_of(marked) or "baseline"
            request.against_label = marked.label
        self.load_mismatch(request)

    def on_mismatch_pane_requested(self, message: MismatchPane.Requested) -> None:
        self.load_mismatch(message.request)

    @work(thread=True, exclusive=True, group="mismatch")
    def load_mismatch(self, request: MismatchRequest) -> None:
        pane = self.query_one(MismatchPane)
        self.call_from_thread(pane.show_message, f"mapping {request.label} against {request.against_label} "
                                                 "on the GPU …")
        try:
            session = self._open_session()
            maps = session.mismatch_maps(cubin=request.cubin, against=request.against,
                                         perturbation=request.perturbation, items=request.items, shape=request.shape,
                                         views=request.views, grid=request.grid)
        except KerncapError as exc:
            self.call_from_thread(pane.show_message, f"{request.label}: {exc.message}")
            self.call_from_thread(self.report_error, "mismatch", exc)
            return
        for m in maps:
            m.actual_label = request.label
            m.expected_label = request.against_label
        self.call_from_thread(pane.show, maps, request)

    def on_mismatch_pane_write_arrays(self, message: MismatchPane.WriteArrays) -> None:
        self.write_mismatch_arrays(message.request, message.item)

    @work(thread=True, group="mismatch-write")
    def write_mismatch_arrays(self, request: MismatchRequest, item: str) -> None:
        name = item.replace("region ", "").replace("global ", "global:")
        against = "captured" if request.against is None else Path(request.against).stem
        out = self.root / "dumps" / f"{Path(request.cubin).stem if request.cubin else 'captured'}-vs-{against}"
        try:
            result = self._open_session().dump([name], ["pre", "post", "output", "expected"], cubin=request.cubin,
                                               perturbation=request.perturbation, shape=request.shape, output=out)
        except KerncapError as exc:
            self.call_from_thread(self.report_error, "write arrays", exc)
            return
        self.call_from_thread(self.log_line, api.format_dump(result))
        self.call_from_thread(self.notify, f"{len(result.arrays)} arrays in {result.directory}", title="mismatch")
