"""Extract a kernel from the profiled application: command line, dispatch index, output
directory; or a sequence of launches (docs/sequences.md: an NVTX range's instance, the
graph launch running the dispatch, a run from the dispatch bounded by a count or a kernel)
through the engine's extract arguments (kerncap.api.sequence_extract_arguments). The extraction runs in a worker (the app keeps responding); this screen
shows that it is running and how long it has been."""

from __future__ import annotations

import shlex
import shutil
import time
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.timer import Timer
from rich.text import Text
from textual.widgets import Button, Input, Label, ProgressBar, Select
from textual.worker import get_current_worker

from kerncap import api
from kerncap.errors import KerncapError
from kerncap_tui.screens.form_screen import FormScreen
from kerncap_tui.terminal import one_line, plain


# what the dialog captures: None one dispatch, else a sequence mode (kerncap.api.SEQUENCE_MODES)
WHAT = [("one dispatch", ""), ("sequence: an NVTX range's instance", "nvtx"),
        ("sequence: the graph launch running the dispatch", "graph"),
        ("sequence: a run from the dispatch", "run")]


class ExtractScreen(FormScreen[Path | None]):
    GO_BUTTON = "extract-go"
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="extract.cancel")]

    def __init__(self, kernel: str, command: list[str], output: Path) -> None:
        super().__init__()
        self.kernel = kernel
        self.command = command
        self.output = output
        self.started = 0.0
        self.ticker: Timer | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="extract-box"):
            yield Label(Text.assemble("Extract ", (one_line(self.kernel), "bold")), id="extract-title")
            # the program that will run, whole: a long first argument can hide it in the input
            yield Label(self.program_line(self.prefill), id="extract-program")
            yield Input(self.prefill, id="extract-command")
            with Horizontal(classes="row"):
                yield Label("dispatch ")
                yield Input("0", id="extract-dispatch", type="integer")
                yield Select(WHAT, value="", allow_blank=False, id="extract-what", compact=True)
            with Horizontal(classes="row", id="extract-window"):
                yield Input(placeholder="NVTX path (step.3/layer.5)", id="extract-nvtx")
                yield Input(placeholder="run: count", id="extract-count", type="integer")
                yield Input(placeholder="run: until kernel", id="extract-until")
            yield Label("output")
            yield Input(str(self.output), id="extract-output")
            yield ProgressBar(total=None, show_eta=False, id="extract-progress")
            yield Label("enter: extract · esc: cancel", id="extract-status")
            with Horizontal(classes="row"):
                yield Button("Extract", variant="primary", id="extract-go")
                yield Button("Cancel", id="extract-cancel")

    @property
    def prefill(self) -> str:
        """The recorded command, as the input shows it; control characters in it are shown
        escaped (what the input shows is what runs)."""
        return one_line(shlex.join(self.command))

    @staticmethod
    def program_line(command: str) -> Text:
        """`command · runs PROGRAM` (and where PATH finds it), or what is wrong with the line."""
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            return plain(f"command · cannot parse it: {exc}", style="bold")
        if not argv:
            return plain("command · give the application command to run")
        program = argv[0]
        found = shutil.which(program)
        where = ("" if found == program else f" ({found})") if found else " (not found: check the path or PATH)"
        return Text.assemble("command · runs ", (one_line(program), "bold"), one_line(where))

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "extract-command":
            self.query_one("#extract-program", Label).update(self.program_line(event.value))

    def on_mount(self) -> None:
        self.query_one("#extract-progress").display = False
        self.query_one("#extract-command", Input).focus()

    # Cancel (FormScreen) only closes the dialog: a running extraction cannot be interrupted
    # safely mid-capture; it finishes in the background and its reproducer stays on disk.

    def start(self) -> None:
        try:
            command = shlex.split(self.query_one("#extract-command", Input).value)
            dispatch = int(self.query_one("#extract-dispatch", Input).value or 0)
            count = self.query_one("#extract-count", Input).value.strip()
            window = api.sequence_extract_arguments(
                self.query_one("#extract-what", Select).value or None,
                nvtx=self.query_one("#extract-nvtx", Input).value.strip() or None,
                count=int(count) if count else None, until=self.query_one("#extract-until", Input).value.strip() or None)
        except KerncapError as exc:
            self.notify(f"{exc.message}\n{exc.hint or ''}", severity="error", title="extract")
            return
        except ValueError as exc:
            self.notify(f"cannot parse the command or dispatch: {exc}", severity="error", title="extract")
            return
        if not command:
            self.notify("give the application command to run", severity="warning", title="extract")
            return
        self.query_one("#extract-progress").display = True
        self.query_one("#extract-go", Button).disabled = True
        self.query_one("#extract-status", Label).remove_class("error")
        self.started = time.monotonic()
        self.ticker = self.set_interval(0.5, self._tick)
        self.run_extract(command, dispatch, Path(self.query_one("#extract-output", Input).value).expanduser(), window)

    def _tick(self) -> None:
        self.query_one("#extract-status", Label).update(f"extracting… {time.monotonic() - self.started:.0f} s")

    @work(thread=True, exclusive=True, group="extract")
    def run_extract(self, command: list[str], dispatch: int, output: Path, window: dict | None = None) -> None:
        window = window or {}
        # an NVTX range's instance is every launch in it: the kernel is not part of the choice
        kernel = "" if getattr(window.get("sequence"), "mode", None) == "nvtx" else self.kernel
        try:
            result = api.extract(kernel, command, output=output, dispatch=dispatch, **window)
        except KerncapError as exc:
            if not get_current_worker().is_cancelled:
                self.app.call_from_thread(self._failed, exc)
            return
        if get_current_worker().is_cancelled:  # the user closed this screen meanwhile
            self.app.call_from_thread(self.app.notify, f"extraction finished: {result.reproducer_dir}", title="extract")
        else:
            self.app.call_from_thread(self.dismiss, Path(result.reproducer_dir))

    def _stop_ticking(self) -> None:
        if self.ticker is not None:
            self.ticker.stop()
            self.ticker = None

    def _failed(self, exc: KerncapError) -> None:
        """The error stays in the dialog (the timer no longer overwrites it); fix the
        command or the dispatch and press Extract again."""
        self._stop_ticking()
        self.query_one("#extract-progress").display = False
        self.query_one("#extract-go", Button).disabled = False
        status = self.query_one("#extract-status", Label)
        status.update(plain(f"failed: {exc.message}" + (f"\n{exc.hint}" if exc.hint else "")))
        status.add_class("error")
        self.app.report_error("extract", exc)

    def on_unmount(self) -> None:
        self._stop_ticking()
