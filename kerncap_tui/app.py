"""The kerncap workbench: profile ranking, memory-region map, source editor, timing
history and build log over one reproducer, with a live loop (save → recompile →
replay → validate → history).

Threads: the watchdog observer posts SourceChanged; builds, extraction, git and
capture reads run in thread workers; the event loop only updates widgets."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.timer import Timer
from textual.widgets import Footer, Header, RichLog, TabbedContent, TabPane
from textual.worker import get_current_worker

from kerncap import api
from kerncap.errors import KerncapError
from kerncap_tui import demo, engine, panes, theming
from kerncap_tui.commands import KerncapCommands
from kerncap_tui.history import History, Variant, source_fingerprint
from kerncap_tui.inspect_actions import InspectActions
from kerncap_tui.mismatch_actions import MismatchActions
from kerncap_tui.messages import (
    BuildLog,
    ExtractRequested,
    HistoryChanged,
    SourceChanged,
)
from kerncap_tui.screens.diff_screen import DiffScreen
from kerncap_tui.screens.extract_screen import ExtractScreen
from kerncap_tui.watcher import SourceWatcher
from kerncap_tui.widgets.history_pane import HistoryPane, speedup_phrase
from kerncap_tui.widgets.live_history import STEP as SPLIT_STEP
from kerncap_tui.widgets.live_history import LiveHistory
from kerncap_tui.widgets.memory_pane import MemoryPane
from kerncap_tui.widgets.profile_pane import ProfilePane
from kerncap_tui.widgets.source_pane import SourcePane
from kerncap_tui.widgets.tool_progress import ToolProgress

DEBOUNCE_S = 0.3
PROFILE_FILE = "profile.json"


class KerncapApp(InspectActions, MismatchActions, App[int]):
    TITLE = "kerncap"
    CSS_PATH = str(theming.stylesheet())
    COMMANDS = App.COMMANDS | {KerncapCommands}
    # pane name -> its widget class, for the command palette (kerncap_tui.commands)
    PANES = {p.name: p.widget for p in panes.PANES if p.widget is not None}
    BINDINGS = [
        *(Binding(str(i), f"tab('{p.name}')", p.title, id=f"tab.{p.name}", show=False)
          for i, p in enumerate(panes.PANES, 1)),
        Binding("b", "build", "Build", id="build"),
        Binding("B", "baseline", "Baseline", tooltip="time the captured cubin (the baseline)", id="baseline"),
        # In the palette (ctrl+p), not the footer: at 80 columns the footer must keep `q Quit`.
        Binding("T", "next_theme", "Theme", id="theme", show=False),
        Binding("f2", "split_toggle", "Split", id="split.toggle", show=False, priority=True),
        Binding("f3", f"split_resize({-SPLIT_STEP})", "Split narrower", id="split.narrower", show=False, priority=True),
        Binding("f4", f"split_resize({SPLIT_STEP})", "Split wider", id="split.wider", show=False, priority=True),
        Binding("escape", "leave_editor", "Leave editor", id="leave-editor", show=False),
        Binding("q", "quit", "Quit", id="quit"),
    ]

    def __init__(self, root: Path, *, demo: bool = False) -> None:
        super().__init__()
        self.root = Path(root)
        self.demo = demo
        self.capture = None
        self.set = None  # a reproducer set (kerncap_tui.set_mode), else None
        self.profile = None
        self.history: History | None = None
        self.replay: engine.ResidentReplay | None = None
        self.compiler: engine.ResidentCompiler | None = None
        self.watcher: SourceWatcher | None = None
        self._debounce: Timer | None = None
        self.theme_names: list[str] = []

    # -- layout -------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        with TabbedContent(initial=panes.PANES[0].tab, id="tabs"):
            for i, pane in enumerate(panes.PANES, 1):
                with TabPane(f"{i} {pane.title}", id=pane.tab):
                    yield pane.make()
        yield ToolProgress(id="tool-progress")
        yield Footer()

    def on_mount(self) -> None:
        self._install_themes()
        try:
            keymap = theming.user_keymap()
            if keymap:
                self.set_keymap(keymap)
        except KerncapError as exc:
            self.report_error("keymap", exc)
        self._signals: list[int] = []
        try:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGHUP, signal.SIGTERM):
                loop.add_signal_handler(sig, self._terminal_gone, sig)
                self._signals.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (embedded) or no signals on this platform
        self.open_reproducer(self.root)

    def _install_themes(self) -> None:
        for t in theming.house_themes():
            self.register_theme(t)
            self.theme_names.append(t.name)
        user, errors = theming.user_themes()
        for t in user:
            self.register_theme(t)
            self.theme_names.append(t.name)
        for exc in errors:
            self.report_error("theme", exc)
        self.theme = os.environ.get("KERNCAP_THEME", theming.DEFAULT_THEME)

    # -- opening a reproducer / workspace ------------------------------------------------
    def open_reproducer(self, root: Path) -> None:
        self.shutdown_engine()
        self.root = Path(root)
        self.replay = engine.ResidentReplay(self.root)
        self.start_compiler()
        self.sub_title = "demo" if self.demo else str(self.root)
        self.log_line(f"opened {'the bundled demo' if self.demo else self.root}")
        self.capture = None
        capture_root = self._open_set()  # a set shows its first member's memory
        if (capture_root / "capture").is_dir() or (capture_root / "manifest.json").is_file():
            try:
                self.capture = api.open_capture(capture_root)
            except KerncapError as exc:
                self.report_error("capture", exc)
        if self.capture is not None:
            k, launch = self.capture.kernel, self.capture.launch
            self.sub_title = k.get("demangled") or k.get("name", "?")
            self.query_one(MemoryPane).show(self.capture)
            self.log_line(f"kernel {k.get('name')} grid {launch.get('grid')} block {launch.get('block')} "
                          f"· {len(self.capture.regions)} regions, {len(self.capture.globals)} globals")
            for w in self.capture.warnings:
                self.log_line(f"capture warning: {w}")
        self.query_one(SourcePane).show(self.source_dir)
        self.open_kernel_source()
        profile_pane = self.query_one(ProfilePane)
        profile_pane.captured = {n for n in (self.capture.kernel.get("name"), self.capture.kernel.get("demangled"))
                                 if n} if self.capture is not None else set()
        self.history = History(root=self.root)
        try:
            self.history = History.load(self.root)
        except KerncapError as exc:
            self.report_error("history", exc)
        self.inspect = {}
        self.show_history()
        self.fit_split()
        self.load_inspect()
        self.load_profile()
        if self.source_dir is not None:
            self.prepare_history()
            self.watcher = SourceWatcher(self.source_dir, self.post_message)
            try:
                self.watcher.start()
            except OSError as exc:
                self.report_error("watch", KerncapError(f"cannot watch {self.source_dir} ({exc})",
                                                        "press b to build by hand"))

    def start_compiler(self) -> None:
        try:
            self.compiler = engine.ResidentCompiler(self.root)
            self.compiler.warm()
        except KerncapError as exc:
            self.compiler = None
            self.report_error("compiler", exc)

    def _open_set(self) -> Path:
        """Opens a reproducer set at self.root (its members replace the profile list);
        returns where the capture to show lives."""
        from kerncap_tui import set_mode

        for old in self.query(set_mode.SetMembersPane):
            old.remove()
        self.query_one(ProfilePane).display = True
        try:
            self.set = engine.open_set(self.root)
        except KerncapError as exc:
            self.set = None
            self.report_error("set", exc)
        if self.set is None:
            return self.root
        self.query_one(ProfilePane).display = False
        self.query_one("#profile", TabPane).mount(set_mode.SetMembersPane(self.set))
        self.log_line(f"reproducer set of {len(self.set.members)} member(s): "
                      + ", ".join(f"#{m.index} {100 * m.weight:.0f}%" for m in self.set.members))
        return self.set.members[0].path

    def show_member(self, member) -> None:
        try:
            self.capture = api.open_capture(member.path)
        except KerncapError as exc:
            self.report_error("member", exc)
            return
        self.query_one(MemoryPane).show(self.capture)
        self.action_tab("memory")

    def show_set_run(self, run) -> None:
        from kerncap_tui.set_mode import SetMembersPane

        for pane in self.query(SetMembersPane):
            pane.show_results(run)

    def show_history(self) -> None:
        pane = self.query_one(HistoryPane)
        pane.show(self.history, self.inspect)
        self.query_one(LiveHistory).show(self.history)
        if self.set is not None:
            from kerncap_tui.set_mode import annotate_history

            annotate_history(pane, self.history)

    @property
    def source_dir(self) -> Path | None:
        d = self.root / "source"
        return d if d.is_dir() else None

    def profile_path(self) -> Path | None:
        """The reproducer's own profile.json, else the newest profile of a workspace."""
        own = self.root / PROFILE_FILE
        if own.is_file():
            return own
        saved = api.Workspace(self.root).profiles()
        return saved[0] if saved else None

    @work(thread=True, exclusive=True, group="profile")
    def load_profile(self) -> None:
        pane = self.query_one(ProfilePane)
        path = self.profile_path()
        if path is None:
            try:
                launches = api.app_launches(self.root)
            except KerncapError as exc:
                launches = None
                self.call_from_thread(self.report_error, "profile", exc)
            if launches is not None:
                self.call_from_thread(pane.show_launches, launches)
                return
            self.call_from_thread(pane.show_message, f"no profile in {self.root}: `kerncap profile -- CMD` writes one")
            return
        try:
            self.profile = api.load_profile(path)
        except KerncapError as exc:
            self.call_from_thread(pane.show_message, exc.message)
            self.call_from_thread(self.report_error, "profile", exc)
            return
        self.call_from_thread(pane.show, self.profile.kernels)

    @work(thread=True, exclusive=True, group="git")
    def prepare_history(self) -> None:
        """git init + commit of source/ as extracted, before the first edit can land."""
        try:
            self.history.initial_commit()
        except KerncapError as exc:
            self.call_from_thread(self.report_error, "history", exc)

    # -- the live loop -------------------------------------------------------------------
    def on_source_changed(self, message: SourceChanged) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        self._debounce = self.set_timer(DEBOUNCE_S, self.action_build)

    def action_build(self) -> None:
        if self.source_dir is None:
            self.notify("this reproducer has no source/ to build", severity="warning", title="build")
            return
        self.run_worker(self._build, thread=True, exclusive=True, group="build", name="build")

    def action_baseline(self) -> None:
        self.run_worker(self._time_baseline, thread=True, exclusive=True, group="build", name="baseline")

    def _time_baseline(self) -> None:
        try:
            if self.set is not None:
                from kerncap_tui import set_mode

                set_mode.record_baseline(self)
                return
            self._record_baseline()
        except KerncapError as exc:
            self.call_from_thread(self.report_error, "baseline", exc)

    def _record_baseline(self) -> Variant:
        self.post_message(BuildLog("replaying the captured cubin (baseline) …"))
        out = self.replay.run(None)
        v = self.history.record(baseline=True, median_ms=out.median_ms, min_ms=out.min_ms,
                                spread_pct=out.spread_pct, validation=out.validation, note=out.detail,
                                validation_detail=out.validation_detail)
        self.post_message(BuildLog(f"baseline: {out.median_ms:.4f} ms (±{out.spread_pct:.1f}%), validation "
                                   f"{out.validation} {out.validation_detail}".rstrip()))
        self.post_message(HistoryChanged())
        return v

    def _build(self) -> None:
        """recompile → (baseline once) → replay → validate → record. A newer save cancels
        this worker; checks between steps drop a superseded result."""
        worker = get_current_worker()
        started = time.monotonic()
        try:
            if self.set is not None:
                from kerncap_tui import set_mode

                set_mode.build(self, worker)
                return
            fingerprint = source_fingerprint(self.source_dir)
            same = self.history.built_from(fingerprint)
            if same is not None:  # a save without a change, or a second `b`: nothing new to build
                self.post_message(BuildLog(f"source/ is unchanged since {same.label} ({same.validation}): "
                                           "no new variant", "dim"))
                return
            self.post_message(BuildLog("recompiling …"))
            rc = self.compiler.recompile() if self.compiler is not None else api.recompile(self.root)
            log = rc.log.strip()
            if log:
                self.post_message(BuildLog(log, "dim"))
            if rc.summary:
                self.post_message(BuildLog(rc.summary, "dim"))
            for note in rc.notes:  # e.g. the reduced compile fell back to the whole file
                self.post_message(BuildLog(note, "yellow"))
            self.post_message(BuildLog(f"compiled {Path(rc.cubin).name} in {rc.seconds:.2f} s"
                                       + (f" ({rc.mode}: {rc.phase_line()})" if rc.phases else "")))
            if worker.is_cancelled:
                self.post_message(BuildLog("superseded by a newer save", "dim"))
                return
            if self.history.baseline is None:
                self._record_baseline()
            out = self.replay.run(Path(rc.cubin))
            if worker.is_cancelled:
                self.post_message(BuildLog("superseded by a newer save", "dim"))
                return
            cubin = Path(rc.cubin)
            rel = str(cubin.relative_to(self.root)) if cubin.is_relative_to(self.root) else str(cubin)
            v = self.history.record(median_ms=out.median_ms, min_ms=out.min_ms, spread_pct=out.spread_pct,
                                    validation=out.validation, cubin=rel, build_seconds=rc.seconds, note=out.detail,
                                    source_hash=fingerprint, validation_detail=out.validation_detail,
                                    speedup=out.speedup, speedup_low=out.speedup_low,
                                    speedup_high=out.speedup_high, confidence=out.confidence,
                                    significant=out.significant)
            self.post_message(BuildLog(
                f"{v.label}: {out.median_ms:.4f} ms, {speedup_phrase(v)}"
                + f", validation {out.validation} {out.validation_detail} {out.detail}".rstrip()
                + f" ({time.monotonic() - started:.1f} s)",
                "bold" if out.validation == "pass" else "bold red",
            ))
            self.post_message(HistoryChanged())
        except KerncapError as exc:
            self.call_from_thread(self.report_error, "build", exc)

    def on_build_log(self, message: BuildLog) -> None:
        self.log_line(message.text, message.style)

    def on_history_changed(self, message: HistoryChanged) -> None:
        self.show_history()
        self.load_inspect()
        latest = self.history.variants[-1] if self.history.variants else None
        if latest is not None:
            self.notify(f"{latest.label}: {latest.median_ms:.4f} ms"
                        + (f" ({speedup_phrase(latest)})" if latest.id else "")
                        + f" · {latest.validation}", title="history",
                        severity="information" if latest.validation in ("pass", "skipped") else "error")

    # -- history actions -------------------------------------------------------------------
    @work(thread=True, group="git")
    def show_diff(self, a: Variant, b: Variant) -> None:
        try:
            text = self.history.diff(a, b)
        except KerncapError as exc:
            self.call_from_thread(self.report_error, "diff", exc)
            return
        self.call_from_thread(self.push_screen, DiffScreen(f"source/ {a.label} → {b.label}   (esc: close)", text))

    @work(thread=True, group="git")
    def restore_variant(self, v: Variant) -> None:
        try:
            self.history.restore(v)
        except KerncapError as exc:
            self.call_from_thread(self.report_error, "restore", exc)
            return
        pane = self.query_one(SourcePane)
        if pane.path is not None:
            self.call_from_thread(pane.reload_if_open, pane.path)
        self.call_from_thread(self.notify, f"restored {v.label} into source/; rebuilding", title="history")

    # -- extraction ---------------------------------------------------------------------
    def on_extract_requested(self, message: ExtractRequested) -> None:
        command = list(getattr(self.profile, "command", None) or [])
        # next to the profile's workspace; from a reproducer, into ./kerncap-workspace
        ws_root = self.root if (self.root / "profiles").is_dir() else Path.cwd() / "kerncap-workspace"
        output = api.Workspace(ws_root).new_reproducer_path(message.kernel)

        def opened(path: Path | None) -> None:
            if path is not None:
                self.demo = False
                self.open_reproducer(path)
                self.action_tab("memory")

        self.push_screen(ExtractScreen(message.kernel, command, output), opened)

    # -- small actions ------------------------------------------------------------------------
    def action_tab(self, tab: str) -> None:
        pane = panes.BY_NAME[tab]
        self.query_one(TabbedContent).active = pane.tab
        target = self.query(pane.focus)
        if target:
            target.first().focus()

    async def pane_action(self, tab: str, action: str) -> None:
        """Run a pane's action from the command palette: switch to its tab first."""
        self.action_tab(tab)
        pane = self.query_one(self.PANES[tab])
        await self.run_action(action, default_namespace=pane)

    def on_resize(self, event) -> None:
        self.fit_split()

    def action_leave_editor(self) -> None:
        if self.focused is not None and self.focused.id == "editor":
            tree = self.query("#source-tree")
            (tree.first() if tree else self.query_one(TabbedContent)).focus()

    def action_next_theme(self) -> None:
        names = self.theme_names or [self.theme]
        self.theme = names[(names.index(self.theme) + 1) % len(names)] if self.theme in names else names[0]
        self.notify(f"theme {self.theme}", title="theme")

    # -- errors and logging ----------------------------------------------------------------
    def log_line(self, text: str, style: str = "") -> None:
        stamp = time.strftime("%H:%M:%S")
        for i, line in enumerate(text.splitlines() or [""]):
            self.query_one("#log", RichLog).write(Text(f"{stamp if i == 0 else ' ' * 8} {line}", style=style))

    def report_error(self, where: str, exc: KerncapError) -> None:
        """A notification the user can act on, and the full text in the log; never a traceback."""
        self.log_line(f"{where}: {exc.message}" + (f"\n  hint: {exc.hint}" if exc.hint else ""), "red")
        first = exc.message.splitlines()[0] if exc.message else where
        if engine.needs_gpu(exc):
            self.notify(f"{first}\n{exc.hint or ''}", title=f"{where} needs a GPU", severity="warning", timeout=8)
        else:
            self.notify(f"{first}\n{exc.hint or 'see the log (5)'}", title=f"{where} failed", severity="error", timeout=8)

    # -- shutdown ---------------------------------------------------------------------------
    def shutdown_engine(self) -> None:
        """Stop the watchdog thread, the replay server and compile worker processes (idempotent)."""
        if self._debounce is not None:
            self._debounce.stop()
            self._debounce = None
        if self._tool_cancel is not None:  # an ncu / compute-sanitizer run: its processes go too
            self._tool_cancel.cancel()
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None
        if self.replay is not None:
            try:
                self.replay.close()
            except Exception as exc:  # the server may already be gone; shutting down regardless
                print(f"kerncap-tui: closing the replay server failed: {exc}", file=sys.stderr)
            self.replay = None
        if self.compiler is not None:
            try:
                self.compiler.close()
            except Exception as exc:  # shutting down regardless
                print(f"kerncap-tui: closing the compile worker failed: {exc}", file=sys.stderr)
            self.compiler = None

    def _terminal_gone(self, sig: int) -> None:
        """SIGHUP (SSH dropped) / SIGTERM: release the GPU process and the observer first,
        then leave; writing to a vanished terminal may fail, the cleanup must not."""
        self.shutdown_engine()
        self.exit(return_code=128 + sig)

    def on_unmount(self) -> None:
        self.shutdown_engine()
        loop = asyncio.get_running_loop()
        for sig in getattr(self, "_signals", []):
            loop.remove_signal_handler(sig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kerncap-tui", description="kerncap workbench (Textual TUI).")
    add_arguments(parser)
    return parser.parse_args(argv)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", nargs="?", type=Path,
                        help="reproducer (or workspace holding profile.json); default: the bundled demo")
    parser.add_argument("--no-mouse", action="store_true", help="do not capture the mouse (plain terminal selection over SSH)")


def run(directory: Path | None, no_mouse: bool = False) -> int:
    try:
        if directory is None:
            root, is_demo = demo.materialize(), True
        else:
            root, is_demo = directory.expanduser().resolve(), False
            if not root.is_dir():
                raise KerncapError(f"{root} is not a directory", "give a reproducer from `kerncap extract --output`")
    except KerncapError as exc:
        print(f"kerncap-tui: error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    app = KerncapApp(root, demo=is_demo)
    try:
        app.run(mouse=not no_mouse)
    finally:
        if is_demo:
            demo.discard(root)  # the scratch copy of the demo goes with the workbench
    return int(app.return_code or 0)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run(args.dir, args.no_mouse)


if __name__ == "__main__":
    raise SystemExit(main())
