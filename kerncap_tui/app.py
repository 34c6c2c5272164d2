"""The kerncap workbench: profile ranking, memory-region map, source editor, timing
history and build log over one reproducer, with a live loop (save → recompile →
replay → validate → history).

The loop itself is the engine's: the app holds one kerncap.api session (the resident
replay server, the compile worker, the variant history) and calls `session.build()` on a
save, as `kerncap build` and MCP's build tool do. The panes react to messages about the
open session (SessionOpened, BuildFinished, ToolFinished: kerncap_tui.messages), which
the app sends to each of them (`tell_panes`).

Threads: the watchdog observer posts SourceChanged; builds, extraction, git and
capture reads run in thread workers; the event loop only updates widgets."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Footer, Header, TabbedContent, TabPane
from textual.worker import get_current_worker

from kerncap import api
from kerncap.errors import KerncapError
from kerncap.frontends import render
from kerncap_tui import demo, panes, replay_limit, terminal, theming
from kerncap_tui.commands import KerncapCommands
from kerncap_tui.inspect_actions import InspectActions
from kerncap_tui.mismatch_actions import MismatchActions
from kerncap_tui.messages import (
    BuildFinished,
    BuildLog,
    ExtractRequested,
    FuseRequested,
    FusionChanged,
    HistoryChanged,
    LaunchSelected,
    LaunchShown,
    SessionOpened,
    SourceChanged,
)
from kerncap_tui.screens.diff_screen import DiffScreen
from kerncap_tui.screens.extract_screen import ExtractScreen
from kerncap_tui.screens.fuse_screen import FuseScreen
from kerncap_tui.watcher import SourceWatcher
from kerncap_tui.widgets.history_pane import speedup_phrase
from kerncap_tui.widgets.live_history import STEP as SPLIT_STEP
from kerncap_tui.widgets.log_pane import WorkbenchLog
from kerncap_tui.widgets.memory_pane import MemoryPane
from kerncap_tui.widgets.profile_pane import ProfilePane
from kerncap_tui.widgets.source_pane import SourcePane
from kerncap_tui.widgets.tool_progress import ToolProgress

DEBOUNCE_S = 0.3
# Progress levels of a build (kerncap.session) -> the log's styles.
LOG_STYLES = {"": "", "detail": "dim", "warning": "yellow", "pass": "bold", "fail": "bold red"}


class BuildFinishedHere(Message):
    """From the build worker to the app: a row was recorded (result None: the baseline)."""

    def __init__(self, result) -> None:
        super().__init__()
        self.result = result


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

    def __init__(self, root: Path, *, demo: bool = False, plain_glyphs: bool = False, dumb: bool = False,
                 open_after_first_frame: bool = False, timer: str = "events") -> None:
        """`plain_glyphs`: ASCII only; `dumb`: the 16 standard colours (kerncap_tui.terminal;
        `run` decides both from the terminal, a test gets the defaults whatever its TERM).
        `open_after_first_frame` (what `run` asks for): the panes are painted empty first and
        the reproducer is read right after, so the first frame does not wait for the session,
        its history and the profile (about half of the time to it; docs/testing.md).
        `timer`: what times every build and baseline here (--timer; docs/replay.md)."""
        super().__init__()
        self.timer = timer
        self.open_after_first_frame = open_after_first_frame
        self.plain_glyphs = plain_glyphs
        # drawn text: control characters never reach the terminal; ASCII where Unicode does not
        self._text_filters = [terminal.ControlFilter(), *([terminal.PlainGlyphs()] if plain_glyphs else [])]
        if dumb:
            terminal.limit_colours(self)
        self.root = Path(root)
        self.demo = demo
        self.capture = None
        self.set = None  # a reproducer set (kerncap_tui.set_mode), else None
        self.session: api.Session | api.SetSession | None = None
        self.watcher: SourceWatcher | None = None
        self._debounce: Timer | None = None
        self._history_debounce: Timer | None = None
        self.launch: int | None = None        # a sequence: the launch the panes follow
        self.pending_builds: list = []  # api.BuildRequest per kernel or fusion saved since the last build
        self.theme_names: list[str] = []

    def get_line_filters(self):
        return [*super().get_line_filters(), *self._text_filters]

    def notify(self, message: str, *, title: str = "", severity="information", timeout: float | None = None,
               markup: bool = False) -> None:
        """Every notification is text, never markup: most name a kernel, a path or an error
        from a reproducer (a `[/b]` in one would end the workbench with a MarkupError)."""
        super().notify(terminal.shown(message), title=terminal.shown(title), severity=severity, timeout=timeout,
                       markup=False)

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
        if self.open_after_first_frame:
            self.call_after_refresh(self.open_reproducer, self.root)
        else:
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
    @property
    def history(self) -> api.History | None:
        """The open session's variant history (None when it cannot be read)."""
        if self.session is None:
            return None
        try:
            return self.session.history
        except KerncapError:
            return None

    @property
    def profile(self):
        return self.query_one(ProfilePane).profile

    def tell_panes(self, make) -> None:
        """Send a message about the open session (kerncap_tui.messages) to every pane."""
        for pane in self.query(".session-pane"):
            pane.post_message(make())

    def open_reproducer(self, root: Path) -> None:
        self.shutdown_engine()
        self.root = Path(root)
        self.sub_title = "demo" if self.demo else terminal.one_line(self.root)
        self.log_line(f"opened {'the bundled demo' if self.demo else self.root}")
        self.capture = None
        self.set = None
        self.inspect = {}
        self.launch = None
        self.pending_builds = []
        try:
            self.session = replay_limit.open_session(self.root)
        except KerncapError as exc:
            self.session = None
            self.report_error("open", exc)
        if self.session is not None:
            self.start_compiler()
        self._show_set()
        if self.session is not None and (self.session.is_set or (self.root / "capture").is_dir()
                                         or (self.root / "manifest.json").is_file()):
            try:
                self.capture = self.session.capture  # a set shows its first member's memory
            except KerncapError as exc:
                self.report_error("capture", exc)
        if self.capture is not None:
            k, launch = self.capture.kernel, self.capture.launch
            self.sub_title = terminal.one_line(self.session.title)
            self.log_line(f"kernel {k.get('name')} grid {launch.get('grid')} block {launch.get('block')} "
                          f"· {len(self.capture.regions)} regions, {len(self.capture.globals)} globals")
            for w in self.capture.warnings:
                self.log_line(f"capture warning: {w}")
            for w in api.capture_lacks(self.capture):
                self.log_line(f"capture lacks: {w}")
        history = None
        if self.session is not None:
            try:
                history = self.session.history
            except KerncapError as exc:
                self.report_error("history", exc)
        self.tell_panes(lambda: SessionOpened(self.session, self.root, self.capture, history))
        if self.session is not None and self.session.can_fuse:
            self.log_line(f"{self.session.title}; a save in kernels/<k>/source rebuilds kernel k and records the "
                          "whole sequence; m marks a range of launches (Profile), F fuses it")
        if self.session is not None and self.session.launches:
            self.on_launch_selected(LaunchSelected(0))
        self.fit_split()
        self.load_inspect()
        edit_dirs = self.session.edit_dirs() if self.session is not None else []
        if edit_dirs and history is not None:
            self.prepare_history()
        for d in edit_dirs:
            self.watch(d)
        if self.session is not None:
            self.watch_history()

    def watch(self, directory: Path) -> None:
        """Have the watchdog observer watch `directory` too (started on first use)."""
        try:
            self._watcher().watch(directory)
        except OSError as exc:
            self.report_error("watch", KerncapError(f"cannot watch {directory} ({exc})", "press b to build by hand"))

    def watch_history(self) -> None:
        """Rows another kerncap records (`kerncap build`, an MCP agent, `kerncap apply`) appear
        in History as they land."""
        path = self.session.history_file
        try:
            self._watcher().watch_history(path)
        except OSError as exc:
            self.report_error("watch", KerncapError(f"cannot watch {path} ({exc})",
                                                    "reopen the reproducer to see rows recorded elsewhere"))

    def _watcher(self) -> SourceWatcher:
        if self.watcher is None:
            watcher = SourceWatcher(None, self.post_message)
            watcher.start()
            self.watcher = watcher
        return self.watcher

    def on_history_changed(self, _message: HistoryChanged) -> None:
        if self._history_debounce is not None:
            self._history_debounce.stop()
        self._history_debounce = self.set_timer(DEBOUNCE_S, self.refresh_history)

    @work(thread=True, exclusive=True, group="history")
    def refresh_history(self) -> None:
        """history.json was replaced: show what changed (nothing, when the row is this
        workbench's own build, which its History shows already)."""
        session = self.session
        if session is None:
            return
        try:
            changed = session.history.refresh()
        except KerncapError as exc:
            self.call_from_thread(self.report_error, "history", exc)
            return
        if changed and session is self.session:
            self.call_from_thread(self._show_refreshed_history)

    def _show_refreshed_history(self) -> None:
        history = self.history
        self.tell_panes(lambda: BuildFinished(None, history, self.inspect))
        self.load_inspect()
        latest = history.variants[-1] if history and history.variants else None
        if latest is not None:
            self.log_line(f"history.json changed outside this workbench: {len(history.variants)} row(s), "
                          f"the last {latest.label} ({latest.validation})")
            self.notify(f"{latest.label} · {latest.validation}", title="history (recorded elsewhere)")

    def start_compiler(self) -> None:
        """A Triton reproducer's compile worker starts warming up now, before the first save."""
        try:
            self.session.warm()
        except KerncapError as exc:
            self.report_error("compiler", exc)

    def _show_set(self) -> None:
        """A reproducer set's members replace the profile list."""
        from kerncap_tui import set_mode

        for old in self.query(set_mode.SetMembersPane):
            old.remove()
        self.query_one(ProfilePane).display = True
        if self.session is None or not self.session.is_set:
            return
        self.set = self.session.set
        self.query_one(ProfilePane).display = False
        self.query_one("#profile", TabPane).mount(set_mode.SetMembersPane(self.set, classes="session-pane"))
        self.log_line(f"reproducer set of {len(self.set.members)} member(s): "
                      + ", ".join(f"#{m.index} {100 * m.weight:.0f}%" for m in self.set.members))

    def show_member(self, member) -> None:
        try:
            self.capture = api.open_capture(member.path)
        except KerncapError as exc:
            self.report_error("member", exc)
            return
        self.query_one(MemoryPane).show(self.capture)
        self.action_tab("memory")

    def on_launch_selected(self, message: LaunchSelected) -> None:
        self.launch = message.launch
        self.tell_panes(lambda: LaunchShown(self.root, self.capture, message.launch))

    @work(thread=True, exclusive=True, group="git")
    def prepare_history(self) -> None:
        """git init + commit of source/ as extracted, before the first edit can land."""
        try:
            self.session.prepare_history()
        except KerncapError as exc:
            self.call_from_thread(self.report_error, "history", exc)

    # -- the live loop -------------------------------------------------------------------
    def on_source_changed(self, message: SourceChanged) -> None:
        if self.session is not None:  # (else the build says the reproducer could not be opened)
            request = self.session.build_for_save(message.path)
            if request is None:
                return  # a build's output under kernels/<k>/ or fusions/<name>/, fusion.json, not a source
            self._pending(request)
        self._debounced_build()

    def on_fusion_changed(self, message: FusionChanged) -> None:
        """The fusion panel wrote the fused launch: build it, as a save of fused.cu does."""
        self._pending(api.BuildRequest(fusion=message.name))
        self._debounced_build()

    def _pending(self, request: api.BuildRequest) -> None:
        """One build per kernel or fusion saved since the last build (one History row each)."""
        if request not in self.pending_builds:
            self.pending_builds.append(request)

    def _debounced_build(self) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        self._debounce = self.set_timer(DEBOUNCE_S, self.action_build)

    def action_build(self) -> None:
        if self.session is None:
            self.notify(f"{self.root} could not be opened: see the log (5)", severity="warning", title="build")
            return
        # what was saved since the last build; else (b by hand) what the session says the shown
        # fusion or the selected launch builds
        requests, self.pending_builds = self.pending_builds, []
        if not requests:
            try:
                requests = [self.session.build_by_hand(self.launch, self.query_one(SourcePane).fusion)]
            except KerncapError as exc:
                self.notify(f"{exc.message}: {exc.hint}" if exc.hint else exc.message, severity="warning",
                            title="build")
                return
        self.run_worker(lambda: self._build(requests), thread=True, exclusive=True, group="build", name="build")

    # -- fusions (a sequence) -----------------------------------------------------------------
    def on_fuse_requested(self, message: FuseRequested) -> None:
        """F on a marked range: its name (FuseScreen writes the skeleton), then the fusion opens in Source."""
        if self.session is None or not self.session.can_fuse:
            return
        names = self.session.launch_names(message.first, message.last)
        if len(names) > 6:
            names = [*names[:3], f"… {len(names) - 5} more …", *names[-2:]]
        kernels = " → ".join(names)

        def opened(name: str | None) -> None:
            if name is not None:
                self.open_fusion(name)

        self.push_screen(FuseScreen(self.root, message.first, message.last, kernels), opened)

    def open_fusion(self, name: str) -> None:
        """fusions/<name>/fused.cu in Source with its parameters and launch; a save there builds it."""
        for d in self.session.edit_dirs():  # fusions/ is new with the first skeleton
            self.watch(d)
        self.action_tab("source")
        self.query_one(SourcePane).show_fusion(self.root, name)
        self.log_line(f"fusion {name}: write the body of fusions/{name}/fused.cu (keep its parameters), set its "
                      "launch above the editor; a save builds it, validates the fused sequence and times it")

    def action_baseline(self) -> None:
        if self.session is None:
            return
        self.run_worker(self._time_baseline, thread=True, exclusive=True, group="build", name="baseline")

    def _progress(self, text: str, level: str = "") -> None:
        self.post_message(BuildLog(text, LOG_STYLES.get(level, "")))

    def _time_baseline(self) -> None:
        try:
            v = self.session.baseline(api.BuildRequest(timer=self.timer), progress=self._progress)
        except KerncapError as exc:
            self.call_from_thread(self.report_error, "baseline", exc)
            return
        # A set's members table shows the baseline's run too.
        self.post_message(BuildFinishedHere(api.BuildResult("recorded", variant=v, baseline=v,
                                                            set_run=getattr(self.session, "last_run", None))))

    def _build(self, requests: list[api.BuildRequest]) -> None:
        """The engine's build (kerncap.session: recompile → (baseline once) → interleaved
        timing → validation → History row). A newer save cancels this worker; the session
        asks between steps and drops a superseded result."""
        worker = get_current_worker()
        for request in requests:  # one, or one per saved kernel of a sequence
            request = replace(request, timer=self.timer)
            try:
                result = self.session.build(request, progress=self._progress, cancelled=lambda: worker.is_cancelled)
            except api.ReplayNotRun as exc:
                # It compiled; the replay could not run here (no GPU, no replay core): say that.
                self.call_from_thread(self.report_replay_not_run, exc)
                return
            except KerncapError as exc:
                self.call_from_thread(self.report_error, "build", exc)
                return
            if result.status == "recorded":
                self.post_message(BuildFinishedHere(result))
            if worker.is_cancelled:
                return

    def on_build_log(self, message: BuildLog) -> None:
        self.log_line(message.text, message.style)

    def on_build_finished_here(self, message: BuildFinishedHere) -> None:
        """A build (or a baseline) recorded a row: every pane hears of it."""
        history = self.history
        self.tell_panes(lambda: BuildFinished(message.result, history, self.inspect))
        self.load_inspect()
        latest = history.variants[-1] if history and history.variants else None
        if latest is not None:
            timed = "not timed" if latest.median_ms is None else f"{latest.median_ms:.4f} ms"
            self.notify(f"{latest.label}: {timed}"
                        + (f" ({speedup_phrase(latest)})" if latest.id else "")
                        + f" · {latest.validation}", title="history",
                        severity="information" if latest.validation in ("pass", "skipped") else "error")

    # -- history actions -------------------------------------------------------------------
    @work(thread=True, group="git")
    def show_diff(self, a: api.Variant, b: api.Variant) -> None:
        try:
            text = self.session.diff(a, b)
        except KerncapError as exc:
            self.call_from_thread(self.report_error, "diff", exc)
            return
        self.call_from_thread(self.push_screen, DiffScreen(f"source/ {a.label} → {b.label}   (esc: close)", text))

    @work(thread=True, group="git")
    def restore_variant(self, v: api.Variant) -> None:
        try:
            self.session.restore(v)
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
            # At once, not by Widget.focus (a later message): the widgets of the tab left
            # behind are hidden one Hide event at a time, each handing focus on if it still
            # has it, and the last could hand it to nothing (a fusion opened from its
            # dialog was left without focus about one time in four).
            widget = target.first()
            widget.screen.set_focus(widget)  # its own screen: the palette may still be on top

    async def pane_action(self, tab: str, action: str) -> None:
        """Run a pane's action from the command palette: switch to its tab first."""
        self.action_tab(tab)
        pane = self.query_one(self.PANES[tab])
        await self.run_action(action, default_namespace=pane)

    def on_resize(self, event) -> None:
        # the new width: this handler runs before App's own, so self.size is still the old one
        self.fit_split(event.size.width)

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
        """One entry of the Log; its text (build and tool output, errors, names from the
        reproducer) is escaped as the CLI prints it."""
        stamp = time.strftime("%H:%M:%S")
        for i, line in enumerate(terminal.shown(text).splitlines() or [""]):
            self.query_one("#log", WorkbenchLog).add_line(Text(f"{stamp if i == 0 else ' ' * 8} {line}", style=style))

    def report_error(self, where: str, exc: KerncapError) -> None:
        """A notification the user can act on, and the full text in the log; never a traceback."""
        self.log_line(f"{where}: {exc.message}" + (f"\n  hint: {exc.hint}" if exc.hint else ""), "red")
        first = exc.message.splitlines()[0] if exc.message else where
        if api.needs_gpu(exc):
            self.notify(f"{first}\n{exc.hint or ''}", title=f"{where} needs a GPU", severity="warning", timeout=8)
        else:
            self.notify(f"{first}\n{exc.hint or 'see the log (5)'}", title=f"{where} failed", severity="error", timeout=8)

    def report_replay_not_run(self, exc: api.ReplayNotRun) -> None:
        """The build compiled, then the replay could not run: not a failed build."""
        self.log_line(exc.message + (f"\n  hint: {exc.hint}" if exc.hint else ""), "yellow")
        self.notify(f"{exc.message.splitlines()[0]}\n{exc.hint or ''}", title="replay could not run",
                    severity="warning", timeout=8)

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
        session, self.session = self.session, None
        if session is not None:
            try:
                session.kill()  # on hangup the server must go now, even mid-replay
                session.close()
            except Exception as exc:  # the server may already be gone; shutting down regardless
                print(f"kerncap-tui: closing the session failed: {exc}", file=sys.stderr)

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
    add_glyphs_argument(parser)
    render.add(parser, api.options.TIMER)


