"""A line above the footer while Nsight Compute or compute-sanitizer runs: what runs,
for how long, its latest step, and how to cancel it (c in History, or the palette)."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label, ProgressBar

from kerncap_tui.terminal import one_line, plain


class ToolProgress(Horizontal):
    DEFAULT_CSS = """
    ToolProgress { height: 1; display: none; background: $panel; padding: 0 1; }
    ToolProgress.running { display: block; }
    ToolProgress ProgressBar { width: 14; }
    ToolProgress #tool-progress-text { width: 1fr; padding: 0 1; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.what = ""
        self.step = ""
        self.started = 0.0
        self._timer = None

    def compose(self) -> ComposeResult:
        yield ProgressBar(total=None, show_eta=False, show_percentage=False)
        yield Label("", id="tool-progress-text")

    def start(self, what: str) -> None:
        self.what, self.step, self.started = what, "starting", time.monotonic()
        self.add_class("running")
        self._render_text()
        if self._timer is None:
            self._timer = self.set_interval(1.0, self._render_text)

    def update_step(self, step: str) -> None:
        self.step = step
        self._render_text()

    def stop(self) -> None:
        self.remove_class("running")
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def _render_text(self) -> None:
        elapsed = time.monotonic() - self.started
        self.query_one("#tool-progress-text", Label).update(plain(  # the step is the tool's own output
            f"{self.what} · {elapsed:.0f} s · {one_line(self.step)} · c (History) cancels"))
