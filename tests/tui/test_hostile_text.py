"""Escape sequences planted in a reproducer never reach the terminal from the workbench
(issue 47): kernel names of profile.json and of the manifest, the manifest's warnings, a
source file's name, a recorded command and a tool's output are shown escaped, as the CLI
prints them (kerncap.core.units.printable), and the terminal stream carries none of their
control characters."""

from __future__ import annotations

import json
import re

from kerncap.errors import KerncapError
from kerncap_tui.messages import BuildLog
from test_app import sync  # noqa: E402  (tests/tui is on sys.path)

# OSC 0 (retitle), OSC 52 (clipboard write), a CSI (media copy), C1 CSI and NEL, BEL, and
# markup that would end Textual's parser.
EVIL = "\x1b]0;PWNED\x07\x1b]52;c;cHduZWQ=\x07\x1b[5i\x9b31m\x85[/b]"
SHOWN = r"\x1b]0;PWNED\x07\x1b]52;c;cHduZWQ=\x07\x1b[5i\x9b31m\x85[/b]"
IN_NAME = EVIL.replace("[/b]", "[b]")  # a file name holds no "/"
PLANTED = re.compile("\x07|\x1b\\]|\x1b\\[5i|[\x80-\x9f]")


def plant(root) -> None:
    manifest = json.loads((root / "capture" / "manifest.json").read_text())
    manifest["kernel"]["demangled"] = "smooth" + EVIL
    manifest["warnings"] = ["manifest" + EVIL]
    (root / "capture" / "manifest.json").write_text(json.dumps(manifest))
    profile = json.loads((root / "profile.json").read_text())
    profile["kernels"][1]["demangled"] = "init" + EVIL
    profile["command"] = ["/bin/true" + EVIL, "--flag"]
    (root / "profile.json").write_text(json.dumps(profile))
    (root / "source" / ("file" + IN_NAME + ".cu")).write_text("// planted\n")


def screen(app) -> tuple[str, str]:
    """(the text drawn, the terminal stream Textual writes for it)."""
    update = app.screen._compositor.render_full_update()
    text = "\n".join("".join(strip.text for strip in line) for line in update.strips)
    return text, update.render_segments(app.console)


def assert_clean(app, where: str) -> str:
    text, stream = screen(app)
    found = PLANTED.findall(stream)
    assert not found, f"{where}: the terminal stream holds {found!r}"
    return text


@sync
async def test_planted_escapes_are_shown_escaped_and_never_reach_the_terminal(make_app, demo_root, settle):
    plant(demo_root)
    app = make_app()
    async with app.run_test(size=(200, 50), notifications=True) as pilot:
        await settle(pilot)
        app.post_message(BuildLog("tool said" + EVIL))  # a build's or a tool's output, as the engine reports it
        app.report_error("ncu", KerncapError("tool failed" + EVIL, "hint" + EVIL))
        await settle(pilot)
        # the profile's kernel names, and the manifest's in the header on every tab
        text = assert_clean(app, "profile")
        assert "init" + SHOWN in text  # the profile's
        assert "smooth" + SHOWN[:20] in text and "failed" + SHOWN[:20] in text  # the header, a notification
        await pilot.press("3")
        await settle(pilot)
        assert "file" + SHOWN[:9] in assert_clean(app, "source")  # the tree is narrow: its label, whole
        labels = [str(node.label) for node in app.query_one("#source-tree").root.children]
        assert "file" + SHOWN.replace("[/b]", "[b]") + ".cu" in labels
        await pilot.press("5")
        await settle(pilot)
        text = assert_clean(app, "log")
        for line in ("capture warning: manifest" + SHOWN, "tool said" + SHOWN, "ncu: tool failed" + SHOWN):
            assert line in text
        await pilot.press("2")
        await settle(pilot)
        assert_clean(app, "memory")
        await pilot.press("1", "enter")  # the extract dialog, prefilled with the recorded command
        await pilot.pause()
        assert type(app.screen).__name__ == "ExtractScreen"
        assert "/bin/true" + SHOWN in assert_clean(app, "extract dialog")  # the program, whole
        program = str(app.screen.query_one("#extract-program").render())
        assert program.startswith("command · runs /bin/true" + SHOWN + " (not found")


def test_the_workbench_and_the_cli_escape_with_one_function():
    """The same text, the same escapes: `kerncap info` and the workbench read alike."""
    from kerncap.core.units import printable
    from kerncap_tui import terminal

    assert terminal.shown(EVIL) == printable(EVIL) == SHOWN
    assert terminal.plain(EVIL).plain == SHOWN  # a Text: never parsed as markup
    assert terminal.one_line("a\nb\tc") == r"a\nb\tc"


def test_the_line_filter_drops_what_slips_through_and_keeps_widths():
    from rich.segment import Segment

    from kerncap_tui.terminal import ControlFilter

    kept = [Segment("plain · text")]
    assert ControlFilter().apply(kept, None) is kept
    out = ControlFilter().apply([Segment("a" + EVIL + "z")], None)
    assert out[0].text == "a]0;PWNED]52;c;cHduZWQ=[5i31m[/b]z"
