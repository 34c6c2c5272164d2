"""A modal dialog of inputs and a Go / Cancel pair: Enter in an input or the Go button
starts it, any other button and Escape cancel (dismiss with None)."""

from __future__ import annotations

from typing import TypeVar

from textual.screen import ModalScreen
from textual.widgets import Button, Input

ResultType = TypeVar("ResultType")


class FormScreen(ModalScreen[ResultType]):
    GO_BUTTON = ""  # the id of the button that starts the dialog's action

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.start()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == self.GO_BUTTON:
            self.start()
        else:
            self.action_cancel()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def start(self) -> None:
        raise NotImplementedError
