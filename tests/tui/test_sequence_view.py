"""The workbench on a sequence (issue 29, docs/sequences.md), over the SYNTHETIC sequence of
tests/sequence_sim.py (seq_pipeline.cu's real module compiled here, its kernel entries with
their sources, the simulated replay core): the Profile pane lists the launches in order
with their stream and replayed time, the selected launch marked; Memory and Source follow
it; a save in kernel 1's source rebuilds that kernel, replays and validates the whole
sequence and records a History row with the sequence's and the kernel's launches' times.
The GPU suite opens a real capture the same way (tests/gpu/test_tui_sequence_gpu.py)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from textual.widgets import DataTable, Label, Static

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_sequences import NVCC, _pipeline_with_entries  # noqa: E402

from kerncap_tui.app import KerncapApp  # noqa: E402
from kerncap_tui.messages import SourceChanged  # noqa: E402
from kerncap_tui.widgets.history_pane import HistoryPane  # noqa: E402
from kerncap_tui.widgets.memory_pane import MemoryPane  # noqa: E402
from kerncap_tui.widgets.profile_pane import ProfilePane  # noqa: E402
from kerncap_tui.widgets.source_pane import SourcePane, SourceTree  # noqa: E402

pytestmark = pytest.mark.skipif(NVCC is None, reason="needs nvcc (the pipeline's kernels are compiled)")


def _cells(table: DataTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def test_the_workbench_shows_a_sequence_follows_its_launch_and_records_a_rebuild(tmp_path, monkeypatch, settle):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    repro = _pipeline_with_entries(tmp_path, monkeypatch)

    async def run():
        app = KerncapApp(repro)
        async with app.run_test(size=(160, 40)) as pilot:
            await settle(pilot)
            profile = app.query_one(ProfilePane)
            rows = _cells(profile.query_one(DataTable))
            assert [r[0] for r in rows] == ["0", "1"] and [r[1] for r in rows] == ["0.0100", "0.0100"]
            assert rows[0][3].startswith("▶ sp_scale") and rows[1][3].startswith("sp_add")
            status = str(profile.query_one("#profile-status", Static).content)
            assert "2/2 launches" in status and "▶ launch 0 " in status and "whole 0.0200 ms (streams order)" in status
            source = app.query_one(SourcePane)
            assert source.source_dir == repro / "kernels" / "0" / "source"
            # a region selected in Memory (r2, not the first) stays selected when the launch changes
            memory = app.query_one(MemoryPane)
            memory.query_one("#region-table", DataTable).move_cursor(row=2)
            await settle(pilot)
            assert memory.selected == "r2"
            # the cursor on launch 1: it is marked, Source shows kernel 1's entry, Memory its arguments
            profile.query_one(DataTable).focus()
            await pilot.press("down")
            await settle(pilot)
            rows = _cells(profile.query_one(DataTable))
            assert rows[1][3].startswith("▶ sp_add") and not rows[0][3].startswith("▶")
            assert app.launch == 1 and source.source_dir == repro / "kernels" / "1" / "source"
            assert Path(source.query_one(SourceTree).path) == source.source_dir  # the tree: kernel 1's files
            memory = app.query_one(MemoryPane)
            # launch 1 (add) takes tmp and y: regions 1 and 2 (by address), not x (region 0)
            assert [k for k, r in memory.rows.items() if r.by_argument] == ["r1", "r2"]
            assert "launch 1" in str(memory.query_one(".status", Static).content)
            assert memory.selected == "r2" and memory.query_one("#region-table", DataTable).cursor_row == 2
            # a save in kernel 1's source (unchanged text): rebuilt, the sequence recorded
            assert source.path is not None and source.path.is_relative_to(repro / "kernels" / "1" / "source")
            await pilot.press("3")
            source.action_save()
            app.post_message(SourceChanged(source.path))  # what the watchdog posts (also without inotify)
            await pilot.pause(0.6)
            await settle(pilot)
            history = app.session.history
            base, v = history.variants
            assert v.kernel == 1 and v.validation == "pass" and v.launch_ms == [0.01, 0.01]
            table = _cells(app.query_one(HistoryPane).query_one(DataTable))
            assert table[1][1] == "v1" and table[1][2] == "0.0200"
            assert table[1][8:10] == ["1 sp_add", "0.0100"] and table[0][8:10] == ["captured", "—"]
            # saves in both kernels within one debounce: kernel 0 recorded, kernel 1 unchanged since v1
            for k in (0, 1):
                app.post_message(SourceChanged(next((repro / "kernels" / str(k) / "source").rglob("*.cu"))))
            app.post_message(SourceChanged(repro / "kernels" / "0" / "variants" / "9.cubin"))  # a build's output
            await pilot.pause(0.6)
            await settle(pilot)
            assert [(x.id, x.kernel) for x in app.session.history.variants] == [(0, None), (1, 1), (2, 0)]

    asyncio.run(run())


def test_a_build_superseded_by_a_newer_one_records_no_row(tmp_path, monkeypatch, settle):
    """A build started while the one before is still compiling (b pressed again, or a save
    after the debounce) supersedes it: the engine is told (its `cancelled()`) and drops it
    after the compile, so one History row lands for the two, the newer build's, and the log
    says the older was superseded. The first compile is held (a handshake, not a clock)
    until the second build has recorded its row; it then answers as the second did (the
    same source)."""
    import threading
    import time

    from kerncap.recompile import sequence_kernel

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    repro = _pipeline_with_entries(tmp_path, monkeypatch)
    held, go = threading.Event(), threading.Event()
    compile_kernel, compiled = sequence_kernel.recompile_kernel, []

    def held_first(*args, **kwargs):
        if not held.is_set():
            held.set()
            go.wait(120)
            return compiled[0]
        compiled.append(compile_kernel(*args, **kwargs))
        return compiled[0]

    monkeypatch.setattr(sequence_kernel, "recompile_kernel", held_first)

    async def until(pilot, cond) -> None:  # not settle: a superseded worker counts as finished
        deadline = time.monotonic() + 60
        while not cond():
            assert time.monotonic() < deadline, "timed out waiting"
            await pilot.pause(0.05)

    async def run():
        app = KerncapApp(repro)
        try:
            async with app.run_test(size=(160, 40)) as pilot:
                await settle(pilot)
                build, ended = app.session.build, []

                def observed(*args, **kwargs):  # the engine's build, its outcome noted
                    result = build(*args, **kwargs)
                    ended.append(result.status)
                    return result

                app.session.build = observed
                await pilot.press("b")  # launch 0 selected: kernel 0
                await until(pilot, held.is_set)
                await pilot.press("b")  # again, while the first build compiles
                await until(pilot, lambda: ended == ["recorded"])
                go.set()
                await until(pilot, lambda: len(ended) == 2)
                await settle(pilot)
                assert ended == ["recorded", "superseded"]
                assert [(v.id, v.kernel) for v in app.session.history.variants] == [(0, None), (1, 0)]
                log = app.query_one("#log")
                text = "\n".join([line.text for line in log.lines]
                                  + [getattr(d.content, "plain", str(d.content)) for d in log._deferred_renders])
                assert "superseded by a newer save" in text, text
        finally:
            go.set()

    asyncio.run(run())

def test_snapshot_of_a_sequences_launches(snap_compare, settle, tmp_path, monkeypatch):
    """The Profile tab of the sequence at 140x40, launch 1 selected (its times from the
    simulated core: 0.01 ms a launch)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    repro = _pipeline_with_entries(tmp_path, monkeypatch)

    async def run_before(pilot):
        await settle(pilot)
        pilot.app.query_one(ProfilePane).query_one(DataTable).focus()
        await pilot.press("down")
        await settle(pilot)

    assert snap_compare(KerncapApp(repro), terminal_size=(140, 40), run_before=run_before)


