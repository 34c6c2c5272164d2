"""The workbench's look inside a variant, driven with Pilot on the demo reproducer:
Nsight Compute and compute-sanitizer runs (stand-in executables: no GPU here; the real
tools in tests/gpu/test_inspect_gpu.py), stored metrics in History and their diff, the
live split beside the editor, the memory map, the Profile pane's launch counts and the
Source pane opening at the captured kernel."""

from __future__ import annotations

import asyncio
import functools
import os
import time

from textual.widgets import DataTable, TextArea

from inspect_helpers import demo_launches, install_fake_tools, store_tool_results
from kerncap_tui.widgets.live_history import LiveHistory
from kerncap_tui.widgets.memory_map import MemoryMap
from kerncap_tui.widgets.tool_progress import ToolProgress


def sync(test):
    @functools.wraps(test)
    def run(*args, **kwargs):
        asyncio.run(test(*args, **kwargs))

    return run


def _columns(app) -> list[str]:
    return [str(c.label) for c in app.query_one("#history-table", DataTable).columns.values()]


async def _wait(pilot, cond, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting"
        await pilot.pause(0.1)


def _record_notifications(app) -> list[str]:
    """Every message the app notifies, kept: Textual drops a notification once its
    timeout passes, and a loaded CI machine can take that long to look (CI failed so)."""
    said: list[str] = []
    notify = app.notify

    def spy(message, *args, **kwargs):
        said.append(str(message))
        return notify(message, *args, **kwargs)

    app.notify = spy
    return said


def _select_variant(app, vid: int) -> None:
    t = app.query_one("#history-table", DataTable)
    t.move_cursor(row=t.get_row_index(str(vid)))


@sync
async def test_stored_metrics_become_history_columns_and_diff(settle, make_app, demo_root):
    store_tool_results(demo_root)
    app = make_app()
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        cols = _columns(app)
        assert cols[-8:] == ["ncu µs", "DRAM rd", "DRAM wr", "SM %", "mem %", "occ %", "regs", "sanitizer"]
        t = app.query_one("#history-table", DataTable)
        baseline = [str(c) for c in t.get_row("0")]
        assert baseline[-8:] == ["80.26", "16.8M", "16.8M", "45.3", "88.4", "85.4", "32", "✓ memcheck"]
        assert [str(c) for c in t.get_row("3")][-8:] == [""] * 8  # v3 was never measured
        _select_variant(app, 2)
        await pilot.press("m")  # against the baseline (nothing marked)
        await pilot.pause()
        assert type(app.screen).__name__ == "MetricsDiffScreen"
        rows = {str(k.value): [str(c) for c in app.screen.query_one(DataTable).get_row(k)]
                for k in app.screen.query_one(DataTable).rows}
        assert rows["duration_ns"] == ["duration", "80.26 us", "97.91 us", "+22.0 %"]
        await pilot.press("escape")
        _select_variant(app, 3)
        await pilot.press("m")
        await pilot.pause()
        assert type(app.screen).__name__ != "MetricsDiffScreen"
        assert any("no Nsight Compute metrics for v3" in n.message for n in app._notifications)


@sync
async def test_m_against_a_variant_with_sanitizer_results_but_no_metrics_says_to_run_ncu(settle, make_app, demo_root):
    """A variant compute-sanitizer ran on, Nsight Compute never: History has its stored
    results, but m (the metrics diff) has nothing to compare and says which variant to
    measure, as for one never inspected. Mutation caught: only a variant with no stored
    result at all was refused (the diff opened on missing metrics)."""
    import json

    from kerncap.replay import sanitize

    from inspect_helpers import TOOLS_DIR

    store_tool_results(demo_root)
    errors, count = sanitize.parse_report((TOOLS_DIR / "clean.memcheck.log").read_text())
    cubin = demo_root / "variants" / "3.cubin"
    r = sanitize.SanitizeResult(tool="memcheck", kernel="_Z6smoothPKfPfS0_ii", cubin=str(cubin),
                                label="variants/3.cubin", captured=False, errors=errors, reported_count=count,
                                log="memcheck.log", validation="pass", created="2026-11-30T10:00:00+0000")
    sanitize.stored_path(demo_root, cubin, "memcheck").write_text(json.dumps(r.to_dict()))
    app = make_app()
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        assert 3 in app.inspect and app.inspect[3].ncu is None and app.inspect[3].sanitize
        _select_variant(app, 3)
        await pilot.press("m")  # against the baseline, which has metrics
        await pilot.pause()
        assert type(app.screen).__name__ != "MetricsDiffScreen"
        assert any("no Nsight Compute metrics for v3 yet" in n.message for n in app._notifications), \
            [n.message for n in app._notifications]
        _select_variant(app, 2)
        await pilot.press("m")
        await pilot.pause()
        assert type(app.screen).__name__ == "MetricsDiffScreen"


@sync
async def test_ncu_run_fills_the_row(settle, make_app, demo_root, tmp_path, monkeypatch):
    argv = install_fake_tools(tmp_path / "bin", monkeypatch, "ok")
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        _select_variant(app, 1)
        await pilot.press("n")
        await _wait(pilot, lambda: (demo_root / "variants" / "1.ncu.json").is_file())
        await _wait(pilot, lambda: not app.query_one(ToolProgress).has_class("running"))
        await settle(pilot)
        assert "ncu µs" in _columns(app)
        row = [str(c) for c in app.query_one("#history-table", DataTable).get_row("1")]
        assert "80.26" in row
        assert (demo_root / "variants" / "1.ncu-rep").is_file()
        assert "--launch-skip" in open(argv).read()
        from kerncap.replay import ncu

        assert ncu.load_stored(demo_root, demo_root / "variants" / "1.cubin").label == "variants/1.cubin"


@sync
async def test_hanging_sanitizer_is_bounded_and_the_workbench_stays_responsive(settle, make_app, demo_root, tmp_path,
                                                                              monkeypatch):
    """The tool run's launch request is held (a handshake, not a clock) until the keys
    have been pressed, so the run is certainly still going while they are answered,
    however loaded the machine; then the stand-in hangs for real and the 6-s bound ends
    it. The waits below only bound a failure."""
    import threading

    from kerncap.replay.tools import ToolRun

    install_fake_tools(tmp_path / "bin", monkeypatch, "hang", log="clean.memcheck.log")
    monkeypatch.setenv("KERNCAP_TOOL_TIMEOUT", "6")
    held, go = threading.Event(), threading.Event()
    request = ToolRun.request

    def held_request(self, op, **args):
        held.set()
        go.wait(300)
        return request(self, op, **args)

    monkeypatch.setattr(ToolRun, "request", held_request)
    app = make_app()
    said = _record_notifications(app)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await pilot.press("4", "down", "k")
            await _wait(pilot, held.is_set, 120)
            assert app.query_one(ToolProgress).has_class("running")
            tabs = []
            for key in ("1", "2", "5", "4"):  # the event loop answers while the tool runs
                await pilot.press(key)
                tabs.append(app.query_one("#tabs").active)
            assert tabs == ["profile", "memory", "log-tab", "history"]
            assert app.query_one(ToolProgress).has_class("running")
            go.set()  # the launch request reaches the stand-in, which never answers
            await _wait(pilot, lambda: not app.query_one(ToolProgress).has_class("running"), 120)
            assert any("did not finish within 6 s" in m for m in said), said
            assert app._tool_cancel is None
    finally:
        go.set()


@sync
async def test_a_hanging_ncu_is_bounded_by_the_tool_timeout(settle, make_app, tmp_path, monkeypatch):
    """n on a variant whose run never answers: KERNCAP_TOOL_TIMEOUT bounds Nsight Compute as it
    bounds compute-sanitizer (above): past 1 s the stand-in ncu and its replay server are
    killed, the failure named with the bound, and the tool lock released. Without the bound
    ncu's own default (600 s) holds the workbench's one tool run; the wait below only bounds
    that failure."""
    install_fake_tools(tmp_path / "bin", monkeypatch, "hang")
    monkeypatch.setenv("KERNCAP_TOOL_TIMEOUT", "1")
    app = make_app()
    said = _record_notifications(app)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        _select_variant(app, 1)
        await pilot.press("n")
        assert app.query_one(ToolProgress).has_class("running")
        await _wait(pilot, lambda: not app.query_one(ToolProgress).has_class("running"), 30)
        assert any("did not finish within 1 s" in m for m in said), said
        assert app._tool_cancel is None

@sync
async def test_cancel_kills_the_tool(settle, make_app, tmp_path, monkeypatch):
    argv = install_fake_tools(tmp_path / "bin", monkeypatch, "hang")
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("4", "n")
        await _wait(pilot, lambda: os.path.exists(str(argv) + ".pid"))
        pid = int(open(str(argv) + ".pid").read())
        await pilot.press("k")  # a second run is refused while one runs
        assert any("already running" in n.message for n in app._notifications)
        await pilot.press("c")  # the fake tool sleeps an hour: only the cancel ends it
        await _wait(pilot, lambda: not app.query_one(ToolProgress).has_class("running"), 30)
        assert any(n.title == "cancelled" for n in app._notifications)
        try:
            os.kill(pid, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        assert not alive


@sync
async def test_split_beside_the_editor(settle, make_app):
    app = make_app()
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        live = app.query_one(LiveHistory)
        assert live.display and live.query_one(DataTable).row_count == 4
        await pilot.press("f4")
        assert live.styles.width.value == 56
        await pilot.press("f2")
        assert not live.display
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        assert not app.query_one(LiveHistory).display  # too narrow: off by default
        await pilot.press("f2")
        assert app.query_one(LiveHistory).display


@sync
async def test_source_opens_at_the_captured_kernel(settle, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        pane = app.query_one("#source-pane")
        assert pane.path.name == "smooth_kernel.cuh"  # not the translation unit smooth.cu
        editor = app.query_one(TextArea)
        assert editor.cursor_location == (6, 0)
        assert editor.document.get_line(6).startswith("__global__ void smooth(")


@sync
async def test_memory_map_zooms_around_the_selected_region(settle, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("2", "down")
        m = app.query_one(MemoryMap)
        assert m.focus_key == "r1"
        await pilot.press("plus", "plus")
        assert m.zoom == 4
        await pilot.press("minus")
        assert m.zoom == 2
        await pilot.press("0")
        assert m.zoom == 1


@sync
async def test_a_preview_read_for_the_dtype_left_behind_does_not_fill_the_new_dtypes_table(settle, make_app,
                                                                                            monkeypatch):
    """t while a region's preview is still being read (a 4 MiB chunk, hash-verified, off
    the event loop): the table shows the new dtype's values, and the older read, ending
    after, is dropped. The order is a handshake (the float32 read is held until the new
    dtype's table is up), not a clock. Mutation caught: the late float32 rows filled the
    table under the new dtype."""
    import threading

    from kerncap_tui import regions as R
    from kerncap_tui.widgets.memory_pane import MemoryPane

    value_rows, release, held = R.value_rows, threading.Event(), []

    def gated(pre, post, dtype):
        if dtype == "float32" and not release.is_set():
            held.append(threading.get_ident())
            assert release.wait(20)
        return value_rows(pre, post, dtype)

    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot)
        pane = app.query_one(MemoryPane)
        title = app.query_one("#value-title")
        assert pane.dtype == "float32" and "× float32" in str(title.render())
        filled = []
        call_from_thread = app.call_from_thread

        def spy(callback, *args, **kwargs):
            result = call_from_thread(callback, *args, **kwargs)
            filled.append(threading.get_ident())  # the callback has run on the event loop
            return result

        monkeypatch.setattr(app, "call_from_thread", spy)
        monkeypatch.setattr(R, "value_rows", gated)
        await pilot.press("down")  # another region: its float32 preview is read, and held
        await _wait(pilot, lambda: bool(held))
        await pilot.press("t")
        other = pane.dtype
        assert other != "float32"
        await _wait(pilot, lambda: f"× {other}" in str(title.render()))
        rows = app.query_one("#value-table", DataTable).row_count
        release.set()
        await _wait(pilot, lambda: held[0] in filled)
        await pilot.pause()
        assert pane.dtype == other and f"× {other}" in str(title.render()), str(title.render())
        assert app.query_one("#value-table", DataTable).row_count == rows


@sync
async def test_profile_pane_shows_the_capture_runs_launches(settle, make_app, demo_root):
    demo_launches(demo_root)
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        t = app.query_one("#profile-table", DataTable)
        assert [str(c.label) for c in t.columns.values()] == ["launches", "kernel"]
        cells = [str(c) for c in t.get_row("1")]
        assert cells == ["1", "▶ smooth(float const*, float*, float const*, int, int)"]
        status = str(app.query_one("#profile-status").render())
        assert "does not time kernels" in status


@sync
async def test_profile_pane_marks_xla_autotuning_kernels(settle, make_app, demo_root):
    """A JAX profile led by XLA's autotuner helpers: their rows dim and marked *, the status
    says what * is (kerncap profile's note, docs/capture-format.md)."""
    import json

    path = demo_root / "profile.json"
    doc = json.loads(path.read_text())
    helper = dict(doc["kernels"][0], name="_ZN15stream_executor3gpu12_GLOBAL__N_126RedzoneAllocatorKernelImplEPhmmmPj",
                  demangled="stream_executor::gpu::RedzoneAllocatorKernelImpl(unsigned char*)", total_ns=99_000)
    doc["kernels"].insert(0, helper)
    path.write_text(json.dumps(doc))
    app = make_app()
    async with app.run_test(size=(120, 24)) as pilot:
        await settle(pilot)
        t = app.query_one("#profile-table", DataTable)
        at = [str(c.label) for c in t.columns.values()].index("kernel")
        kernel_cells = [str(t.get_row(key)[at]) for key in ("0", "1")]
        assert kernel_cells[0].startswith("* stream_executor::gpu::RedzoneAllocatorKernelImpl")
        assert kernel_cells[1].startswith("▶ smooth")
        assert "* XLA autotuning" in str(app.query_one("#profile-status").render())


@sync
async def test_m_on_the_marked_row_asks_for_another_variant(settle, make_app, demo_root):
    """m with the cursor on the marked row (its metrics against themselves) opens no diff and
    says to mark another variant (mutation caught: the diff opened, every change 0)."""
    store_tool_results(demo_root)
    app = make_app()
    said = _record_notifications(app)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        _select_variant(app, 2)
        await pilot.press("space", "m")  # mark v2, then m on v2 itself
        await pilot.pause()
        assert type(app.screen).__name__ != "MetricsDiffScreen"
        assert any("mark another variant" in s for s in said)
