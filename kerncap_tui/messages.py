"""Messages posted to the app from threads (watchdog) and workers (builds, extraction)."""

from __future__ import annotations

from pathlib import Path

from textual.message import Message


class SourceChanged(Message):
    """A file under <reproducer>/source was written (posted from the watchdog thread)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path


class BuildLog(Message):
    """A line for the build/replay log, from a worker thread."""

    def __init__(self, text: str, style: str = "") -> None:
        super().__init__()
        self.text = text
        self.style = style


class HistoryChanged(Message):
    """A variant (or the baseline) was recorded."""


class ExtractRequested(Message):
    def __init__(self, kernel: str) -> None:
        super().__init__()
        self.kernel = kernel

