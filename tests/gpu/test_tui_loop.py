"""The workbench's live loop on the GPU, driven through Textual's Pilot on a real
reproducer with sources (the smooth kernel of the CMake-built test apps):

1. saving an edit of the kernel's header (the app's watchdog observer sees the write)
   puts one new, validated history row on screen, with its own cubin, and the revert
   another (how long that takes is bench/edit_loop.py's figure, not an assertion here);
2. a syntax error shows the compiler's message in the app's log and a "build failed"
   notification, and the loop lives on: the next good save gets a new `pass` row;
3. a variant that writes 4 GiB past its output faults on replay; the app names the CUDA
   error (or records an `error` row), and the next good save gets a new `pass` row.

Every test closes the app and checks that no replay server process is left behind.
Run on the GPU machine: pytest -m gpu -s tests/gpu/test_tui_loop.py (-s shows the figures).
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from .apps import TESTAPPS
from .smooth_edits import FAST_BODY, ORIGINAL_LOOP, SMOOTH_MANGLED, edit, kernel_header

pytestmark = pytest.mark.gpu

SIZE = (140, 40)
SMOOTH_N = 1 << 20
WAIT_S = 60.0
POLL_S = 0.05
WORKBENCH_GROUPS = {"profile", "git", "build"}  # the app's thread workers that end
SERVER_MODULE = "kerncap.replay.server"

STORE = "  y[i] = acc;"
SYNTAX_ERROR = "  y[i] = acc +;  // kerncap test: a syntax error"
OUT_OF_BOUNDS = "  y[i + (1 << 30)] = acc;  // kerncap test: 4 GiB past y"
COMPILER_DIAGNOSTIC = re.compile(r"smooth_kernel\.cuh(?:\(\d+\)|:\d+(?::\d+)?):(?:fatal)?error")  # on squeezed text
CUDA_FAULT = re.compile(r"CUDA_ERROR_[A-Z_]+|illegal (?:memory access|address)", re.I)


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smooth_source_repro(testapps_build, tmp_path_factory) -> Path:
    """The smooth kernel extracted once, with its CUDA sources (source/ + build.json)."""
    from kerncap.capture.extract import extract

    out = tmp_path_factory.mktemp("tui-smooth") / "reproducer"
    res = extract(SMOOTH_MANGLED, [str(testapps_build / "smooth"), str(SMOOTH_N)], output=out, match="exact",
                  source_dir=TESTAPPS / "cuda", build_dir=testapps_build, timeout=120)
    assert res.sources and res.sources["kind"] == "cuda", res.sources
    return Path(res.reproducer_dir)


@pytest.fixture
def repro(smooth_source_repro, tmp_path, monkeypatch) -> Path:
    """A private copy: the app commits to its git history and writes variants/ there."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no user themes/keymap
    monkeypatch.delenv("KERNCAP_THEME", raising=False)
    work = tmp_path / "reproducer"
    shutil.copytree(smooth_source_repro, work)
    return work


# -- helpers -----------------------------------------------------------------------------


def sync(test):
    """Run an async Pilot test without an asyncio pytest plugin (as tests/tui does)."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        asyncio.run(test(*args, **kwargs))

    return run


def descendants() -> dict[int, tuple[str, str]]:
    """pid -> (state, command line) of every descendant of this process, zombies included."""
    parent, info = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rfind(")") + 2:].split()  # the command name may hold spaces and parentheses
        parent[pid], info[pid] = int(fields[1]), (fields[0], cmdline)
    found: dict[int, tuple[str, str]] = {}
    frontier = [os.getpid()]
    while frontier:
        p = frontier.pop()
        for child, pp in parent.items():
            if pp == p and child not in found:
                found[child] = info[child]
                frontier.append(child)
    return found


def replay_servers() -> set[int]:
    return {pid for pid, (_, cmd) in descendants().items() if SERVER_MODULE in cmd}


def log_text(app, start: int = 0) -> str:
    """What the log pane (5) shows, from its start-th rendered line on."""
    from textual.widgets import RichLog

    return "\n".join(strip.text for strip in app.query_one("#log", RichLog).lines[start:])


def log_length(app) -> int:
    from textual.widgets import RichLog

    return len(app.query_one("#log", RichLog).lines)


def squeeze(text: str) -> str:
    """Without any whitespace: immune to the log pane's line wrapping."""
    return "".join(text.split())


def notes(app, title: str) -> list:
    return [n for n in app._notifications if n.title == title]


