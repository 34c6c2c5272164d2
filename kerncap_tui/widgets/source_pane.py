"""Source tree and editor. Saving (ctrl+s) writes the file; the watchdog observer sees
the write and the app rebuilds, exactly as when the file is saved from $EDITOR."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DirectoryTree, Label, TextArea

from kerncap import api
from kerncap.errors import KerncapError
from kerncap_tui import messages
from kerncap_tui.highlight import language_for, register_cpp
from kerncap_tui.terminal import one_line, plain
from kerncap_tui.widgets.fusion_panel import FusionPanel


class SourceTree(DirectoryTree):
    def filter_paths(self, paths):
        return [p for p in paths if not p.name.startswith(".") and p.name != "__pycache__"]

    def process_label(self, label):
        """A file's name is text: escaped, never markup (Tree reads a str label as markup)."""
        return plain(one_line(label)) if isinstance(label, str) else label


class SourcePane(Horizontal):
    DEFAULT_CLASSES = "session-pane"  # told of the open session (kerncap_tui.messages)
    BINDINGS = [
        Binding("ctrl+s", "save", "Save", id="source.save", priority=True),
        Binding("ctrl+o", "open_editor", "$EDITOR", id="source.editor"),
    ]

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.source_dir: Path | None = None
        self.path: Path | None = None
        self.fusion: str | None = None  # a sequence: the fusion shown (fusions/<name>/), else None

    def compose(self) -> ComposeResult:
        yield Label("no source", id="source-empty")
        with Vertical(id="editor-box"):
            yield FusionPanel(id="fusion-panel")
            yield Label("", id="editor-title")
            editor = TextArea.code_editor("", id="editor", soft_wrap=False, theme="css")
            self.has_cpp = register_cpp(editor)
            yield editor

    def on_session_opened(self, message: messages.SessionOpened) -> None:
        self._leave_fusion()
        if getattr(message.capture, "sequence", None) is not None:
            return  # a sequence: its selected launch's kernel entry (on_launch_shown)
        source = message.root / "source"
        self.show(source if source.is_dir() else None)
        if message.capture is not None:
            self.open_kernel_source(message.root, message.capture.kernel)

    def on_launch_shown(self, message: messages.LaunchShown) -> None:
        """A sequence: the selected launch's kernel entry, kernels/<k>/source; a save
        there rebuilds that kernel and records the whole sequence (kerncap.session)."""
        seq = message.capture.sequence
        k = seq.launches[message.launch].kernel
        entry = message.root / "kernels" / str(k)
        source = entry / "source"
        if self.source_dir != source:
            self._leave_fusion()
            self.show(source if source.is_dir() else None,
                      empty=f"kernel {k} ({seq.kernels[k].demangled or seq.kernels[k].name}) has no sources in "
                            f"kernels/{k}/source (extract the sequence with --source-dir; library kernels have none)")
            if source.is_dir():
                self.open_kernel_source(entry, {"name": seq.kernels[k].name, "demangled": seq.kernels[k].demangled})

    def show_fusion(self, root: Path, name: str) -> None:
        """A sequence's fusion: fusions/<name>/ with fused.cu in the editor (a save builds the
        fusion: kerncap.session's build_fusion), its parameters and launch above it."""
        self.show(root / "fusions" / name)
        self.fusion = name
        self.query_one(FusionPanel).load(root, name)
        self._title()

    def _leave_fusion(self) -> None:
        if self.fusion is not None:
            self.fusion = None
            self.query_one(FusionPanel).clear()

    @work(thread=True, exclusive=True, group="source-locate")
    def open_kernel_source(self, root: Path, kernel: dict) -> None:
        """Finds the captured kernel's definition in source/ and shows it in the editor."""
        try:
            site = api.kernel_site(root, kernel)
        except (OSError, KerncapError):
            return
        if site is not None:
            self.app.call_from_thread(self.open_at, site.path, site.line)

    def show(self, source_dir: Path | None, empty: str = "") -> None:
        self.source_dir = source_dir
        trees = self.query(SourceTree)
        label = self.query_one("#source-empty", Label)
        if source_dir is None or not source_dir.is_dir():
            for old in trees:
                old.display = False
            label.update(plain(empty or "this reproducer has no editable source/ (kerncap extract --source-dir)"))
            label.display = True
            return
        label.display = False
        if trees:  # another directory (a sequence's launches): the same tree, shown again
            tree = trees.first()
            tree.path, tree.display = source_dir, True
        else:
            self.mount(SourceTree(source_dir, id="source-tree"), before=0)
        first = self.primary_source(source_dir)
        if first:
            self.open_file(first)

    @staticmethod
    def primary_source(source_dir: Path) -> Path | None:
        """The kernel's translation unit first (build.json names it), else the first source by name."""
        import json

        build = source_dir / "build.json"
        if build.is_file():
            try:
                main = json.loads(build.read_text()).get("tu")  # the translation unit (kerncap.recompile.cuda)
                if main and (source_dir / main).is_file():
                    return source_dir / main
            except (OSError, ValueError, AttributeError):
                pass
        files = sorted(p for p in source_dir.rglob("*") if p.is_file() and language_for(p) in ("cpp", "python"))
        return files[0] if files else None

    def on_directory_tree_file_selected(self, event: DirectoryTree.FileSelected) -> None:
        self.open_file(Path(event.path))
        self.query_one(TextArea).focus()

    def open_file(self, path: Path) -> None:
        editor = self.query_one(TextArea)
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            self.app.notify(f"cannot open {path}: {exc}", severity="error", title="source")
            return
        self.path = path
        lang = language_for(path)
        editor.language = lang if (lang != "cpp" or self.has_cpp) and lang in editor.available_languages else None
        editor.load_text(text)
        self._title()

    def _title(self) -> None:
        if self.path is None:
            return
        rel = self.path.relative_to(self.source_dir) if self.source_dir else self.path
        hl = self.query_one(TextArea).language or "plain"
        then = "build the fusion" if self.fusion is not None else "rebuild"
        self.query_one("#editor-title", Label).update(plain(f"{one_line(rel)} · {hl} · ctrl+s save → {then} · ctrl+o $EDITOR"))

    def action_save(self) -> None:
        if self.path is None:
            return
        try:
            self.path.write_text(self.query_one(TextArea).text)
        except OSError as exc:
            self.app.notify(f"cannot write {self.path}: {exc}", severity="error", title="source")
            return
        self.app.notify(f"saved {self.path.name}", title="source")

    def action_open_editor(self) -> None:
        if self.path is None:
            return
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        try:
            with self.app.suspend():
                subprocess.run([*shlex.split(editor), str(self.path)], check=False)
        except Exception as exc:  # SuspendNotSupported (headless, web) or editor not found
            self.app.notify(f"cannot run $EDITOR ({editor}): {exc}", severity="warning", title="source")
            return
        self.open_file(self.path)

    def open_at(self, path: Path, line: int) -> None:
        """Open `path` with the cursor on `line` (1-based), scrolled into the middle."""
        if self.path != path:
            self.open_file(path)
        if self.path == path:
            editor = self.query_one(TextArea)
            editor.move_cursor((max(line - 1, 0), 0), center=True)
            self.query_one("#editor-title", Label).update(plain(
                f"{one_line(self._rel(path))}:{line} (the captured kernel) · ctrl+s save → rebuild · ctrl+o $EDITOR"))

    def _rel(self, path: Path):
        return path.relative_to(self.source_dir) if self.source_dir and path.is_relative_to(self.source_dir) else path

    def reload_if_open(self, path: Path) -> None:
        """After a restore from history, show the restored text (unless the user is mid-edit)."""
        if self.path and path == self.path:
            self.open_file(path)
