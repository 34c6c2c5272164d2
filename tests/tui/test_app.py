"""Pilot tests driving the real workbench on the demo reproducer (no GPU needed)."""

from __future__ import annotations

import asyncio
import functools
import os
import signal

import pytest
from textual.widgets import DataTable, RichLog, TextArea

from kerncap_tui.messages import SourceChanged
from kerncap_tui.widgets.history_pane import HistoryPane
from kerncap_tui.widgets.memory_pane import MemoryPane
from kerncap_tui.widgets.source_pane import SourcePane


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
        profile = app.query_one("#profile-table", DataTable)
        assert profile.row_count == 2 and "smooth(float const*" in str(profile.get_row_at(0))  # the hot one first
        regions = app.query_one("#region-table", DataTable)
        bases = [str(regions.get_row_at(i)[2]) for i in range(regions.row_count)]
        assert bases == [f"0x{r['base']:x}" for r in app.capture.manifest["regions"]]
        assert app.query_one("#value-table", DataTable).row_count == 1024  # region 0's first 1024 floats
        assert "region 0 · first 1024 × float32" in str(app.query_one("#value-title").render())
        assert "__global__ void smooth(" in app.query_one("#editor", TextArea).text
        history = app.query_one("#history-table", DataTable)
        assert [str(history.get_row_at(i)[1]) for i in range(history.row_count)] == ["baseline", "v1", "v2", "v3"]
        assert app.watcher is not None and app.watcher.running


@sync
async def test_kerncap_tui_paints_before_it_reads_the_reproducer(settle, demo_root, monkeypatch):
    """`run` (kerncap-tui) opens the reproducer after the first frame, not in on_mount before
    it (issue 47: the first frame within 1 s); once settled the panes are filled as always."""
    from kerncap_tui.app import KerncapApp

    open_at_mount_end = []
    mount = KerncapApp.on_mount

    def on_mount(self):
        mount(self)
        open_at_mount_end.append(self.session is not None)

    monkeypatch.setattr(KerncapApp, "on_mount", on_mount)
    app = KerncapApp(demo_root, demo=True, open_after_first_frame=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert open_at_mount_end == [False]
        assert app.session is not None and app.query_one("#profile-table", DataTable).row_count == 2
        history = app.query_one("#history-table", DataTable)
        assert [str(history.get_row_at(i)[1]) for i in range(history.row_count)] == ["baseline", "v1", "v2", "v3"]


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
async def test_a_tab_switch_moves_focus_at_once(settle, make_app):
    """Each tab's widget has focus as soon as its tab is switched to, before the widgets
    of the tab left behind are hidden: by a later focus message, the hidden ones handed
    focus on one Hide at a time and a fusion opened from its dialog was left with none
    about one time in four (tests/tui/test_fusion_view.py's snapshot)."""
    from kerncap_tui import panes

    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        for pane in panes.PANES:
            if not app.query(pane.focus):
                continue  # a pane this reproducer does not fill
            app.action_tab(pane.name)
            assert app.focused is app.query_one(pane.focus), (pane.name, app.focused)
            await settle(pilot)
            assert app.focused is app.query_one(pane.focus), (pane.name, app.focused)


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
async def test_x_extracts_the_kernel_under_the_cursor(settle, make_app):
    """The Profile pane's `x` (its footer's Extract) opens the dialog for the row under the
    cursor, like Enter: here the second kernel, not the hot one."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("1", "down", "x")
        await pilot.pause()
        assert type(app.screen).__name__ == "ExtractScreen"
        second = app.profile.kernels[1].name
        assert app.screen.kernel == second != app.profile.kernels[0].name


@sync
async def test_x_and_enter_extract_the_kernel_shown_after_a_re_sort_or_a_filter(settle, make_app):
    """A row names the kernel it shows whatever the order: R puts the cheaper kernel first
    and x on the top row extracts that one; a filter that leaves only it, then Enter, the
    same. Mutation caught: rows keyed by their shown position (the hot kernel extracted)."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        kernels = app.profile.kernels
        hot, cheap = max(kernels, key=lambda k: k.total_ns), min(kernels, key=lambda k: k.total_ns)
        assert kernels.index(hot) == 0 and hot.name != cheap.name  # the profile lists the hot one first
        await pilot.press("1", "R", "x")  # ascending total: the cheaper kernel on top
        await pilot.pause()
        assert type(app.screen).__name__ == "ExtractScreen" and app.screen.kernel == cheap.name
        await pilot.press("escape", "R")  # the hot one on top again
        app.query_one("#profile-filter").value = (cheap.demangled or cheap.name)[:6]  # what / and typing do
        table = app.query_one("#profile-table", DataTable)
        table.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert table.row_count == 1 and (cheap.demangled or cheap.name)[:6] in str(table.get_row_at(0))
        assert type(app.screen).__name__ == "ExtractScreen" and app.screen.kernel == cheap.name


@sync
async def test_the_profile_filter_matches_the_demangled_name_it_shows(settle, make_app):
    """The filter finds a kernel by what its row shows, the demangled name (a parameter
    type, a namespace), not only by the mangled one: "float const*" is in smooth's
    signature only, "(float*" in init_smooth's only; neither is in a mangled name."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.query_one("#profile-table", DataTable)
        for needle, kernel in (("float const*", "smooth(float const*"), ("(FLOAT*", "init_smooth(float*")):
            app.query_one("#profile-filter").value = needle
            await pilot.pause()
            assert table.row_count == 1 and kernel in str(table.get_row_at(0)), (needle, table.row_count)


@sync
async def test_the_profile_pane_opens_the_newest_saved_profile(settle, make_app, demo_root):
    """Without its own profile.json, a directory's Profile is the newest profile saved in
    its profiles/ (a workspace's, `kerncap profile` names them by time; a second one in the
    same second gets `-2`), not the oldest. Mutation caught: the oldest opened."""
    import json

    profile = json.loads((demo_root / "profile.json").read_text())
    (demo_root / "profile.json").unlink()
    saved = demo_root / "profiles"
    saved.mkdir()
    hot = max(profile["kernels"], key=lambda k: k["total_ns"])
    cheap = min(profile["kernels"], key=lambda k: k["total_ns"])
    for stem, kernels in (("20261201-120000", [hot]), ("20261203-120000", [hot]), ("20261203-120000-2", [cheap])):
        (saved / f"{stem}.json").write_text(json.dumps({**profile, "kernels": kernels}))
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.query_one("#profile-table", DataTable)
        assert table.row_count == 1 and [k.name for k in app.profile.kernels] == [cheap["name"]]
        assert (cheap["demangled"] or cheap["name"])[:10] in str(table.get_row_at(0))


@sync
async def test_history_keeps_its_cursor_on_the_row_across_a_mark_and_a_refresh(settle, make_app):
    """History redraws its rows on a mark, a build and a tool's end; the cursor stays on the
    row it was on, the last one too (where n, k, a and ctrl+r act next). Mutation caught:
    the cursor's bound one row short (the last row's cursor moved up one on every redraw)."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        pane = app.query_one(HistoryPane)
        await pilot.press("4")
        table = pane.query_one(DataTable)
        table.move_cursor(row=table.row_count - 1)
        await pilot.pause()
        assert pane.selected().id == 3
        await pilot.press("space")  # mark v3: the rows are redrawn with its dot
        await pilot.pause()
        assert pane.marked == 3 and pane.selected().id == 3
        pane.show(pane.history)  # what a build or a tool's end does
        await pilot.pause()
        assert pane.selected().id == 3
        table.move_cursor(row=1)
        pane.show(pane.history)
        await pilot.pause()
        assert pane.selected().id == 1


