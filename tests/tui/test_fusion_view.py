"""Fusions in the workbench (issue 29, docs/sequences.md "The edit loop"), over the SYNTHETIC
sequence of tests/sequence_sim.py on seq_pipeline.cu's real module (nvcc compiles the
fused kernel; the simulated core runs it), with the device copy between its two launches
taken out (tests/test_fusion_build.py, `without_the_copy`) so that a fusion of the two can
pass: `m` marks a range in the Profile pane, `F` asks for the fusion's name (prefilled),
the skeleton opens in Source with its parameters and launch, a save builds it through the
engine's Session.build_fusion and History records a row that says it is a fusion; the
engine's refusals are shown as they are. The GPU suite runs the same flow on a real
capture (tests/gpu/test_sequences.py::test_the_workbench_fuses_two_launches_…)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Label, Static, TextArea

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_fusion_build import fused_body, without_the_copy  # noqa: E402
from test_sequences import NVCC, _pipeline_with_entries  # noqa: E402

from kerncap_tui.app import KerncapApp  # noqa: E402
from kerncap_tui.messages import SourceChanged  # noqa: E402
from kerncap_tui.screens.fuse_screen import FuseScreen  # noqa: E402
from kerncap_tui.widgets.fusion_panel import FusionPanel  # noqa: E402
from kerncap_tui.widgets.history_pane import HistoryPane  # noqa: E402
from kerncap_tui.widgets.profile_pane import ProfilePane  # noqa: E402
from kerncap_tui.widgets.source_pane import SourcePane  # noqa: E402

pytestmark = pytest.mark.skipif(NVCC is None, reason="needs nvcc (the kernels and the fused kernel are compiled)")


@pytest.fixture
def repro(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return without_the_copy(_pipeline_with_entries(tmp_path, monkeypatch))


def _cells(table: DataTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def _log(app) -> str:
    """The log pane's text, also what it holds back until its tab is first shown (RichLog
    renders only once it knows its size)."""
    log = app.query_one("#log")
    pending = [getattr(d.content, "plain", str(d.content)) for d in getattr(log, "_deferred_renders", ())]
    return "\n".join([line.text for line in log.lines] + pending)


async def _mark(pilot, settle, first: int, last: int) -> None:
    """The cursor to `first`, m, the cursor to `last`, m (the Profile pane's table focused)."""
    table = pilot.app.query_one(ProfilePane).query_one(DataTable)
    table.focus()
    table.move_cursor(row=first)
    await settle(pilot)
    await pilot.press("m")
    table.move_cursor(row=last)
    await settle(pilot)
    await pilot.press("m")
    await settle(pilot)


async def _save(pilot, settle, text: str | None = None) -> None:
    """Write `text` into the editor (else keep it), ctrl+s, and what the watchdog posts."""
    app = pilot.app
    source = app.query_one(SourcePane)
    if text is not None:
        source.query_one(TextArea).load_text(text)
    source.action_save()
    app.post_message(SourceChanged(source.path))  # also without inotify
    await pilot.pause(0.6)  # the debounce
    await settle(pilot)


def test_a_marked_range_fused_opens_its_skeleton_and_a_save_records_a_fusion_row(repro, settle):
    async def run():
        app = KerncapApp(repro)
        async with app.run_test(size=(160, 44)) as pilot:
            await settle(pilot)
            profile = app.query_one(ProfilePane)
            await _mark(pilot, settle, 0, 1)
            rows = _cells(profile.query_one(DataTable))
            assert [r[0] for r in rows] == ["┏ 0", "┗ 1"] and profile.marked == (0, 1)
            assert "range 0-1: F fuses it" in str(profile.query_one("#profile-status", Static).content)
            await pilot.press("F")
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, FuseScreen) and screen.query_one("#fuse-name", Input).value == "sp_scale-sp_add"
            await pilot.press("enter")
            await settle(pilot)
            # the skeleton, open in Source with its parameters and the launch from fusion.json
            assert not isinstance(app.screen, FuseScreen)
            source = app.query_one(SourcePane)
            d = repro / "fusions" / "sp_scale-sp_add"
            assert source.fusion == "sp_scale-sp_add" and source.path == d / "fused.cu"
            assert "kc_fused(" in source.query_one(TextArea).text
            panel = app.query_one(FusionPanel)
            params = str(panel.query_one("#fusion-params", Static).content)
            assert "buf0 const float* read: launch 0 argument 0" in params and "buf1 float* written" in params
            assert "l1_arg2 int = 0x00010000 (captured)" in params, params
            assert [panel.query_one(f"#fusion-{k}", Input).value for k in ("grid", "block", "smem")] == [
                "1,1,1", "256,1,1", "0"]
            assert repro / "fusions" in app.watcher.watched  # a save there reaches the app
            # the body written and saved: built, validated, timed, recorded as a fusion
            await _save(pilot, settle, fused_body(repro, "sp_scale-sp_add"))
            history = app.session.history
            assert len(history.variants) == 2, _log(app)
            v = history.variants[-1]
            assert v.validation == "pass" and v.fusion["name"] == "sp_scale-sp_add", (v.validation, v.note, _log(app))
            assert [e["name"] for e in v.fusion["excluded"]] == ["buf1"]
            cells = _cells(app.query_one(HistoryPane).query_one(DataTable))
            assert cells[1][1] == "v1" and cells[1][2] == "0.0100" and cells[1][6].startswith("✓")
            assert cells[1][8:10] == ["fused 0-1 sp_scale-sp_add", "0.0100 (was 0.0200)"], cells[1]
            status = str(app.query_one(HistoryPane).query_one("#history-status", Static).content)
            assert ("v1: fusion sp_scale-sp_add of launches 0-1: fused launch 0.0100 ms vs 0.0200 ms for launches "
                    "0-1 (2.00×); not compared: buf1") in status, status
            assert "not compared (only the replaced launches use them): buf1 (inferred)" in _log(app)
            # b rebuilds what Source shows: the fusion, unchanged
            await pilot.press("escape")
            await pilot.press("b")
            await settle(pilot)
            assert len(app.session.history.variants) == 2 and "fusion sp_scale-sp_add is unchanged" in _log(app)

    asyncio.run(run())