def replace_store(header: Path, text: str, by: str) -> str:
    assert text.count(STORE) == 1, f"{header} holds {text.count(STORE)} copies of {STORE.strip()!r}"
    return text.replace(STORE, by)


class Workbench:
    """The running app and its pilot, with the waits and checks of the live loop."""

    def __init__(self, app, pilot) -> None:
        self.app = app
        self.pilot = pilot
        self.servers_seen: set[int] = set()
        self.figures: list[str] = []
        self.last_elapsed: float | None = None  # write -> history row of the last good save

    @property
    def table(self):
        from textual.widgets import DataTable

        return self.app.query_one("#history-table", DataTable)

    async def settle(self) -> None:
        """Let the workbench's thread workers (build, git, profile) finish."""
        from textual.worker import WorkerCancelled

        await self.pilot.pause()
        ours = [w for w in self.app.workers if w.group in WORKBENCH_GROUPS]
        if ours:  # an empty list would mean "all workers", DirectoryTree's loader among them
            try:
                await asyncio.wait_for(self.app.workers.wait_for_complete(ours), WAIT_S)
            except WorkerCancelled:
                pass
        await self.pilot.pause()

    async def wait_for(self, condition, what: str, timeout: float = WAIT_S) -> float:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout:g} s; the app's log:\n{log_text(self.app)[-4000:]}")
            await self.pilot.pause(POLL_S)
        return time.monotonic()

    def note_servers(self) -> None:
        self.servers_seen |= replay_servers()

    async def start(self) -> None:
        """Open, show the log pane, time the baseline (B): the replay server is then warm."""
        app = self.app
        await self.settle()
        assert app.session is not None and app.session.edit_dirs(), f"{app.root} has no source/"
        assert app.watcher is not None and app.watcher.running, "the watchdog observer is not running"
        app.action_tab("log")  # the log renders once it has a size; its focus keeps keys off inputs
        await self.pilot.pause()
        await self.pilot.press("B")
        await self.wait_for(lambda: self.table.row_count >= 1, "baseline row after B")
        await self.settle()
        base = app.history.baseline
        assert base is not None and base.validation == "pass", (base, log_text(app)[-3000:])
        self.note_servers()
        assert self.servers_seen, "the replay server runs after the baseline, yet no kerncap.replay.server child was found"

    async def good_save(self, write, label: str):
        """Write the header, wait for its history row; the row must validate `pass`.
        The time it took is printed (bench/edit_loop.py measures it against a baseline)."""
        await self.settle()
        rows = self.table.row_count
        t0 = time.monotonic()
        write()
        t1 = await self.wait_for(lambda: self.table.row_count > rows, f"history row after the {label} save")
        v = self.app.history.variants[-1]
        cell = str(self.table.get_cell(str(v.id), "valid"))
        await self.settle()
        elapsed = self.last_elapsed = t1 - t0
        assert v.build_seconds is not None, v
        overhead = elapsed - v.build_seconds
        figure = (f"{label}: {v.label} on screen {elapsed:.3f} s after the write; compile {v.build_seconds:.3f} s; "
                  f"loop overhead {overhead:.3f} s; median {v.median_ms} ms; validation {v.validation}")
        self.figures.append(figure)
        print(figure)
        assert self.table.row_count == rows + 1, f"one save, one row ({rows} → {self.table.row_count})"
        assert v.validation == "pass", (v, log_text(self.app)[-3000:])
        assert cell.startswith("✓"), cell  # "✓ exact · p4": what the pass covered
        self.note_servers()
        return v

    async def failing_save(self, write, label: str) -> tuple[str, int]:
        """Write the header, wait for the build it triggers to end; (log text it added, new rows)."""
        await self.settle()
        rows = self.table.row_count
        start = log_length(self.app)
        write()
        await self.wait_for(lambda: "recompiling" in log_text(self.app, start), f"build after the {label} save")
        await self.settle()
        await self.pilot.pause(0.1)
        return log_text(self.app, start), self.table.row_count - rows

    def assert_alive(self) -> None:
        assert self.app.is_running
        assert self.app.watcher is not None and self.app.watcher.running, "the watchdog observer stopped"