@sync
async def test_space_on_the_marked_row_unmarks_it_and_d_diffs_against_the_baseline_again(settle, make_app):
    """space marks a History row (its dot; d and m compare against it); space on it again
    takes the mark off, and d diffs against the baseline again. Mutation caught: a second
    space left the mark on (d on that row then refused: "mark another variant")."""
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        pane = app.query_one(HistoryPane)
        await pilot.press("4")
        table = pane.query_one(DataTable)
        table.move_cursor(row=table.get_row_index("3"))
        await pilot.press("space")
        await pilot.pause()
        assert pane.marked == 3 and str(table.get_row("3")[0]) == "●"
        await pilot.press("space")
        await pilot.pause()
        assert pane.marked is None and str(table.get_row("3")[0]) == " ", pane.marked
        await pilot.press("d")
        await settle(pilot)
        assert type(app.screen).__name__ == "DiffScreen", [n.message for n in app._notifications]
        assert app.screen.title_text.startswith("source/ baseline → v3"), app.screen.title_text


@sync
async def test_s_sorts_the_kernel_column_a_to_z_and_the_numbers_largest_first(settle, make_app):
    """s moves the sort to the next column: numbers largest first (the costly kernels on
    top), names A to Z. Mutation caught: the direction flipped (names Z to A, the numbers
    smallest first)."""
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        await settle(pilot)
        await pilot.press("1")
        pane = app.query_one("ProfilePane")
        table = app.query_one("#profile-table", DataTable)

        def column(key: str) -> list[str]:
            return [str(table.get_cell_at((r, list(table.columns).index(key)))).removeprefix("▶ ")
                    for r in range(table.row_count)]

        assert table.row_count >= 2
        while pane.sort_column != "kernel":
            await pilot.press("s")
            await pilot.pause()
        names = column("kernel")
        assert not pane.sort_reverse and names == sorted(names, key=str.lower) and len(set(names)) > 1, names
        await pilot.press("s")  # min µs: the largest first
        await pilot.pause()
        assert pane.sort_column == "min" and pane.sort_reverse
        mins = [float(x) for x in column("min")]
        assert mins == sorted(mins, reverse=True) and len(set(mins)) > 1, mins


