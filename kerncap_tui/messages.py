"""Messages posted to the app from threads (watchdog) and workers (builds, extraction),
and the messages about the open session the app sends to every pane (KerncapApp.tell_panes:
each pane that has the CSS class `session-pane` gets its own copy). A new pane reacts
to these instead of being fed by the app."""

from __future__ import annotations

from pathlib import Path

from textual.message import Message


class SourceChanged(Message):
    """A file under <reproducer>/source was written (posted from the watchdog thread)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path


class HistoryChanged(Message):
    """<reproducer>/history.json was replaced (posted from the watchdog thread): another
    kerncap (`kerncap build`, an MCP agent, `kerncap apply`) may have recorded a row."""


class BuildLog(Message):
    """A line for the build/replay log, from a worker thread."""

    def __init__(self, text: str, style: str = "") -> None:
        super().__init__()
        self.text = text
        self.style = style


class SessionMessage(Message, bubble=False):
    """About the open session (kerncap.api.Session), to one pane; it does not bubble."""


class SessionOpened(SessionMessage):
    """A reproducer (or set) was opened: `session` (None when it could not be opened),
    its `root`, the `capture` to show (a set's first member's) and its `history`."""

    def __init__(self, session, root: Path, capture, history) -> None:
        super().__init__()
        self.session = session
        self.root = root
        self.capture = capture
        self.history = history


class BuildFinished(SessionMessage):
    """A build or a baseline recorded a History row (`result`: the api.BuildResult, None for
    a baseline or a refresh), or the stored tool results changed: show `history` with
    `inspect` (variant id -> its ncu / sanitizer results)."""

    def __init__(self, result, history, inspect: dict) -> None:
        super().__init__()
        self.result = result
        self.history = history
        self.inspect = inspect


class ToolFinished(SessionMessage):
    """An Nsight Compute or compute-sanitizer run on `variant` ended (`ok`: True clean /
    measured, False found errors, None cancelled); `inspect` holds every stored result."""

    def __init__(self, variant, tool: str, ok: bool | None, history, inspect: dict) -> None:
        super().__init__()
        self.variant = variant
        self.tool = tool
        self.ok = ok
        self.history = history
        self.inspect = inspect


class ExtractRequested(Message):
    def __init__(self, kernel: str) -> None:
        super().__init__()
        self.kernel = kernel



class LaunchSelected(Message):
    """The Profile pane's cursor is on launch `launch` of the open sequence (to the app)."""

    def __init__(self, launch: int) -> None:
        super().__init__()
        self.launch = launch


class LaunchShown(SessionMessage):
    """A sequence (docs/sequences.md): the panes follow launch `launch` (its index) of
    `capture`'s sequence — Memory marks what its arguments point at, Source shows its
    kernel entry's sources (kernels/<k>/source), where a save rebuilds that kernel."""

    def __init__(self, root: Path, capture, launch: int) -> None:
        super().__init__()
        self.root = root
        self.capture = capture
        self.launch = launch


class FuseRequested(Message):
    """The Profile pane's marked range of a sequence's launches, `first`..`last`, is to be
    replaced by one kernel (to the app, which asks for the fusion's name)."""

    def __init__(self, first: int, last: int) -> None:
        super().__init__()
        self.first = first
        self.last = last


class FusionChanged(Message):
    """The launch of fusion `name` was written (the Source pane's fusion panel): build it,
    as a save of its fused.cu does (to the app)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
