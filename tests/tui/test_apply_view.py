"""The workbench's History shows what `kerncap apply` found in the app (issue 46): once a
variant's row has `in_app` (Session.apply records it), an "in app" column holds the
--check verdict over the launches compared (or the first launch that differed) and the
kernel's in-app speedup with its interval; without any, no column. `a` on a row applies it
in the app the capture recorded (over the stand-in driver of tests/fixtures/apply here)."""

from __future__ import annotations

import asyncio
import json

from textual.widgets import DataTable

from kerncap.reproducer.history import History

from test_apply import KERNEL, built  # noqa: E402,F401  (the stand-in driver and app: tests/fixtures/apply)

PASSED = {"command": "./app 10", "launches": 10, "substituted": 10, "check": "pass", "compared": 10,
          "mismatch_launch": None, "kernel_speedup": 1.21, "kernel_low": 1.18, "kernel_high": 1.24,
          "app_speedup": 1.01, "app_low": 0.99, "app_high": 1.03, "share": 0.08}
FAILED = {**PASSED, "check": "fail", "compared": 10, "mismatch_launch": 2, "kernel_speedup": None,
          "kernel_low": None, "kernel_high": None, "app_speedup": None, "app_low": None, "app_high": None,
          "share": None}


def applied(root) -> None:
    history = History.load(root)
    history.note_in_app(1, PASSED)
    history.note_in_app(3, FAILED)
    # what a reader of history.json gets back (the schema keeps the field)
    assert History.load(root).get(1).in_app["kernel_speedup"] == 1.21


def cells(app) -> dict[str, str]:
    t = app.query_one("#history-table", DataTable)
    return {str(t.get_row_at(i)[1]): str(t.get_cell(str(i), "in app")) for i in range(t.row_count)}


async def apply_row(pilot, app, settle, row: str):
    """Open History, put the cursor on `row` and press `a`; the table."""
    await settle(pilot)
    await pilot.press("4")
    t = app.query_one("#history-table", DataTable)
    t.move_cursor(row=t.get_row_index(row))
    await pilot.press("a")
    await settle(pilot)
    return t


def test_the_in_app_column_shows_the_check_verdict_and_the_in_app_speedup(settle, make_app, demo_root):
    async def run():
        app = make_app()
        async with app.run_test(size=(140, 40)) as pilot:
            await settle(pilot)
            await pilot.press("4")
            await settle(pilot)
            t = app.query_one("#history-table", DataTable)
            assert "in app" not in [str(c.label) for c in t.columns.values()]  # nothing applied yet
            applied(demo_root)
            app.query_one("HistoryPane").show(History.load(demo_root))
            await settle(pilot)
            assert cells(app) == {"baseline": "", "v1": "✓ 10/10 · 1.21× [1.18–1.24]", "v2": "",
                                  "v3": "✗ launch 2"}

    asyncio.run(run())


def test_snapshot_of_history_with_in_app_results(snap_compare, settle, make_app, demo_root):
    applied(demo_root)

    async def run_before(pilot):
        await settle(pilot)
        await pilot.press("4")
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=(140, 40), run_before=run_before)



def test_a_applies_the_selected_row_in_the_captured_app(settle, make_app, demo_root, built, tmp_path, monkeypatch):
    """The capture's recorded command is the stand-in app's; v1's cubin differs from its
    third launch on: `a` runs `apply --variant 1 --check` on the session, the app's output
    reaches the Log, and v1's row says where it differed. Timing and reading a module's
    cubin need CUPTI, which the stand-in has not: timing is stubbed out and the kernel
    identified by name, as tests/test_apply.py does (tests/gpu/test_apply_gpu.py: for real)."""
    import dataclasses

    from kerncap.capture import apply as apply_tool
    from kerncap.session import options

    @dataclasses.dataclass(frozen=True)
    class ByName(apply_tool.ApplyRequest):
        identify: str = "name"

    monkeypatch.setattr(options, "ApplyRequest", ByName)

    monkeypatch.setenv("LD_LIBRARY_PATH", str(built["dir"]))
    monkeypatch.setattr(apply_tool, "target_of", lambda cap, **_: apply_tool.Target(
        kernel=KERNEL, demangled="axpy(float*, float const*, int)", sha256="0" * 64, globals=[("scale", 4)],
        outputs=[0]))
    monkeypatch.setattr(apply_tool, "run_timing", lambda job, runs: None)
    manifest = demo_root / "capture" / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["provenance"].update(command=[str(built["app"]), str(built["inject"]), "5", str(tmp_path / "y.bin")],
                             cwd=str(tmp_path))
    manifest.write_text(json.dumps(doc))
    (demo_root / "variants" / "1.cubin").write_bytes(b"FAKEMOD impl=late3\0")

    async def run():
        app = make_app()
        async with app.run_test(size=(140, 40)) as pilot:
            t = await apply_row(pilot, app, settle, "1")
            for _ in range(100):  # the tool worker ends, then History reloads
                if "in app" in [str(c.label) for c in t.columns.values()]:
                    break
                await pilot.pause(0.1)
            log = "\n".join(str(line) for line in app.query_one("#log").entries)
            assert cells(app)["v1"] == "✗ launch 2", log
            assert "ran late3=5" in log and "FAIL at launch 2 (the 3rd)" in log, log
            await pilot.press("4")
            t.move_cursor(row=t.get_row_index("0"))
            await pilot.press("a")  # the baseline: nothing to apply, said so
            await settle(pilot)
            assert any("the baseline is the captured kernel itself" in n.message for n in app._notifications)
        assert History.load(demo_root).get(1).in_app["mismatch_launch"] == 2

    asyncio.run(run())


