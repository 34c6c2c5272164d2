"""The workbench's panes, one entry each: a new pane is one more `Pane` in PANES (its
tab, its number key `1`…, its palette entries and the widget focused on arrival all
derive from it). A pane learns about the open session from messages (kerncap_tui.messages:
SessionOpened, BuildFinished, ToolFinished), which the app sends to every widget of the
CSS class `session-pane` (DEFAULT_CLASSES = "session-pane" in the widget)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.containers import Horizontal
from textual.widget import Widget

from kerncap_tui.widgets.history_pane import HistoryPane
from kerncap_tui.widgets.live_history import LiveHistory
from kerncap_tui.widgets.log_pane import WorkbenchLog
from kerncap_tui.widgets.memory_pane import MemoryPane
from kerncap_tui.widgets.mismatch_pane import MismatchPane
from kerncap_tui.widgets.profile_pane import ProfilePane
from kerncap_tui.widgets.source_pane import SourcePane


@dataclass(frozen=True)
class Pane:
    name: str                      # the tab's action argument: tab('<name>')
    title: str                     # the tab label, after its key
    make: Callable[[], Widget]     # builds the pane's widget
    focus: str                     # selector focused when the tab opens
    widget: type[Widget] | None = None  # the pane class whose BINDINGS go into the command palette
    tab_id: str = ""               # the TabPane id (default: name)

    @property
    def tab(self) -> str:
        return self.tab_id or self.name


def _source() -> Widget:
    # The editor, with the live History split beside it (f2; kerncap_tui.widgets.live_history).
    return Horizontal(SourcePane(id="source-pane"), LiveHistory(id="live-history"), id="source-split")


def _log() -> Widget:
    return WorkbenchLog(id="log")


PANES: tuple[Pane, ...] = (
    Pane("profile", "Profile", lambda: ProfilePane(id="profile-pane"), "#profile-table", ProfilePane),
    Pane("memory", "Memory", lambda: MemoryPane(id="memory-pane"), "#region-table", MemoryPane),
    Pane("source", "Source", _source, "#source-tree", SourcePane),
    Pane("history", "History", lambda: HistoryPane(id="history-pane"), "#history-table", HistoryPane),
    Pane("log", "Log", _log, "#log", tab_id="log-tab"),  # "log" is the RichLog's own id
    Pane("mismatch", "Mismatch", lambda: MismatchPane(id="mismatch-pane"), "#mismatch-heatmap", MismatchPane),
)
BY_NAME = {p.name: p for p in PANES}