@sync
async def test_a_header_sorts_its_column_names_a_to_z_numbers_largest_first_and_again_reverses(settle, make_app):
    """Selecting a column's header (a click) sorts by it as s does: the kernel names A to
    Z, a number column largest first; the same header again reverses it. Mutation caught:
    a new header's direction flipped (names Z to A, numbers smallest first)."""
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        await settle(pilot)
        await pilot.press("1")
        pane = app.query_one("ProfilePane")
        table = app.query_one("#profile-table", DataTable)
        keys = list(table.columns)

        async def header(key: str) -> list[str]:
            index = [str(k.value) for k in keys].index(key)
            table.post_message(DataTable.HeaderSelected(table, keys[index], index, table.columns[keys[index]].label))
            await pilot.pause()
            return [str(table.get_cell_at((r, index))).removeprefix("▶ ") for r in range(table.row_count)]

        assert table.row_count >= 2
        names = await header("kernel")
        assert pane.sort_column == "kernel" and not pane.sort_reverse, pane.sort_reverse
        assert names == sorted(names, key=str.lower) and len(set(names)) > 1, names
        mins = [float(x) for x in await header("min")]
        assert pane.sort_column == "min" and pane.sort_reverse
        assert mins == sorted(mins, reverse=True) and len(set(mins)) > 1, mins
        mins = [float(x) for x in await header("min")]  # the same header again: smallest first
        assert not pane.sort_reverse and mins == sorted(mins), mins


@sync
async def test_a_build_whose_validation_was_skipped_is_notified_as_information(settle, make_app):
    """A build's row is notified with its verdict: a failed or inconclusive validation is an
    error notification, a pass or a skipped validation (nothing to compare: not a failure)
    is information. Mutation caught: a skipped validation notified as an error."""
    from kerncap import api
    from kerncap_tui.app import BuildFinishedHere

    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        for validation, severity in (("skipped", "information"), ("fail", "error"), ("pass", "information")):
            v = app.session.history.record(median_ms=0.002, validation=validation, cubin="variants/1.cubin")
            app.post_message(BuildFinishedHere(api.BuildResult("recorded", variant=v)))
            await settle(pilot)
            said = [n for n in app._notifications if n.title == "history" and n.message.startswith(f"{v.label}:")]
            assert [n.severity for n in said] == [severity], (validation, [(n.message, n.severity) for n in said])


@sync
async def test_gpu_actions_notify_instead_of_crashing(settle, make_app, monkeypatch):
    """Without the replay core (a wheel built without the CUDA toolkit) the baseline's
    replay fails in the replay server's own import of it: the workbench says it needs a
    GPU and logs why. The replay core is built wherever the suite runs, so its import is
    made to fail here, in the server's real code run in-process (tests/replay_sim.py)."""
    import sys

    import kerncap
    import replay_sim as sim

    monkeypatch.setitem(sys.modules, "kerncap._replay", None)  # `from kerncap import _replay` raises ImportError
    monkeypatch.delattr(kerncap, "_replay", raising=False)
    monkeypatch.setattr("kerncap.replay.client.ReplayClient", sim.InProcessClient)
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("B")  # time the baseline: no replay core here
        await settle(pilot)
        notes = [(n.title, n.message) for n in app._notifications]
        assert [t for t, _ in notes] == ["baseline needs a GPU"], notes
        assert "replay core not built" in notes[0][1]
        await pilot.press("5")  # RichLog renders once it has a size
        await pilot.pause()
        log = "\n".join(str(line.text) for line in app.query_one("#log", RichLog).lines)
        assert "baseline:" in log and "replay core not built" in log


@sync
async def test_saves_are_debounced_into_one_build(settle, make_app, monkeypatch):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        builds = []
        monkeypatch.setattr(app, "action_build", lambda: builds.append(1))
        for _ in range(5):
            app.post_message(SourceChanged(app.root / "source" / "x.cu"))
        await pilot.pause(0.6)
        assert builds == [1]


