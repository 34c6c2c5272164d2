"""The workbench's History shows what `kerncap apply` found in the app (issue 46): once a
variant's row has `in_app` (Session.apply records it), an "in app" column holds the
--check verdict over the launches compared (or the first launch that differed) and the
kernel's in-app speedup with its interval; without any, no column."""

from __future__ import annotations

import asyncio

from textual.widgets import DataTable

from kerncap.reproducer.history import History

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

