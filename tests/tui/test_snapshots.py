"""SVG snapshots of the workbench on the demo, at 80×24 (SSH) and 140×40. The source
tab is left out: its highlighting depends on whether tree-sitter-cpp is installed."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("size", [(80, 24), (140, 40)], ids=["80x24", "140x40"])
@pytest.mark.parametrize("tab", ["1", "2", "4"], ids=["profile", "memory", "history"])
def test_snapshot(snap_compare, settle, make_app, size, tab):
    async def run_before(pilot):
        await settle(pilot)
        await pilot.press(tab)
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=size, run_before=run_before)


def test_snapshot_light_theme(snap_compare, settle, make_app):
    async def run_before(pilot):
        await settle(pilot)
        pilot.app.theme = "kerncap-light"
        await pilot.press("4")
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=run_before)