def add_glyphs_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--glyphs", choices=terminal.GLYPH_CHOICES, default=None,
                        help=f"ascii: plain glyphs for a terminal without Unicode (default: ${terminal.GLYPHS_ENV}, "
                             "else auto: from TERM and the locale)")


def can_open(root: Path) -> bool:
    """A reproducer, a reproducer set, a sequence or a workspace with a profile."""
    return api.holds_reproducer(root) or ProfilePane.profile_path(root) is not None


def run(directory: Path | None, no_mouse: bool = False, prog: str = "kerncap-tui", glyphs: str | None = None,
        timer: str = "events") -> int:
    """Open the workbench; `prog` names the command the user typed in messages; `glyphs`:
    --glyphs (kerncap_tui.terminal); `timer`: --timer, what times its builds."""
    try:
        plain_glyphs = terminal.plain_glyphs(choice=glyphs)
        if directory is None:
            root, is_demo = demo.materialize(), True
        else:
            root, is_demo = directory.expanduser().resolve(), False
            if not root.is_dir():
                raise KerncapError(f"{root} is not a directory", "give a reproducer from `kerncap extract --output`")
            if not can_open(root):
                raise KerncapError(
                    f"{root} is not a reproducer, a reproducer set or a workspace "
                    "(it has no capture/, set.json, profile.json or profiles/)",
                    "give a directory written by `kerncap extract --output DIR` (`kerncap list` shows them), "
                    "or run `kerncap profile -- CMD` in a workspace first")
    except KerncapError as exc:
        print(f"{prog}: error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    app = KerncapApp(root, demo=is_demo, plain_glyphs=plain_glyphs, dumb=terminal.is_dumb(),
                     open_after_first_frame=True, timer=timer)
    api.apps_take_sigint()  # extractions start apps from worker threads
    try:
        app.run(mouse=not no_mouse)
    finally:
        if is_demo:
            demo.discard(root)  # the scratch copy of the demo goes with the workbench
    return int(app.return_code or 0)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run(args.dir, args.no_mouse, glyphs=args.glyphs, timer=args.timer)


if __name__ == "__main__":
    raise SystemExit(main())
