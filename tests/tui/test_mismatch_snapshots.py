"""The Mismatch pane (kerncap_tui.widgets.mismatch_pane) on planted bugs: snapshots of
the heatmap, the scale, the histograms and the cursor's details. The maps come from
the bundled demo's captured output (smooth, 256 x 256 float32) with a bug planted in
a copy (synthetic variant outputs, tests/test_mismatch.py), computed by the numpy
reference the GPU suite checks the GPU's maps against."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult

from kerncap import api
from kerncap_tui.widgets.mismatch_pane import MismatchHeatmap, MismatchPane, MismatchRequest

from test_app import sync  # noqa: E402  (tests/tui is on sys.path)
from test_mismatch import demo_states, planted  # noqa: E402  (tests/ is on sys.path)


def planted_map(kind: str) -> api.MismatchMap:
    _cap, pre, post = demo_states()
    return api.mismatch_map_arrays("region 1", planted(kind), post, pre, dtype="float32", grid=(64, 128),
                                   actual_label=f"synthetic {kind}", expected_label="captured post-state")


class PaneApp(App):
    def __init__(self, maps) -> None:
        super().__init__()
        self.maps = maps
        self.posted: list = []

    def compose(self) -> ComposeResult:
        yield MismatchPane(id="mismatch-pane")

    def on_mount(self) -> None:
        self.query_one(MismatchPane).show(self.maps, MismatchRequest(cubin="v1.cubin", label="v1"))

    def on_mismatch_pane_write_arrays(self, message) -> None:
        self.posted.append(message)

    def on_mismatch_pane_requested(self, message) -> None:
        self.posted.append(message)


@pytest.mark.parametrize("kind", ["last_tile", "row_scale", "nan_div"])
def test_mismatch_pane_snapshot(snap_compare, kind):
    async def run_before(pilot):
        await pilot.pause()
        await pilot.press("f")  # the cursor on the first mismatch, its values below the map
        await pilot.pause()

    assert snap_compare(PaneApp([planted_map(kind)]), terminal_size=(100, 34), run_before=run_before)


@sync
async def test_cursor_first_mismatch_write_and_shape():
    app = PaneApp([planted_map("row_scale"), planted_map("nan_div")])
    async with app.run_test(size=(100, 34)) as pilot:
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause()
        text = str(app.query_one("#mismatch-cursor").render())
        assert "rows 64–" in text and "worst [" in text and "expected" in text and "got" in text
        heat = app.query_one(MismatchHeatmap)
        (r0, r1), _cols = heat.pixel_span(*heat.cursor)
        assert r0 <= 64 < r1
        await pilot.press("right", "right")
        await pilot.pause()
        assert heat.cursor[1] == 2
        await pilot.press("w")
        await pilot.pause()
        assert app.posted and app.posted[-1].item == "region 1"
        await pilot.press("r")  # the next failing region's map
        await pilot.pause()
        assert "every 64th column" in str(app.query_one("#mismatch-title").render())
        await pilot.press("s")
        await pilot.press(*"256,256", "enter")
        await pilot.pause()
        req = app.posted[-1].request
        assert req.shape == (256, 256) and req.items == ("1",)


@sync
async def test_page_down_and_page_up_move_the_cursor_eight_pixel_rows():
    app = PaneApp([planted_map("row_scale")])
    async with app.run_test(size=(100, 34)) as pilot:
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause()
        heat = app.query_one(MismatchHeatmap)
        rows = len(heat.pixels)
        start = heat.cursor
        assert rows > start[0] + 8, (rows, start)  # room below the first mismatch for a page
        await pilot.press("pagedown")
        await pilot.pause()
        assert heat.cursor == (start[0] + 8, start[1])
        await pilot.press("pageup", "pageup")
        await pilot.pause()
        assert heat.cursor == (max(start[0] - 8, 0), start[1])


@sync
async def test_the_pane_opens_on_a_failing_item_whatever_the_order_given():
    """The maps come in the replay's item order, a passing region before the failing one
    here: the pane shows the failing one first (title, `f`), the passing one after `r`.
    Mutation caught: the maps kept in the order given (it opened on "0 mismatches")."""
    _cap, pre, post = demo_states()
    passing = api.mismatch_map_arrays("region 0", post.copy(), post, pre, dtype="float32", grid=(64, 128),
                                      actual_label="synthetic exact", expected_label="captured post-state")
    assert passing.passed and not planted_map("row_scale").passed
    app = PaneApp([passing, planted_map("row_scale")])
    async with app.run_test(size=(100, 34)) as pilot:
        await pilot.pause()
        pane = app.query_one(MismatchPane)
        title = str(app.query_one("#mismatch-title").render())
        assert pane.current.name == "region 1" and "synthetic row_scale" in title and "1 failing · 1/2" in title
        await pilot.press("f")
        await pilot.pause()
        assert not app._notifications and "worst [" in str(app.query_one("#mismatch-cursor").render())
        await pilot.press("r")
        await pilot.pause()
        assert pane.current.name == "region 0" and "synthetic exact" in str(app.query_one("#mismatch-title").render())


def test_a_pixel_a_sampled_map_read_only_in_part_is_drawn_as_read():
    """A sampled map (the CPU's, past its byte budget) reads some view rows only: a pixel
    is "not read" when none of its rows was read, and read when any was (its mismatches,
    if any, were counted). Mutation caught: a pixel read only in part drawn as not read."""
    from kerncap_tui.widgets.mismatch_pane import UNREAD_COLOUR, colour, pool

    m = planted_map("row_scale")
    assert (m.view.rows, m.grid_rows) == (256, 64)  # 4 view rows a grid row
    m.covered_rows = [(0, 2), (9, 12)]  # half of grid row 0, the last 3 rows of grid row 2
    fine = pool(m, 64, 128)
    assert [fine[r][0].read for r in range(4)] == [True, False, True, False]
    coarse = pool(m, 8, 16)  # 32 view rows a pixel: the first holds both read runs
    assert coarse[0][0].read and not coarse[1][0].read
    assert colour(fine[0][0], 0.0, 1.0) != UNREAD_COLOUR and colour(fine[1][0], 0.0, 1.0) == UNREAD_COLOUR


@sync
async def test_v_against_the_marked_baseline_maps_against_the_captured_cubins_output(settle, make_app):
    """v in the Mismatch pane maps the variant selected in History against the marked one;
    the baseline marked means the captured cubin run on the same input ("baseline"), not
    the captured post-state (against None, what v asks with nothing marked). Mutation
    caught: the marked baseline's missing cubin read as "against the captured post-state"."""
    import time

    app = make_app()
    async with app.run_test(size=(120, 34)) as pilot:
        await settle(pilot)
        asked: list[dict] = []

        def mismatch_maps(**kw):
            asked.append(kw)
            return []

        async def v_on(row: str, mark: str | None) -> dict:
            """History's cursor on `row` (`mark` marked with space first), then v's action."""
            asked.clear()
            if mark is not None:
                table.move_cursor(row=table.get_row_index(mark))
                await pilot.press("space")
            table.move_cursor(row=table.get_row_index(row))
            await pilot.pause()
            app.query_one(MismatchPane).action_load_selected()
            deadline = time.monotonic() + 20
            while not asked:
                assert time.monotonic() < deadline, [n.message for n in app._notifications]
                await pilot.pause(0.02)
            return asked[0]

        app.session.mismatch_maps = mismatch_maps
        await pilot.press("4")
        table = app.query_one("#history-table")
        got = await v_on("1", None)
        assert got["against"] is None and got["cubin"].endswith("variants/1.cubin"), got
        got = await v_on("1", "0")  # the baseline marked
        assert got["against"] == "baseline" and got["cubin"].endswith("variants/1.cubin"), got
        got = await v_on("1", "2")  # another variant marked: its cubin
        assert got["against"].endswith("variants/2.cubin"), got
