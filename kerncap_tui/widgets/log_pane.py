"""The Log pane (5): build, replay, validation and tool output, every error with its hint.

RichLog wraps a line once, at the width it has when the line is written; this log keeps
what it was given and wraps all of it again whenever its width changes, so a line written
on a wide terminal is not left cut on a narrow one (nor broken early on a wide one)."""

from __future__ import annotations

from collections import deque

from rich.text import Text
from textual import events
from textual.widgets import RichLog

MAX_LINES = 5000


class WorkbenchLog(RichLog):
    def __init__(self, **kw) -> None:
        kw.setdefault("max_lines", MAX_LINES)
        super().__init__(wrap=True, markup=False, highlight=False, **kw)
        self.entries: deque[Text] = deque(maxlen=self.max_lines)
        self.wrapped_at = 0  # the width the lines were last wrapped to (0: not shown yet)

    @property
    def line_width(self) -> int:
        """The width a line wraps to: the pane's, less a vertical scrollbar's, whether one is
        shown yet or not. Given to RichLog explicitly: left to measure, it takes the
        app console's width (80 columns, whatever the terminal) and at least its min_width."""
        return max(self.size.width - self.styles.gutter.width - self.styles.scrollbar_size_vertical, 1)

    def add_line(self, text: Text) -> None:
        """Write one entry (its text already safe to draw: kerncap_tui.terminal)."""
        self.entries.append(text)
        self.write(text, width=self.wrapped_at or None)  # not shown yet: wrapped when it is

    def on_resize(self, event: events.Resize) -> None:
        super().on_resize(event)  # the first size: RichLog writes what it held back
        width = self.line_width
        if not event.size.width or width == self.wrapped_at:
            return
        self.wrapped_at = width
        # at its end, give or take the horizontal scrollbar the old, wider lines bring up on a
        # narrower pane (gone once they are wrapped again below)
        at_end = self.scroll_y + self.scrollbar_size_horizontal >= self.max_scroll_y
        self.clear()
        for text in self.entries:
            self.write(text, width=width, scroll_end=False)
        if at_end:
            self.scroll_end(animate=False, immediate=False, x_axis=False)