def test_the_fused_launch_is_edited_through_the_engine_and_rebuilt(repro, settle):
    """grid in the fusion panel: 0 is the engine's refusal (one message, nothing written);
    2 is written to fusion.json and builds the fusion again (a new row)."""
    async def run():
        app = KerncapApp(repro)
        async with app.run_test(size=(160, 44)) as pilot:
            await settle(pilot)
            await _mark(pilot, settle, 0, 1)
            await pilot.press("F")
            await settle(pilot)
            app.screen.query_one("#fuse-name", Input).value = "pair"
            await pilot.press("enter")
            await settle(pilot)
            await _save(pilot, settle, fused_body(repro, "pair"))
            assert len(app.session.history.variants) == 2, _log(app)
            config = repro / "fusions" / "pair" / "fusion.json"
            grid = app.query_one(FusionPanel).query_one("#fusion-grid", Input)
            grid.value = "0"
            grid.focus()
            await pilot.press("enter")
            await settle(pilot)
            assert "every size must be >= 1" in _log(app) and json.loads(config.read_text())["grid"] == [1, 1, 1]
            grid.value = "2"
            app.query_one(FusionPanel).query_one("#fusion-smem", Input).value = "1024"
            await pilot.press("enter")
            await settle(pilot)
            await pilot.pause(0.6)
            await settle(pilot)
            launch = json.loads(config.read_text())
            assert (launch["grid"], launch["shared_mem_bytes"]) == ([2, 1, 1], 1024), launch
            assert app.query_one(FusionPanel).query_one("#fusion-smem", Input).value == "1024"
            assert [v.id for v in app.session.history.variants] == [0, 1, 2], _log(app)

    asyncio.run(run())


