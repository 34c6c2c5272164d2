"""TUI tests run on the bundled demo reproducer (kerncap_tui.demo.demo_path()); each
test gets its own writable copy, so git commits and restores never touch the package."""

from __future__ import annotations

import pytest

from kerncap_tui import demo

WORKBENCH_GROUPS = {"profile", "git", "build", "memory-preview", "extract", "inspect-load", "source-locate", "inspect",
                    "fuse", "fusion"}


async def _settle(pilot) -> None:
    """Let the workbench's thread workers finish. DirectoryTree's loader never completes
    by design, and a superseded exclusive worker ends cancelled: both are fine."""
    from textual.worker import WorkerCancelled

    await pilot.pause()
    # Until none is left: a worker's result can start the next (the reproducer opened, then
    # its profile read); waiting once left the Profile empty now and then under load.
    for _ in range(50):
        ours = [w for w in pilot.app.workers if w.group in WORKBENCH_GROUPS and not w.is_finished]
        if not ours:  # an empty list would mean "all workers"
            break
        try:
            await pilot.app.workers.wait_for_complete(ours)
        except WorkerCancelled:
            pass
        await pilot.pause()
    await pilot.pause()


@pytest.fixture
def settle():
    return _settle


async def _open_extract(pilot, output=None):
    """Enter on the Profile's first kernel: the extract dialog, its output set to `output`."""
    await _settle(pilot)
    await pilot.press("1", "enter")
    await pilot.pause()
    screen = pilot.app.screen
    assert type(screen).__name__ == "ExtractScreen"
    if output is not None:
        screen.query_one("#extract-output").value = str(output)
    return screen


@pytest.fixture
def open_extract():
    return _open_extract


@pytest.fixture
def demo_root(tmp_path, monkeypatch):
    if not demo.available():
        pytest.skip(f"no demo capture at {demo.demo_path()} (the lead bundles a real H200 capture there)")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no user themes/keymap leak in
    return demo.materialize(tmp_path / "reproducer")


@pytest.fixture
def make_app(demo_root):
    from kerncap_tui.app import KerncapApp

    def make():
        return KerncapApp(demo_root, demo=True)

    return make