@sync
async def test_restore_puts_variant_source_back(settle, make_app):
    """Restoring v3 puts v3's committed files back into source/, and the editor shows the
    restored text. The demo's working tree holds v2, so a restore that does nothing fails
    (mutation: History.restore a no-op), and so does one that leaves the editor on the
    text it replaced (mutation: the Source pane not reloaded)."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        hist = app.query_one(HistoryPane).history
        target = hist.get(3)  # "window off by one": not the working tree's source
        source = app.root / "source"
        files = sorted(p for p in source.rglob("*") if p.is_file())
        commit = hist._commit_of(target)
        want = {p: hist.repo().git.show(f"{commit}:source/{p.relative_to(source)}",
                                        strip_newline_in_stdout=False) for p in files}
        assert any(want[p] != p.read_text() for p in files), "v3 should differ from the working tree"
        source_pane = app.query_one(SourcePane)
        shown = source_pane.path
        assert shown in want and app.query_one("#editor", TextArea).text != want[shown]
        app.restore_variant(target)
        await settle(pilot)
        assert {p: p.read_text() for p in files} == want
        # the editor shows the restored text (a ctrl+s of the old text would undo the restore)
        assert source_pane.path == shown and app.query_one("#editor", TextArea).text == want[shown]


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


@sync
async def test_a_save_seen_several_times_queues_its_build_once(settle, make_app, monkeypatch):
    """The watchdog reports one editor save several times (modified, closed, moved onto the
    file): the build it starts holds that source's request once, one History row (mutation
    caught: each event queued its own request, the same source built and recorded twice)."""
    from kerncap import api

    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        monkeypatch.setattr(app, "action_build", lambda: None)  # the queue stays to be read
        for _ in range(3):
            app.post_message(SourceChanged(app.root / "source" / "x.cu"))
        await pilot.pause()
        assert app.pending_builds == [api.BuildRequest()]


@sync
async def test_T_steps_through_every_theme_and_back_to_the_first(settle, make_app):
    """T (the palette's Theme) moves to the next registered theme each time, round to the
    first (mutation caught: T kept the theme it was on)."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        names, start = list(app.theme_names), app.theme
        assert start in names and len(set(names)) > 1
        seen = []
        for _ in names:
            app.action_next_theme()
            seen.append(app.theme)
        assert seen[0] != start and seen[-1] == start and set(seen) == set(names)


@sync
async def test_the_workbench_times_its_builds_and_its_baseline_on_its_timer(settle, demo_root, monkeypatch):
    """`kerncap-tui --timer kernel`: every build (a save's, b's) and the baseline (B) ask the
    session for the kernel timer (mutation caught: the builds kept the events)."""
    from types import SimpleNamespace

    from kerncap import api
    from kerncap.errors import KerncapError
    from kerncap_tui.app import KerncapApp, parse_args

    assert parse_args([str(demo_root), "--timer", "kernel"]).timer == "kernel"
    assert parse_args([str(demo_root)]).timer == "events"
    app = KerncapApp(demo_root, demo=True, timer="kernel")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        asked = []

        def baseline(request, **_):
            asked.append(request)
            raise KerncapError("stopped here")

        monkeypatch.setattr(app.session, "build", lambda r, **_: asked.append(r) or SimpleNamespace(status="unchanged"))
        monkeypatch.setattr(app.session, "baseline", baseline)
        app.action_build()
        for _ in range(50):
            if asked:
                break
            await pilot.pause(0.05)
        app.action_baseline()
        for _ in range(50):
            if len(asked) > 1:
                break
            await pilot.pause(0.05)
        await settle(pilot)
        assert [r.timer for r in asked] == ["kernel", "kernel"], asked
        assert isinstance(asked[0], api.BuildRequest)


@sync
async def test_history_marks_the_rows_the_kernel_timer_timed(settle, make_app):
    """A row measured on the kernel timer reads ~2 µs under one between events: its median
    carries `kt` (not `k`, History's sanitize key) and the status line says what that means
    (mutation caught: no mark)."""
    from textual.widgets import Static

    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        pane = app.query_one(HistoryPane)
        status = pane.query_one("#history-status", Static)
        assert "timed by the kernel's records" not in str(status.content)
        v = pane.history.variants[-1]
        v.timer = "kernel"
        pane.show(pane.history)
        await settle(pilot)
        table = pane.query_one(DataTable)
        assert str(table.get_row(str(v.id))[2]) == f"{v.median_ms:.4f} kt"
        assert str(table.get_row("0")[2]) == f"{pane.history.variants[0].median_ms:.4f}"
        assert "kt: timed by the kernel's records (--timer kernel)" in str(status.content)