def test_the_extract_dialog_selects_a_sequence_through_the_engines_arguments(make_app, settle, open_extract, tmp_path, monkeypatch):
    """The extract dialog's choice of a window reaches api.extract as `extract --sequence`
    sends it (api.sequence_extract_arguments); a run's bound without a sequence is refused
    in the dialog, nothing started. The dispatch and the output typed reach it too (mutation
    caught: the dispatch index ignored, dispatch 0 extracted)."""
    from kerncap import api
    from kerncap.errors import KerncapError
    from textual.widgets import Select

    seen = []

    def fake_extract(kernel, command, **kw):
        seen.append((kernel, kw))
        raise KerncapError("stopped by the test")

    monkeypatch.setattr(api, "extract", fake_extract)

    async def run():
        app = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await open_extract(pilot, tmp_path / "out")
            screen.query_one("#extract-count").value = "3"
            screen.start()  # one dispatch with a run's count: refused here
            await settle(pilot)
            assert not seen and not screen.query_one("#extract-go").disabled
            screen.query_one("#extract-what", Select).value = "run"
            screen.query_one("#extract-dispatch").value = "2"  # the run starts at the kernel's third dispatch
            await pilot.pause()
            screen.start()
            await settle(pilot)
            (kernel, kw), = seen
            assert kernel == screen.kernel and kw["sequence"] == api.SequenceRequest("run", count=3)
            assert kw["dispatch"] == 2 and kw["output"] == tmp_path / "out"
            screen.query_one("#extract-what", Select).value = "nvtx"
            screen.query_one("#extract-count").value = ""
            screen.query_one("#extract-nvtx").value = "step.1/layer.1"
            await pilot.pause()
            screen.start()
            await settle(pilot)
            kernel, kw = seen[-1]
            assert kernel == "" and kw["sequence"] == api.SequenceRequest("nvtx") and kw["selection"].nvtx == "step.1/layer.1"

    asyncio.run(run())