async def run_workbench(repro: Path, steps) -> None:
    """Run `steps(workbench)` in the real app; afterwards the app is closed and neither
    its observer nor any replay server it started is left."""
    from kerncap_tui.app import KerncapApp

    before = replay_servers()
    app = KerncapApp(repro)
    bench = None
    try:
        async with app.run_test(size=SIZE) as pilot:
            bench = Workbench(app, pilot)
            await bench.start()
            await steps(bench)
            bench.note_servers()
    finally:
        app.shutdown_engine()  # idempotent; on_unmount has already done it unless the app died early
    assert not app.is_running
    assert app.session is None and app.watcher is None  # the session's replay server and worker closed
    seen = bench.servers_seen if bench else set()
    deadline = time.monotonic() + 2  # close() waits for the server; allow only for reaping
    while True:
        left = {pid: info for pid, info in descendants().items()
                if (SERVER_MODULE in info[1] and pid not in before) or pid in seen}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"replay server process(es) left after the app closed: {left}"
    if bench:
        print("\n".join(["figures:", *bench.figures]))


# -- tests -------------------------------------------------------------------------------


@sync
async def test_save_puts_one_validated_row_with_its_own_cubin(repro):
    header = kernel_header(repro)
    original = header.read_text()

    async def steps(wb: Workbench) -> None:
        fast = await wb.good_save(lambda: edit(header, "fast"), "hoisted-check edit")
        assert fast.id == 1 and fast.cubin and (repro / fast.cubin).is_file(), fast
        back = await wb.good_save(lambda: header.write_text(original), "revert to the original")
        assert back.id == 2 and back.cubin and (repro / back.cubin).is_file(), back
        assert (repro / fast.cubin).read_bytes() != (repro / back.cubin).read_bytes(), "the edit built the same cubin"
        assert [v.id for v in wb.app.history.variants] == [0, 1, 2]
        wb.assert_alive()

    await run_workbench(repro, steps)


@sync
async def test_compile_error_is_shown_and_the_loop_survives(repro):
    header = kernel_header(repro)
    original = header.read_text()
    assert ORIGINAL_LOOP in original
    fast = original.replace(ORIGINAL_LOOP, FAST_BODY)

    async def steps(wb: Workbench) -> None:
        app = wb.app
        added, new_rows = await wb.failing_save(lambda: header.write_text(replace_store(header, original, SYNTAX_ERROR)),
                                                "syntax error")
        flat = squeeze(added)
        print(f"syntax error: the log shows\n{added}")
        assert new_rows == 0, "a build that does not compile records no variant"
        assert "build:nvccfailedtocompile" in flat, added  # the app's report (report_error("build", ...))
        assert COMPILER_DIAGNOSTIC.search(flat), f"the compiler's own message is not in the log:\n{added}"
        failed = notes(app, "build failed")
        assert any("nvcc failed to compile" in str(n.message) for n in failed), [(n.title, n.message) for n in app._notifications]
        wb.assert_alive()

        v = await wb.good_save(lambda: header.write_text(fast), "fix after the syntax error")
        assert v.id == 1, v
        wb.assert_alive()

    await run_workbench(repro, steps)


@sync
async def test_faulting_variant_is_reported_and_the_loop_survives(repro):
    header = kernel_header(repro)
    original = header.read_text()
    assert ORIGINAL_LOOP in original
    fast = original.replace(ORIGINAL_LOOP, FAST_BODY)

    async def steps(wb: Workbench) -> None:
        app = wb.app
        added, new_rows = await wb.failing_save(lambda: header.write_text(replace_store(header, original, OUT_OF_BOUNDS)),
                                                "out-of-bounds store")
        print(f"out-of-bounds store: the log shows\n{added}")
        if new_rows:  # reported as a history row: it must say error, never pass
            v = app.history.variants[-1]
            assert v.validation == "error", v
            assert "error" in str(wb.table.get_cell(str(v.id), "valid"))
        else:  # reported as a failed build: the log and the notification name the CUDA error
            assert "build:" in added and CUDA_FAULT.search(added), f"no CUDA error named in the log:\n{added}"
            failed = notes(app, "build failed")
            assert any(CUDA_FAULT.search(str(n.message)) for n in failed), \
                [(n.title, n.message) for n in app._notifications]
        wb.assert_alive()

        # The fault ended the replay server (sticky error); the next save starts a new one.
        v = await wb.good_save(lambda: header.write_text(fast), "fix after the fault")
        assert v.validation == "pass"
        print(f"replay servers started: {app.session.replay_starts}; seen: {sorted(wb.servers_seen)}")
        wb.assert_alive()

    await run_workbench(repro, steps)
