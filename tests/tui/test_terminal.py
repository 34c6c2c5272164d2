"""The workbench on the terminal it is given (issue 47): a resize re-decides the Source
split and rewraps the Log; a terminal without Unicode gets ASCII, TERM=dumb no 24-bit
colour; the extract dialog names the program it will run; a directory that is no
reproducer is refused with one message."""

from __future__ import annotations

import re

import pytest
from textual.widgets import Label, Static

from kerncap_tui import terminal
from test_app import sync  # noqa: E402  (tests/tui is on sys.path)


@sync
async def test_the_split_follows_the_width_of_every_resize(make_app, settle):
    """150 → 80 columns hid nothing (a 2-column editor), back to 150 hid the split: each
    resize was decided with the width before it."""
    from kerncap_tui.widgets.live_history import LiveHistory

    app = make_app()
    async with app.run_test(size=(150, 40)) as pilot:
        await settle(pilot)
        live = app.query_one(LiveHistory)
        assert live.display
        for size, shown in (((80, 24), False), ((150, 40), True), ((100, 30), False), ((160, 40), True)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            assert live.display is shown, size


@sync
async def test_the_log_rewraps_on_a_resize(make_app, settle):
    from kerncap_tui.widgets.log_pane import WorkbenchLog

    long = "recompiled " + " ".join(f"step{i:02d}" for i in range(20)) + " end"  # 154 characters
    app = make_app()
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(pilot)
        app.log_line(long)
        await pilot.press("5")
        await settle(pilot)
        log = app.query_one("#log", WorkbenchLog)

        def rows() -> list[str]:
            return [line.text.rstrip() for line in log.lines]

        assert any(r.endswith(long) for r in rows())  # one row at 200 columns
        for width in (80, 60, 200):
            await pilot.resize_terminal(width, 24)
            await settle(pilot)
            assert log.wrapped_at == log.line_width
            assert all(len(r) <= log.line_width for r in rows()), width  # nothing cut at the edge
            words = " ".join(rows()).split()
            assert " ".join(words[-22:]) == long, width  # and nothing lost



@sync
async def test_a_line_logged_while_the_log_is_shown_wraps_at_its_width(make_app, settle):
    """Lines written once the Log has its size (a build's progress while the user watches it)
    wrap at the pane's line width, as the lines re-wrapped on a resize do; left to RichLog
    they wrap at the app console's width (80 columns whatever the terminal) and at least its
    min_width (78): broken early at 200 columns, cut at the edge at 60."""
    from kerncap_tui.widgets.log_pane import WorkbenchLog

    long = "recompiled " + " ".join(f"step{i:02d}" for i in range(20)) + " end"  # 154 characters
    app = make_app()
    async with app.run_test(size=(200, 30)) as pilot:
        await settle(pilot)
        await pilot.press("5")
        await settle(pilot)
        log = app.query_one("#log", WorkbenchLog)
        assert log.wrapped_at == log.line_width > len(long) + 9  # the time stamp before it
        app.log_line(long)
        await pilot.pause()
        rows = [line.text.rstrip() for line in log.lines]
        assert rows[-1].endswith(" " + long), rows[-3:]  # one row
        await pilot.resize_terminal(60, 30)
        await settle(pilot)
        said = long.replace("recompiled", "replayed")
        app.log_line(said)
        await pilot.pause()
        rows = [line.text.rstrip() for line in log.lines]
        assert all(len(r) <= log.line_width for r in rows), (log.line_width, rows[-4:])  # nothing cut
        assert " ".join(" ".join(rows).split()[-22:]) == said  # nothing lost

@sync
async def test_a_resize_keeps_the_log_on_its_newest_line(make_app, settle):
    """A Log read at its end (the latest build's output) stays at its end across a resize,
    narrower or wider, though every line is wrapped again; one scrolled back stays where
    the user left it. Narrower, the old lines' horizontal scrollbar took a row off the
    pane: the end was not recognised and the Log was left 80 rows up (fixed). Mutation
    caught: the end never recognised (`>=` → `>`)."""
    from kerncap_tui.widgets.log_pane import WorkbenchLog

    app = make_app()
    async with app.run_test(size=(120, 24)) as pilot:
        await settle(pilot)
        await pilot.press("5")
        await settle(pilot)
        log = app.query_one("#log", WorkbenchLog)
        for i in range(80):
            app.log_line(f"line {i:02d} " + "word " * 12)
        await pilot.pause()
        log.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        assert log.max_scroll_y > 0 and log.scroll_y == log.max_scroll_y
        await pilot.resize_terminal(60, 24)
        await settle(pilot)
        assert log.wrapped_at == log.line_width
        assert log.max_scroll_y > 0 and log.scroll_y == log.max_scroll_y, (log.scroll_y, log.max_scroll_y)
        await pilot.resize_terminal(120, 24)  # wider: no horizontal scrollbar on the way
        await settle(pilot)
        assert log.max_scroll_y > 0 and log.scroll_y == log.max_scroll_y, (log.scroll_y, log.max_scroll_y)
        log.scroll_home(animate=False, immediate=True)
        await pilot.pause()
        await pilot.resize_terminal(70, 24)
        await settle(pilot)
        assert log.scroll_y == 0 < log.max_scroll_y


@pytest.mark.parametrize("env, plain", [
    ({"TERM": "xterm-256color", "LANG": "en_US.UTF-8"}, False),
    ({"TERM": "xterm-256color"}, False),                       # no locale set: Python reads UTF-8
    ({"TERM": "linux", "LANG": "en_US.UTF-8"}, True),
    ({"TERM": "vt100"}, True),
    ({"TERM": "vt220"}, True),
    ({"TERM": "xterm", "LANG": "C"}, True),
    ({"TERM": "xterm", "LC_ALL": "POSIX", "LANG": "en_US.UTF-8"}, True),   # LC_ALL first
    ({"TERM": "xterm", "LC_CTYPE": "en_US.utf8"}, False),
    ({"TERM": "vt100", "KERNCAP_GLYPHS": "unicode"}, False),
    ({"TERM": "xterm", "KERNCAP_GLYPHS": "ascii"}, True),
])
def test_plain_glyphs_are_chosen_from_term_and_locale(env, plain):
    assert terminal.plain_glyphs(env) is plain


def test_the_option_wins_and_a_wrong_value_is_a_usage_error():
    from kerncap.errors import UsageError

    assert terminal.plain_glyphs({"TERM": "xterm", "KERNCAP_GLYPHS": "ascii"}, choice="unicode") is False
    with pytest.raises(UsageError, match="KERNCAP_GLYPHS='emoji' is not one of auto, unicode, ascii"):
        terminal.plain_glyphs({"KERNCAP_GLYPHS": "emoji"})


def stream(app) -> str:
    return app.screen._compositor.render_full_update().render_segments(app.console)


@sync
async def test_plain_glyphs_send_ascii_only(demo_root, settle):
    """Ours (▶ █ ✓ ·) and Textual's (borders, the header's ⭘, the palette's 🔎): all ASCII."""
    from kerncap_tui.app import KerncapApp

    app = KerncapApp(demo_root, demo=True, plain_glyphs=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        for keys in (("1",), ("2",), ("4",), ("ctrl+p",)):
            await pilot.press(*keys)
            await settle(pilot)
            out = stream(app)
            assert out.isascii(), (keys, sorted({c for c in out if not c.isascii()}))
        await pilot.press("escape", "2")
        await settle(pilot)
        text = "\n".join("".join(s.text for s in line) for line in app.screen._compositor.render_full_update().strips)
        assert "# written  % argument  . all zero" in text  # the map's legend reads as its cells


_DUMB_PROBE = """
import asyncio, re, sys
from pathlib import Path
from kerncap_tui import terminal
from kerncap_tui.app import KerncapApp

async def main():
    app = KerncapApp(Path(sys.argv[1]), demo=True, dumb=terminal.is_dumb())
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(3):
            await pilot.pause()
        out = app.screen._compositor.render_full_update().render_segments(app.console)
        truecolour = re.search(r"\\x1b\\[[0-9;]*[34]8;2;", out)
        print(app.console.color_system, "truecolour" if truecolour else "no-truecolour")

asyncio.run(main())
"""


def test_a_dumb_terminal_gets_no_24_bit_colour(demo_root, tmp_path):
    """In a fresh process: Rich caches each style's escape codes on the style itself
    (`Style._ansi`), so after other tests drew in 24-bit colour in this process the same
    styles came out 24-bit here whatever the console's colour system. One process draws
    for one terminal, which is what this checks."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("TEXTUAL_COLOR_SYSTEM", "NO_COLOR", "COLORTERM")}
    env.update(TERM="dumb", XDG_CONFIG_HOME=str(tmp_path / "config"))
    out = subprocess.run([sys.executable, "-c", _DUMB_PROBE, str(demo_root)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["standard", "no-truecolour"], out.stdout
    assert terminal.is_dumb({"TERM": "dumb"}) and not terminal.is_dumb({"TERM": "xterm"})


@sync
async def test_the_extract_dialog_names_the_program_it_will_run(make_app, settle, open_extract, tmp_path):
    """A long first argument hid the program in the input: the line above names it, whole,
    and follows what is typed."""
    from textual.widgets import Input

    tool = tmp_path / "bin" / "the-app"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_extract(pilot)
        program = screen.query_one("#extract-program", Label)
        assert str(program.render()).startswith("command · runs /tmp/kc-testapps/smooth")  # the profile's recorded one
        screen.query_one("#extract-command", Input).value = f"env {'X' * 300}=1 {tool}"
        await pilot.pause()
        assert str(program.render()).startswith("command · runs env (/")  # PATH's env, not the-app
        screen.query_one("#extract-command", Input).value = f"{tool} --input {'y' * 300}"
        await pilot.pause()
        assert str(program.render()) == f"command · runs {tool}"
        screen.query_one("#extract-command", Input).value = "'unclosed"
        await pilot.pause()
        assert "cannot parse it" in str(program.render())


@sync
async def test_the_memory_legend_says_what_the_flags_mean(make_app, settle):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        legend = str(app.query_one("#memory-pane .status", Static).render())
        assert legend == "A argument points here · W the kernel changed it · = it did not · 0 all zero"
        rows = app.query_one("#region-table")  # W where the manifest says post differs from pre, else =
        marks = [str(rows.get_row_at(i)[0])[1] for i in range(rows.row_count)]
        assert marks == ["W" if r.written else "=" for r in sorted(app.capture.regions, key=lambda r: r.base)]


def test_a_directory_that_is_no_reproducer_is_refused_with_the_next_step(tmp_path, capsys):
    from kerncap.cli import main as kerncap

    (tmp_path / "notes.txt").write_text("not a reproducer\n")
    assert kerncap(["tui", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"kerncap tui: error: {tmp_path} is not a reproducer, a reproducer set or a workspace")
    assert "kerncap extract --output DIR" in err and "kerncap list" in err
    assert kerncap(["tui", "--glyphs", "emoji", str(tmp_path)]) == 2  # argparse: the choices


def test_a_wrong_glyph_setting_is_one_message(tmp_path, capsys, monkeypatch):
    from kerncap_tui.app import main as kerncap_tui

    monkeypatch.setenv("KERNCAP_GLYPHS", "emoji")
    assert kerncap_tui([str(tmp_path)]) == 2
    assert "KERNCAP_GLYPHS='emoji' is not one of auto, unicode, ascii" in capsys.readouterr().err