def test_an_app_whose_own_runs_differ_shows_no_verdict(demo_root):
    """`check: "unsteady"` (two runs of the app as is differed, ApplyResult.in_app): a "?"
    over the launches compared before that, neither ✓ nor ✗; the history keeps it."""
    from kerncap_tui.widgets.history_pane import in_app_cell

    history = History.load(demo_root)
    history.note_in_app(2, {**FAILED, "check": "unsteady", "compared": 0, "mismatch_launch": 0})
    row = History.load(demo_root).get(2)
    assert row.in_app["check"] == "unsteady"
    assert str(in_app_cell(row)) == "? 0/10"


def test_an_in_app_check_that_compared_nothing_shows_no_verdict(demo_root):
    """`check: "nothing"` (no launch fingerprinted, no output file compared: docs/apply.md)
    is no verdict: a yellow "?" over 0 launches compared, like an unsteady app, never the
    dim "substituted/launches run" of an apply without --check; the speedup still follows.
    Mutation caught: only "unsteady" read as no verdict."""
    from kerncap_tui.widgets.history_pane import in_app_cell

    history = History.load(demo_root)
    history.note_in_app(2, {**PASSED, "check": "nothing", "compared": 0})
    row = History.load(demo_root).get(2)
    assert row.in_app["check"] == "nothing"
    cell = in_app_cell(row)
    assert str(cell) == "? 0/10 · 1.21× [1.18–1.24]"
    assert cell.style == "yellow"
    no_check = History.load(demo_root)
    no_check.note_in_app(3, {**PASSED, "check": None, "compared": 0})
    assert str(in_app_cell(History.load(demo_root).get(3))).startswith("10/10 run")


def test_a_runs_the_captured_command_in_the_directory_the_capture_recorded(settle, make_app, demo_root, tmp_path,
                                                                           monkeypatch):
    """`a` runs the app as its capture recorded it: the command (here relative, `./app`) in
    the recorded working directory, not the workbench's; its output reaches the Log line by
    line, a last line without a newline too. The substitution itself needs the native
    build (the test above, tests/test_apply.py): here the engine's apply_request only runs
    the command where the request says. Mutation caught: the recorded cwd dropped (the app
    was looked for in the workbench's directory)."""
    import subprocess
    from pathlib import Path

    from kerncap.capture import apply as apply_tool

    app_dir = tmp_path / "app-dir"
    app_dir.mkdir()
    (app_dir / "app").write_text('#!/bin/sh\necho "app ran in $(pwd) with $*"\nprintf "last words"\n')
    (app_dir / "app").chmod(0o755)
    manifest = demo_root / "capture" / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["provenance"].update(command=["./app", "7"], cwd=str(app_dir))
    manifest.write_text(json.dumps(doc))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the workbench's own directory holds no ./app
    requests = []

    def run_it(root, r, *, output=None, cancelled=None):
        requests.append(r)
        p = subprocess.run(list(r.command), cwd=r.cwd, capture_output=True, timeout=30)
        output("stdout", p.stdout)
        return apply_tool.ApplyResult(variant=Path(root) / "variants" / "1.cubin", launches=0, substituted=0,
                                      check=None, timing=None, skipped_globals=[])

    monkeypatch.setattr(apply_tool, "apply_request", run_it)

    async def run():
        app = make_app()
        async with app.run_test(size=(140, 40)) as pilot:
            t = await apply_row(pilot, app, settle, "1")
            for _ in range(100):  # the tool worker ends
                if app._tool_cancel is None:
                    break
                await pilot.pause(0.05)
            log = "\n".join(str(line) for line in app.query_one("#log").entries)
            assert [(r.command, r.cwd, r.variant, r.check) for r in requests] == [(("./app", "7"), str(app_dir), 1, True)]
            assert f"app ran in {app_dir} with 7" in log and "last words" in log, log

    asyncio.run(run())
