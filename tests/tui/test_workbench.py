"""The pane registry (kerncap_tui.panes): every entry gets its tab, its number key, its
palette entries and its focus target, with nothing else to edit; and the workbench's
paper cuts (issue 17): the footer at 80x24, the extract dialog's failure, the demo's
scratch copy, unchanged sources."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from textual.widgets import TabbedContent

from kerncap_tui import panes
from kerncap_tui.app import KerncapApp
from kerncap_tui.commands import palette_entries


def test_every_pane_has_its_key_and_tab_binding():
    keys = {b.key: b for b in KerncapApp.BINDINGS}
    for i, pane in enumerate(panes.PANES, 1):
        binding = keys[str(i)]
        assert binding.action == f"tab('{pane.name}')" and binding.id == f"tab.{pane.name}"
    assert set(KerncapApp.PANES) == {p.name for p in panes.PANES if p.widget is not None}


def test_each_key_opens_its_pane_and_focuses_it(make_app, settle):
    async def run():
        app = make_app()
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(pilot)
            entries = palette_entries(app)
            for i, pane in enumerate(panes.PANES, 1):
                await pilot.press(str(i))
                await pilot.pause()
                assert app.query_one(TabbedContent).active == pane.tab
                assert app.focused is app.query_one(pane.focus), pane.name
                if pane.widget is not None:
                    ours = [t for t, _, _ in entries if t.startswith(f"{pane.name.title()}: ")]
                    assert len(ours) == sum(1 for b in pane.widget.BINDINGS if getattr(b, "id", None))

    asyncio.run(run())


def test_footer_keeps_quit_at_80_columns(make_app, settle):
    """Every pane's keys, build, baseline and `q Quit` fit an 80x24 terminal's footer."""
    import re
    from html import unescape

    async def run():
        app = make_app()
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            for i, pane in enumerate(panes.PANES, 1):
                await pilot.press(str(i))
                await pilot.pause()
                svg = app.export_screenshot()
                cells = re.findall(r'<text[^>]*y="([\d.]+)"[^>]*>(.*?)</text>', svg)
                bottom = max(float(y) for y, _ in cells)
                footer = "".join(unescape(s) for y, s in cells if float(y) == bottom).replace("\xa0", " ")
                assert "q Quit" in footer and "b Build" in footer, (pane.name, footer)

    asyncio.run(run())


def test_a_failed_extraction_stops_the_clock_and_keeps_the_error(make_app, settle, open_extract, tmp_path, monkeypatch):
    from textual.widgets import Label

    monkeypatch.setenv("KERNCAP_INJECT_LIB", str(tmp_path / "missing.so"))  # fails at once: no capture library

    async def run():
        app = make_app()
        async with app.run_test(size=(100, 30)) as pilot:
            screen = await open_extract(pilot, tmp_path / "out")
            screen.start()
            await settle(pilot)
            await pilot.pause(1.2)  # longer than the 0.5 s tick that used to overwrite the message
            status = str(screen.query_one("#extract-status", Label).render())
            assert "failed: capture library not found" in status and screen.ticker is None
            assert screen.query_one("#extract-status").has_class("error")
            assert not screen.query_one("#extract-go").disabled  # ready for another try

    asyncio.run(run())


def test_the_demo_copy_is_removed_on_exit(monkeypatch, tmp_path):
    import tempfile

    from kerncap_tui import app as app_mod
    from kerncap_tui import demo

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = []
    monkeypatch.setattr(app_mod.KerncapApp, "run", lambda self, **kw: seen.append(self.root))
    stale = tmp_path / f"{demo.SCRATCH_PREFIX}999999-abcd"  # a killed workbench's copy
    (stale / "reproducer").mkdir(parents=True)
    assert app_mod.run(None) == 0
    assert seen and seen[0].name == "reproducer" and not seen[0].exists()
    assert not stale.exists() and list(tmp_path.iterdir()) == []


def _log(app) -> str:
    from textual.widgets import RichLog

    return "\n".join(str(line.text) for line in app.query_one("#log", RichLog).lines)


def test_an_unchanged_source_makes_no_new_variant(make_app, settle, monkeypatch):
    """A source/ equal to what a recorded variant was built from compiles nothing."""
    from kerncap.api import source_fingerprint
    from kerncap.session import session as session_module

    compiles = []
    monkeypatch.setattr(session_module, "recompile_kernel", lambda *a, **k: compiles.append(a))

    async def run():
        app = make_app()
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(pilot)
            fingerprint = source_fingerprint(app.root / "source")
            before = len(app.history.variants)
            app.history.record(median_ms=1.0, validation="pass", cubin="variants/9.cubin", source_hash=fingerprint)
            app.action_build()  # what a save without a change, or a second `b`, does
            await settle(pilot)
            assert compiles == [] and len(app.history.variants) == before + 1
            await pilot.press("5")  # RichLog renders what it holds once it is shown
            await pilot.pause()
            assert "source/ is unchanged since v" in _log(app) and "no new variant" in _log(app)
            (app.root / "source" / "smooth" / "smooth_kernel.cuh").write_text("// edited\n", encoding="utf-8")
            assert source_fingerprint(app.root / "source") != fingerprint

    asyncio.run(run())


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the build compiles for real)")
def test_b_twice_without_a_gpu_compiles_once_and_says_the_replay_could_not_run(make_app, settle, demo_root):
    """Issue 26: without a GPU, `b` compiled, then said "build failed", and every further
    `b` on the unchanged source left another variants/N.cubin. Now the first `b` compiles
    for real (nvcc) and says the replay could not run; the second reuses that cubin: no
    new variant file, no History row. (Mutation: dropping the session's memo of unrecorded
    builds, Session._built, makes the second `b` leave variants/5.cubin: this test fails.)"""

    async def run():
        app = make_app()
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(pilot)
            variants = demo_root / "variants"
            before, rows = sorted(p.name for p in variants.glob("*.cubin")), len(app.history.variants)
            await pilot.press("b")
            await settle(pilot)
            first = sorted(p.name for p in variants.glob("*.cubin"))
            assert len(first) == len(before) + 1, (before, first)  # it really compiled
            titles = [n.title for n in app._notifications]
            assert "replay could not run" in titles and "build failed" not in titles, titles
            await pilot.press("b")
            await settle(pilot)
            assert sorted(p.name for p in variants.glob("*.cubin")) == first  # no new variant file
            assert len(app.history.variants) == rows  # and no History row
            await pilot.press("5")
            await pilot.pause()
            log = _log(app)
            assert log.count("recompiling") == 1 and "replaying it" in log, log
            assert "but the replay could not run" in log

    asyncio.run(run())


def test_kerncap_tui_names_the_command_the_user_typed(tmp_path, capsys):
    """`kerncap tui /nonexistent` said "kerncap-tui: error"; each name is its own."""
    from kerncap.cli import main as kerncap
    from kerncap_tui.app import main as kerncap_tui

    assert kerncap(["tui", str(tmp_path / "nope")]) == 3
    err = capsys.readouterr().err
    assert err.startswith("kerncap tui: error: ") and "nope is not a directory" in err
    assert kerncap_tui([str(tmp_path / "nope")]) == 3
    assert capsys.readouterr().err.startswith("kerncap-tui: error: ")


def test_a_row_recorded_by_another_kerncap_appears_in_history(make_app, settle, demo_root):
    """An agent builds through MCP (or `kerncap build` runs in another terminal) while the
    workbench is open on the same reproducer: its row appears in History as it lands (the
    workbench watches history.json), and the workbench's next row does not overwrite it."""
    from textual.widgets import DataTable

    from kerncap.reproducer.history import History
    from kerncap_tui.widgets.history_pane import HistoryPane

    async def run():
        app = make_app()
        async with app.run_test(size=(120, 34)) as pilot:
            await settle(pilot)
            table = app.query_one(HistoryPane).query_one(DataTable)
            before = table.row_count
            elsewhere = History.load(app.root)  # as another process holds it
            row = elsewhere.record(median_ms=0.001, validation="pass", cubin="variants/99.cubin")
            for _ in range(200):  # the watchdog thread, a 0.3-s debounce, a worker: well under 20 s
                await pilot.pause(0.1)
                if table.row_count == before + 1:
                    break
            assert table.row_count == before + 1, (before, table.row_count)
            assert any(n.title == "history (recorded elsewhere)" for n in app._notifications)
            mine = app.session.history.record(median_ms=0.002, validation="pass", cubin="variants/100.cubin")
            assert mine.id == row.id + 1
            assert [v.cubin for v in History.load(app.root).variants[-2:]] == ["variants/99.cubin",
                                                                               "variants/100.cubin"]

    asyncio.run(run())