def test_the_engines_refusals_are_shown_as_they_are(repro, settle):
    """A name already taken and a range of one launch: the engine's message in the dialog
    (it stays open for another name); a fused kernel nvcc cannot compile: the build's error
    in the log, no row."""
    async def run():
        app = KerncapApp(repro)
        async with app.run_test(size=(160, 44)) as pilot:
            await settle(pilot)
            from kerncap import api

            api.fuse_skeleton(repro, 0, 1, "taken")
            # one launch marked (m once): the engine says a fusion replaces two or more
            profile = app.query_one(ProfilePane)
            profile.query_one(DataTable).focus()
            await pilot.press("m", "F")
            await settle(pilot)
            status = app.screen.query_one("#fuse-status", Label)
            await pilot.press("enter")
            await settle(pilot)
            assert isinstance(app.screen, FuseScreen)
            assert "launches 0-0 are one launch: a fusion replaces two or more" in str(status.content)
            await pilot.press("escape")
            await pilot.press("m")  # m again on the launch marked alone: no range
            assert profile.marked is None
            await _mark(pilot, settle, 1, 0)  # marked from its last launch: the range is still 0-1
            assert profile.marked == (0, 1)
            await pilot.press("F")
            await settle(pilot)
            # this range has a fusion already: offered, and enter opens it; another taken name is refused
            field = app.screen.query_one("#fuse-name", Input)
            assert field.value == "taken" and "replaces these launches already" in str(
                app.screen.query_one("#fuse-status", Label).content)
            api.fuse_skeleton(repro, 0, 1, "other")
            field.value = "other"
            await pilot.press("enter")
            await settle(pilot)
            assert isinstance(app.screen, FuseScreen)
            assert "fusions/other exists (maybe edited)" in str(app.screen.query_one("#fuse-status", Label).content)
            field.value = "taken"
            await pilot.press("enter")
            await settle(pilot)
            assert app.query_one(SourcePane).fusion == "taken"
            await _save(pilot, settle, fused_body(repro, "taken").replace("2.0f *", "2.0f * undeclared_thing *"))
            log = _log(app)
            assert "build: nvcc could not compile" in log and "undeclared_thing" in log, log
            assert app.session.history.variants == []

    asyncio.run(run())


def test_m_after_a_marked_range_starts_a_new_range_on_the_launch(repro, settle):
    """m once a range is marked (both ends) starts a new range on the launch under the cursor,
    whichever launch that is: the range is not stretched to it (F would fuse launches the user
    did not mark), and its first end alone is drawn and named in the status line; m on it again
    clears it."""
    async def run():
        app = KerncapApp(repro)
        async with app.run_test(size=(160, 44)) as pilot:
            await settle(pilot)
            profile = app.query_one(ProfilePane)
            table = profile.query_one(DataTable)
            await _mark(pilot, settle, 0, 1)
            assert profile.marked == (0, 1)
            await pilot.press("m")  # the cursor still on launch 1, the range's last end
            assert profile.marked == (1, 1)
            assert [r[0] for r in _cells(table)] == ["0", "◆ 1"]
            assert "range from 1: m on its last launch" in str(profile.query_one("#profile-status", Static).content)
            await pilot.press("m")
            assert profile.marked is None and [r[0] for r in _cells(table)] == ["0", "1"]
            await _mark(pilot, settle, 1, 0)
            table.move_cursor(row=0)
            await settle(pilot)
            await pilot.press("m")  # on the range's first end: a new range there too
            assert profile.marked == (0, 0) and [r[0] for r in _cells(table)] == ["◆ 0", "1"]

    asyncio.run(run())


def _marked_then(settle, *keys):
    """A snapshot's run_before: launches 0-1 marked for a fusion, then `keys` pressed."""
    async def run_before(pilot):
        await settle(pilot)
        await _mark(pilot, settle, 0, 1)
        for key in keys:
            await pilot.press(key)
            await settle(pilot)
    return run_before


def test_snapshot_of_a_marked_range(snap_compare, settle, repro):
    """The Profile tab at 140x40 with launches 0-1 marked for a fusion."""
    assert snap_compare(KerncapApp(repro), terminal_size=(140, 40), run_before=_marked_then(settle))


def test_snapshot_of_the_fusion_dialog(snap_compare, settle, repro):
    """The fusion dialog at 80x24 over the marked range, its name prefilled."""
    assert snap_compare(KerncapApp(repro), terminal_size=(80, 24), run_before=_marked_then(settle, "F"))


def test_snapshot_of_a_fusion_open_in_source(snap_compare, settle, repro):
    """The Source tab at 140x40 with the skeleton open: its parameters and launch above the editor."""
    assert snap_compare(KerncapApp(repro), terminal_size=(140, 40), run_before=_marked_then(settle, "F", "enter"))
