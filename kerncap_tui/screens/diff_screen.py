"""A unified diff of source/ between two variants."""

from __future__ import annotations

from rich.syntax import Syntax
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from kerncap_tui.terminal import plain, shown


class DiffScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q", "dismiss", "Close", id="diff.close")]

    def __init__(self, title: str, diff: str) -> None:
        super().__init__()
        self.title_text = title
        self.diff = diff

    def compose(self) -> ComposeResult:
        yield Label(plain(self.title_text), id="diff-title")
        with VerticalScroll(id="diff-body"):
            # the sources' own text: escaped as the CLI prints it
            body = (Syntax(shown(self.diff), "diff", theme="ansi_dark", word_wrap=False) if self.diff.strip()
                    else "no differences in source/")
            yield Static(body, id="diff-text")

    def on_mount(self) -> None:
        self.query_one("#diff-body").focus()
