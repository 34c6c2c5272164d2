"""Pilot tests driving the real workbench on the demo reproducer (no GPU needed)."""

from __future__ import annotations

import asyncio
import functools
import os
import signal

from textual.widgets import DataTable, RichLog, TextArea

from kerncap_tui.messages import SourceChanged
from kerncap_tui.widgets.history_pane import HistoryPane
from kerncap_tui.widgets.memory_pane import MemoryPane


def sync(test):
    """Run an async Pilot test without an asyncio pytest plugin."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        asyncio.run(test(*args, **kwargs))

    return run




@sync
async def test_starts_on_demo_with_all_four_panes_filled(settle, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.query_one("#profile-table", DataTable).row_count > 0
        assert app.query_one("#region-table", DataTable).row_count > 0
        assert app.query_one("#value-table", DataTable).row_count > 0
        assert app.query_one("#editor", TextArea).text.strip()
        assert app.query_one("#history-table", DataTable).row_count > 0
        assert app.watcher is not None and app.watcher.running


@sync
async def test_keys_through_every_pane(settle, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("1", "s", "s", "R", "slash", "z", "z", "z", "enter", "backspace")  # sort, filter
        await pilot.press("escape", "1", "down", "up")
        await pilot.press("2", "down", "down", "t", "t", "up")  # regions, dtype switch
        await settle(pilot)
        assert app.query_one(MemoryPane).dtype == "bfloat16"
        await pilot.press("3", "down", "enter", "escape")  # source tree → editor → back
        await pilot.press("4", "down", "space", "up", "d")  # mark v1, diff against baseline
        await settle(pilot)
        assert type(app.screen).__name__ == "DiffScreen"
        await pilot.press("escape", "5", "T", "T")
        await pilot.press("ctrl+p")
        await pilot.press(*"history", "escape")
        await pilot.pause()
        assert app.is_running


@sync
async def test_extract_offers_the_profiled_command(settle, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("1", "enter")
        await pilot.pause()
        assert type(app.screen).__name__ == "ExtractScreen"
        assert app.screen.kernel == app.profile.kernels[0].name
        await pilot.press("escape")
        await pilot.pause()
        assert type(app.screen).__name__ != "ExtractScreen"


@sync
async def test_gpu_actions_notify_instead_of_crashing(settle, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("B")  # time the baseline: no GPU / replay core here
        await settle(pilot)
        titles = [n.title for n in app._notifications]
        assert any(t.startswith("baseline") for t in titles), titles
        await pilot.press("5")  # RichLog renders once it has a size
        await pilot.pause()
        log = "\n".join(str(line.text) for line in app.query_one("#log", RichLog).lines)
        assert "baseline:" in log


@sync
async def test_saves_are_debounced_into_one_build(settle, make_app, monkeypatch):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        builds = []
        monkeypatch.setattr(app, "action_build", lambda: builds.append(1))
        for _ in range(5):
            app.post_message(SourceChanged(app.source_dir / "x.cu"))
        await pilot.pause(0.6)
        assert builds == [1]


@sync
async def test_restore_puts_variant_source_back(settle, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        hist = app.query_one(HistoryPane).history
        target = next(v for v in hist.variants if v.id > 0)
        before = {p.name: p.read_text() for p in app.source_dir.iterdir() if p.is_file()}
        app.restore_variant(target)
        await settle(pilot)
        after = {p.name: p.read_text() for p in app.source_dir.iterdir() if p.is_file()}
        assert after != before or not hist.diff(hist.variants[0], target).strip()


@sync
async def test_sighup_stops_watcher_and_replay(settle, make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        watcher = app.watcher
        assert watcher.running
        os.kill(os.getpid(), signal.SIGHUP)
        await pilot.pause(0.2)
        assert not watcher.running
        assert app.session is None  # its replay server and compile worker closed
    assert app.return_code == 128 + signal.SIGHUP


@sync
async def test_no_color_is_respected(settle, make_app, monkeypatch):
    from textual.filter import Monochrome, NoColor

    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app()  # Textual reads NO_COLOR when the app is created
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.no_color
        assert any(isinstance(f, (NoColor, Monochrome)) for f in app._filters)


def test_main_rejects_a_missing_directory(tmp_path, capsys):
    from kerncap_tui.app import main

    assert main([str(tmp_path / "nope")]) == 3
    err = capsys.readouterr().err
    assert "nope is not a directory" in err and "hint:" in err
