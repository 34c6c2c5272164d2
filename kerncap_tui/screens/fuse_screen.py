"""Fuse a marked range of a sequence's launches (docs/sequences.md, "Variants"): the fusion's
name, prefilled with a free one (kerncap.api.fusion_name) or with the fusion this very
range already has (then Fuse opens it); Fuse writes the skeleton (kerncap.api.fuse_skeleton)
in a worker and closes with the name, or keeps the engine's message in the dialog (a name
already taken, a range of one launch) for another try."""

from __future__ import annotations

from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label

from kerncap import api
from kerncap.errors import KerncapError
from kerncap_tui.screens.form_screen import FormScreen
from kerncap_tui.terminal import one_line, plain


class FuseScreen(FormScreen[str | None]):
    GO_BUTTON = "fuse-go"
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="fuse.cancel")]

    def __init__(self, root: Path, first: int, last: int, kernels: str = "") -> None:
        super().__init__()
        self.root = root
        self.first, self.last = first, last
        self.kernels = kernels
        self.existing: str | None = None  # the fusion of this very range, if one was written

    def compose(self) -> ComposeResult:
        with Vertical(id="fuse-box"):
            yield Label(f"Fuse launches [b]{self.first}-{self.last}[/b] into one kernel", id="fuse-title")
            if self.kernels:
                yield Label(plain(one_line(self.kernels)), id="fuse-kernels")
            yield Label("name (fusions/<name>/fused.cu, variants/fuse-<name>.json)")
            yield Input("", id="fuse-name", placeholder="e.g. norm-gemm")
            yield Label("enter: write the skeleton and open it · esc: cancel", id="fuse-status")
            with Horizontal(classes="row"):
                yield Button("Fuse", variant="primary", id="fuse-go")
                yield Button("Cancel", id="fuse-cancel")

    def on_mount(self) -> None:
        self.query_one("#fuse-name", Input).focus()
        self.prefill()

    @work(thread=True, exclusive=True, group="fuse")
    def prefill(self) -> None:
        """The name to offer: the fusion of this range when there is one, else a free name."""
        try:
            same = [f["name"] for f in api.fusions(self.root) if (f["first"], f["last"]) == (self.first, self.last)]
            name = same[0] if same else api.fusion_name(self.root, self.first, self.last)
        except KerncapError as exc:
            self.app.call_from_thread(self._failed, exc)
            return
        self.app.call_from_thread(self._prefilled, name, bool(same))

    def _prefilled(self, name: str, existing: bool) -> None:
        field = self.query_one("#fuse-name", Input)
        if not field.value:
            field.value = name
        if existing:
            self.existing = name
            self.query_one("#fuse-status", Label).update(plain(
                f"fusions/{one_line(name)} replaces these launches already: enter opens it (another name writes a new one)"))

    def start(self) -> None:
        name = self.query_one("#fuse-name", Input).value.strip()
        if name and name == self.existing:
            self.dismiss(name)
            return
        self.query_one("#fuse-go", Button).disabled = True
        self.write_skeleton(name)

    @work(thread=True, exclusive=True, group="fuse")
    def write_skeleton(self, name: str) -> None:
        try:
            api.fuse_skeleton(self.root, self.first, self.last, name)
        except KerncapError as exc:
            self.app.call_from_thread(self._failed, exc)
            return
        self.app.call_from_thread(self.dismiss, name)

    def _failed(self, exc: KerncapError) -> None:
        """The engine's message stays in the dialog: change the name (or esc) and try again."""
        self.query_one("#fuse-go", Button).disabled = False
        status = self.query_one("#fuse-status", Label)
        status.update(plain(f"{exc.message}" + (f"\n{exc.hint}" if exc.hint else "")))
        status.add_class("error")
        self.app.log_line(f"fusion: {exc.message}" + (f"\n  hint: {exc.hint}" if exc.hint else ""), "red")