def test_a_palette_search_lists_only_the_commands_that_match(make_app, settle):
    """ctrl+p's search (kerncap_tui.commands.KerncapCommands) offers the commands whose title
    matches what was typed, never the others (mutation caught: a search listed every
    command, matching or not)."""
    from kerncap_tui.commands import KerncapCommands

    async def run():
        app = make_app()
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(pilot)
            provider = KerncapCommands(app.screen)
            hits = [hit async for hit in provider.search("restore")]
            assert [h.help for h in hits] == ["history.restore · ctrl+r"]
            assert [hit async for hit in provider.search("qqqqzzzz")] == []

    asyncio.run(run())


def test_the_extract_dialogs_run_until_a_kernel_reaches_the_engine(make_app, settle, open_extract, tmp_path,
                                                                   monkeypatch):
    """A run bounded by a kernel (the dialog's "run: until kernel") reaches api.extract as
    `extract --sequence run --until K` sends it (mutation caught: the kernel typed was
    dropped, the run unbounded)."""
    from kerncap import api
    from kerncap.errors import KerncapError
    from textual.widgets import Select

    seen = []

    def fake_extract(kernel, command, **kw):
        seen.append(kw)
        raise KerncapError("stopped by the test")

    monkeypatch.setattr(api, "extract", fake_extract)

    async def run():
        app = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await open_extract(pilot, tmp_path / "out")
            screen.query_one("#extract-what", Select).value = "run"
            screen.query_one("#extract-until").value = " gemm_kernel "
            await pilot.pause()
            screen.start()
            await settle(pilot)
            kw, = seen
            assert kw["sequence"] == api.SequenceRequest("run", until="gemm_kernel")

    asyncio.run(run())
