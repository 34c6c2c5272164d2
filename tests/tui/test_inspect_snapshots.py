"""SVG snapshots of the workbench's inspect views on the demo: the memory map zoomed in,
History with Nsight Compute / compute-sanitizer columns, the metrics diff, the Profile
pane's capture-run launches and the live split beside the editor."""

from __future__ import annotations

from textual.widgets import DataTable, TextArea

from inspect_helpers import demo_launches, store_tool_results


def test_memory_map_zoomed(snap_compare, settle, make_app):
    async def run_before(pilot):
        await settle(pilot)
        await pilot.press("2", "down", "plus", "plus")
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=run_before)


def test_history_with_metrics(snap_compare, settle, make_app, demo_root):
    store_tool_results(demo_root)

    async def run_before(pilot):
        await settle(pilot)
        await pilot.press("4")
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=(140, 40), run_before=run_before)


def test_metrics_diff(snap_compare, settle, make_app, demo_root):
    store_tool_results(demo_root)

    async def run_before(pilot):
        await settle(pilot)
        await pilot.press("4")
        t = pilot.app.query_one("#history-table", DataTable)
        t.move_cursor(row=t.get_row_index("2"))
        await pilot.press("m")
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=run_before)


def test_profile_of_the_capture_run(snap_compare, settle, make_app, demo_root):
    demo_launches(demo_root)

    async def run_before(pilot):
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=run_before)


def test_source_beside_history(snap_compare, settle, make_app):
    async def run_before(pilot):
        await settle(pilot)
        await pilot.press("3")
        await settle(pilot)
        pilot.app.query_one(TextArea).language = None  # highlighting depends on tree-sitter-cpp
        await pilot.press("escape")  # the tree keeps focus: no blinking cursor in the image
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=(140, 40), run_before=run_before)
