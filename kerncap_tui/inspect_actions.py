"""The workbench's look inside a variant: Nsight Compute and compute-sanitizer runs, and
`kerncap apply` of a History row in the app it was captured from (thread workers, one at
a time, with progress and cancel), the stored results per variant for History, the
metrics diff, the live split beside the Source editor, and opening the Source pane at the
captured kernel's definition.

A mixin of KerncapApp (kerncap_tui.app), kept apart so the app module stays about the
live loop. Tool runs are the session's (`session.ncu`, `session.sanitize`: their own
replay server under the tool); the resident replay server of the live loop is
untouched, so a build can run meanwhile. When one ends, the panes get ToolFinished."""

from __future__ import annotations

import os
from pathlib import Path

from textual import work

from kerncap import api
from kerncap.errors import KerncapError
from kerncap_tui import variant_inspect as VI
from kerncap_tui.messages import ToolFinished

# Seconds a tool run may take before it is killed (KERNCAP_TOOL_TIMEOUT overrides).
TOOL_TIMEOUT_S = 600.0


class InspectActions:
    """Mixed into KerncapApp: needs self.root, self.history, report_error, log_line."""

    _tool_cancel = None
    inspect: dict = {}
    _tool_ended = None  # the last tool run's variant, name and outcome (for ToolFinished)
    _tool_name = ""
    _tool_ok = None

    @property
    def tool_timeout(self) -> float:
        try:
            return float(os.environ.get("KERNCAP_TOOL_TIMEOUT", TOOL_TIMEOUT_S))
        except ValueError:
            return TOOL_TIMEOUT_S

    # -- stored results -------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="inspect-load")
    def load_inspect(self) -> None:
        """Reads every variant's stored ncu / sanitizer results, then refreshes History."""
        history = self.history
        if history is None:
            return
        found = VI.load_all(self.root, history.variants)
        self.call_from_thread(self._show_inspect, history, found)

    def _show_inspect(self, history, found: dict) -> None:
        if history is not self.history:
            return  # another reproducer was opened meanwhile
        self.inspect = found
        self.tell_panes(lambda: ToolFinished(self._tool_ended, self._tool_name, self._tool_ok, history, found))

    # -- running a tool ---------------------------------------------------------------------
    def run_ncu(self, variant) -> None:
        self._start_tool(variant, "ncu")

    def run_sanitize(self, variant, tool: str = "memcheck") -> None:
        self._start_tool(variant, tool)

    def run_apply(self, variant) -> None:
        """`kerncap apply --variant N --check` in the app the reproducer was captured from
        (the command and directory its capture recorded; the other options ApplyRequest's
        defaults, timing included): the app's output in the Log, the outcome in History's
        "in app" column (the session records it on the row)."""
        if not variant.id or not variant.cubin:
            self.notify("the baseline is the captured kernel itself: select a built variant to apply",
                        title="apply", severity="warning")
            return
        if not self.app_command()[0]:
            self.notify("this capture recorded no command of the app; run `kerncap apply DIR --variant "
                        f"{variant.id} -- CMD…`", title="apply", severity="warning")
            return
        self._start_tool(variant, "apply")

    def app_command(self) -> tuple[tuple[str, ...], str | None]:
        """The app's command and working directory as the capture recorded them."""
        provenance = getattr(getattr(self, "capture", None), "provenance", None) or {}
        command = provenance.get("command") or ()
        ok = isinstance(command, list) and all(isinstance(a, str) for a in command)
        return (tuple(command) if ok else ()), provenance.get("cwd") if isinstance(provenance.get("cwd"), str) else None

    def _start_tool(self, variant, tool: str) -> None:
        from kerncap_tui.widgets.tool_progress import ToolProgress

        if self._tool_cancel is not None:
            self.notify("a tool is already running; c in History cancels it", title="tools", severity="warning")
            return
        cubin = VI.cubin_of(self.root, variant)
        if cubin is not None and not _is_file(cubin):
            self.notify(f"{variant.label}'s cubin {variant.cubin} is gone (variants/ is not versioned); "
                        "restore and rebuild it first", title="tools", severity="warning")
            return
        what = {"ncu": "Nsight Compute", "apply": "kerncap apply"}.get(tool, f"compute-sanitizer {tool}") \
            + f" on {variant.label}" + (" in the app" if tool == "apply" else "")
        cancel = self._tool_cancel = api.Cancellation()
        self.query_one(ToolProgress).start(what)
        self.log_line(f"{what} …")
        self.run_worker(lambda: self._tool_worker(variant, cubin, tool, what, cancel), thread=True,
                        group="inspect", name=tool, exit_on_error=False)

    def _tool_worker(self, variant, cubin: Path | None, tool: str, what: str, cancel) -> None:
        def progress(text: str) -> None:
            self.call_from_thread(self._tool_step, text)

        try:
            session = self.session
            if session is None:
                raise KerncapError(f"{self.root} is not open", "open a reproducer first")
            if tool == "apply":
                summary, text, ok = self._apply(session, variant, cancel)
            elif tool == "ncu":
                r = session.ncu(cubin, timeout=self.tool_timeout, cancel=cancel, progress=progress)
                summary = (f"{variant.label}: ncu {api.format_metric('duration_ns', r.metrics.get('duration_ns'))}, "
                           f"DRAM {api.format_metric('dram_read_bytes', r.metrics.get('dram_read_bytes'))} read")
                text, ok = api.format_ncu(r), True
            else:
                r = session.sanitize(cubin, tool=tool, timeout=self.tool_timeout, cancel=cancel, progress=progress)
                text, ok = api.format_sanitize(r), r.clean
                summary = text.splitlines()[0].replace(f"{tool} on ", f"{tool}: ", 1)
            self.call_from_thread(self._tool_done, variant, tool, what, summary, text, ok)
        except api.Cancelled as exc:
            self.call_from_thread(self._tool_done, variant, tool, what, exc.message, exc.message, None)
        except KerncapError as exc:
            self.call_from_thread(self._tool_failed, what, exc)
        except Exception as exc:  # a bug must not leave the progress line (and the lock) behind
            self.call_from_thread(self._tool_failed, what, KerncapError(
                f"{type(exc).__name__}: {exc}", "this is a kerncap bug; please report it"))

    def _apply(self, session, variant, cancel) -> tuple[str, str, bool]:
        command, cwd = self.app_command()
        lines = _Lines(lambda line: self.call_from_thread(self.log_line, line, "dim"))
        request = api.options.ApplyRequest(command=command, cwd=cwd, variant=variant.id, check=True)
        self.call_from_thread(self._tool_step, f"running {command[0]} …")
        try:
            r = session.apply(request, output=lines, cancelled=lambda: cancel.cancelled)
        finally:
            lines.flush()
        text = r.text()
        return f"{variant.label} in the app: {text.splitlines()[1] if r.check else text.splitlines()[0]}", text, \
            r.exit_status == 0

    def _tool_step(self, text: str) -> None:
        from kerncap_tui.widgets.tool_progress import ToolProgress

        self.query_one(ToolProgress).update_step(text)

    def _tool_finished(self) -> None:
        from kerncap_tui.widgets.tool_progress import ToolProgress

        self._tool_cancel = None
        self.query_one(ToolProgress).stop()
        self.load_inspect()

    def _tool_done(self, variant, tool: str, what: str, summary: str, text: str, ok: bool | None) -> None:
        self._tool_ended, self._tool_name, self._tool_ok = variant, tool, ok
        self._tool_finished()
        self.log_line(text, "" if ok is not False else "red")
        severity = "information" if ok else ("warning" if ok is None else "error")
        self.notify(summary, title=what if ok is not None else "cancelled", severity=severity, timeout=8)

    def _tool_failed(self, what: str, exc: KerncapError) -> None:
        self._tool_finished()
        self.report_error(what, exc)

    def cancel_tool(self) -> None:
        if self._tool_cancel is None:
            self.notify("no Nsight Compute, compute-sanitizer or apply run to cancel", title="tools")
            return
        self._tool_step("cancelling …")
        self._tool_cancel.cancel()

    # -- metrics diff -------------------------------------------------------------------------
    def show_metrics_diff(self, a, b) -> None:
        from kerncap_tui.screens.metrics_diff import MetricsDiffScreen

        ia, ib = self.inspect.get(a.id), self.inspect.get(b.id)
        missing = [v.label for v, i in ((a, ia), (b, ib)) if i is None or i.ncu is None]
        if missing:
            self.notify(f"no Nsight Compute metrics for {' and '.join(missing)} yet: select it and press n",
                        title="metrics diff", severity="warning")
            return
        self.push_screen(MetricsDiffScreen(a.label, ia.ncu, b.label, ib.ncu))

    # -- live split beside the editor -----------------------------------------------------------
    def action_split_toggle(self) -> None:
        from kerncap_tui.widgets.live_history import LiveHistory

        self.query_one(LiveHistory).toggle(self.size.width)

    def action_split_resize(self, delta: int) -> None:
        from kerncap_tui.widgets.live_history import LiveHistory

        self.query_one(LiveHistory).resize(delta, self.size.width)

    def fit_split(self, width: int | None = None) -> None:
        """Show the split for `width` columns (a resize's new width; else the terminal's)."""
        from kerncap_tui.widgets.live_history import LiveHistory

        for live in self.query(LiveHistory):
            live.fit(self.size.width if width is None else width)


class _Lines:
    """The app's output, whole lines at a time (an OutputSink: stream, bytes)."""

    def __init__(self, emit) -> None:
        self.emit, self.partial = emit, {"stdout": b"", "stderr": b""}

    def __call__(self, stream: str, data: bytes) -> None:
        *done, self.partial[stream] = (self.partial[stream] + data).split(b"\n")
        for line in done:
            self.emit(line.decode(errors="replace"))

    def flush(self) -> None:
        for stream, rest in self.partial.items():
            if rest:
                self.emit(rest.decode(errors="replace"))
            self.partial[stream] = b""


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a recorded name the file system cannot hold (history.json travels)
        return False
