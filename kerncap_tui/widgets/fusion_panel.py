"""A sequence's fusion open in the Source pane (docs/sequences.md, "Variants"): above the
editor of fusions/<name>/fused.cu, the skeleton's parameters (each buffer's type, role and
the launches that use it; each scalar's captured value) and the fused launch from
fusion.json — grid, block, dynamic shared memory — editable: enter writes them through the
engine (kerncap.api.fuse_edit, which checks them) and the app builds the fusion, as a save
of fused.cu does."""

from __future__ import annotations

import re
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Input, Label, Static

from kerncap import api
from kerncap.core.units import format_dim
from kerncap_tui.terminal import one_line, plain
from kerncap.errors import KerncapError
from kerncap_tui.messages import FusionChanged


def parse_dim(text: str, what: str) -> list[int]:
    """"4096", "4096,1,1", "4096 1 1" or "4096x1x1" -> [4096, 1, 1] (the engine pads to 3)."""
    parts = [p for p in re.split(r"[\s,x×]+", text.strip()) if p]
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise KerncapError(f"{what} {text.strip()!r}: one to three whole numbers", f"e.g. {what} 4096,1,1")
    return [int(p) for p in parts]


def param_lines(info: dict) -> list[str]:
    lines = []
    for p in info["params"]:
        if p.get("kind") == "buffer":
            uses = "; ".join(u.split(" (")[0] + u[u.rfind(")") + 1:] for u in p.get("uses", []))
            lines.append(f"{p['name']} {p.get('ctype', 'void*')} {p.get('role', '')}: {uses}")
        else:
            lines.append(f"{p['name']} {p.get('ctype') or str(p['size']) + ' B'} = 0x{p['value']} (captured)")
    return lines


class FusionPanel(Vertical):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.root: Path | None = None
        self.fusion: str | None = None
        self.info: dict | None = None

    def compose(self) -> ComposeResult:
        yield Label("", id="fusion-title")
        yield Static("", id="fusion-params")
        with Horizontal(id="fusion-launch"):
            yield Label("grid")
            yield Input("", id="fusion-grid", compact=True)
            yield Label(" block")
            yield Input("", id="fusion-block", compact=True)
            yield Label(" shared B")
            yield Input("", id="fusion-smem", compact=True, type="integer")
            yield Label(" enter: write the launch, build", id="fusion-launch-hint")

    def on_mount(self) -> None:
        self.display = False

    def clear(self) -> None:
        self.root = self.fusion = self.info = None
        self.display = False

    def load(self, root: Path, name: str) -> None:
        self.root, self.fusion = root, name
        self.display = True
        self.query_one("#fusion-title", Label).update(plain(f"fusion {one_line(name)} …"))
        self.read(root, name)

    @work(thread=True, exclusive=True, group="fusion")
    def read(self, root: Path, name: str) -> None:
        try:
            info = api.fusion_info(root, name)
        except KerncapError as exc:
            self.app.call_from_thread(self.app.report_error, "fusion", exc)
            return
        self.app.call_from_thread(self.show, info)

    def show(self, info: dict) -> None:
        if info.get("name") != self.fusion:
            return  # another fusion was opened meanwhile
        self.info = info
        self.query_one("#fusion-title", Label).update(plain(
            f"fusion {one_line(info['name'])}: launches {info['first']}-{info['last']} → {one_line(info['kernel'])} · "
            "ctrl+s (or b) builds, validates and times it"))
        self.query_one("#fusion-params", Static).update(plain("\n".join(param_lines(info))))
        self.query_one("#fusion-grid", Input).value = format_dim(info["grid"], sep=",", trim=False)
        self.query_one("#fusion-block", Input).value = format_dim(info["block"], sep=",", trim=False)
        self.query_one("#fusion-smem", Input).value = str(info.get("shared_mem_bytes", 0))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if self.root is None or self.fusion is None:
            return
        try:
            grid = parse_dim(self.query_one("#fusion-grid", Input).value, "grid")
            block = parse_dim(self.query_one("#fusion-block", Input).value, "block")
            smem_text = self.query_one("#fusion-smem", Input).value.strip() or "0"
            if not smem_text.isdigit():
                raise KerncapError(f"shared memory {smem_text!r}: a whole number of bytes", "e.g. 0 or 49152")
        except KerncapError as exc:
            self.app.report_error("fusion launch", exc)
            return
        self.write_launch(self.root, self.fusion, grid, block, int(smem_text))

    @work(thread=True, exclusive=True, group="fusion")
    def write_launch(self, root: Path, name: str, grid: list[int], block: list[int], smem: int) -> None:
        try:
            api.fuse_edit(root, name, grid=grid, block=block, shared_mem_bytes=smem)
            info = api.fusion_info(root, name)
        except KerncapError as exc:
            self.app.call_from_thread(self.app.report_error, "fusion launch", exc)
            return
        self.app.call_from_thread(self.show, info)
        self.post_message(FusionChanged(name))
