"""The workbench on a reproducer set (kerncap_tui.set_mode): the members with their
weights, a member opened in the Memory tab, and a build that records one History row
with the workload-weighted speedup and the worst member. The set comes from the
`fake_set` fixture (tests/conftest.py: real H200 captures assembled by the real engine);
the build's replay results stand in for the GPU (tests/gpu/test_buckets.py times real
members with the same engine calls)."""

from __future__ import annotations

import asyncio
import functools
import json

from textual.widgets import DataTable

from kerncap_tui.widgets.history_pane import HistoryPane
from kerncap_tui.widgets.profile_pane import ProfilePane


def sync(test):
    @functools.wraps(test)
    def run(*args, **kwargs):
        asyncio.run(test(*args, **kwargs))

    return run


def fake_run(s, variant, times):
    """What a set's session (SetSession.run_members) returns: baseline 1.0 and 2.0 ms, the variant `times`."""
    from kerncap.reproducer.buckets import weighted_speedup
    from kerncap.replay.results import ReplayResult, ValidationResult
    from kerncap.replay.set_run import MemberRun, SetRun

    def timing(ms):
        return ReplayResult.from_times([ms] * 3, warmup=0, flush_l2=False, cubin=None)

    runs = [MemberRun(m, baseline=timing(b), variant=timing(v) if variant else None,
                      validation=ValidationResult(passed=True, mode="exact", regions=[]))
            for m, b, v in zip(s.members, (1.0, 2.0), times)]
    out = SetRun(s, runs, str(variant) if variant else None)
    if variant:
        out.workload = weighted_speedup(s.weights(), [r.speedup for r in runs])
    return out


@sync
async def test_a_set_lists_members_builds_and_records_the_weighted_speedup(fake_set, tmp_path, settle, monkeypatch):
    from kerncap.recompile.set_variant import SetVariant
    from kerncap.session import sets
    from kerncap_tui.app import KerncapApp

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    root = fake_set(tmp_path / "set").set_dir
    (root / "source").mkdir()
    (root / "source" / "kernel.cu").write_text("// the set's editable source\n")
    variant = root / "variants" / "1.json"

    def recompile_set(s, config=None, **kw):
        variant.parent.mkdir(exist_ok=True)
        variant.write_text(json.dumps({"cubins": {"0": "a.cubin", "1": "a.cubin"}}))
        return SetVariant(variant, {0: root / "a.cubin", 1: root / "a.cubin"}, 0.1, 1)

    monkeypatch.setattr(sets, "recompile_set", recompile_set)
    # The replay results stand in for the GPU; the session's own build records the row.
    monkeypatch.setattr(sets.SetSession, "run_members",
                        lambda self, variant=None, **kw: fake_run(self.set, variant, (0.5, 2.0)))
    app = KerncapApp(root)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert not app.query_one(ProfilePane).display
        members = app.query_one("#members-table", DataTable)
        rows = [members.get_row_at(i) for i in range(members.row_count)]
        assert [r[1].strip() for r in rows] == ["75.0%", "25.0%"] and [r[2] for r in rows] == ["3", "17"]
        members.focus()
        await pilot.press("down", "enter")
        await settle(pilot)
        assert app.capture.root == root / "members" / "1" / "capture"
        app.action_build()
        await settle(pilot)
        history = app.query_one(HistoryPane).history
        v1 = history.variants[-1]
        assert [v.label for v in history.variants] == ["baseline", "v1"]
        assert round(history.speedup(v1), 4) == 1.6  # 1 / (0.75 / 2 + 0.25 / 1)
        assert "worst #1 1.00×" in v1.note and v1.validation == "pass"
        assert "worst #1" in str(app.query_one("#history-status").content)
        assert members.get_row_at(0)[4] == "2.00×"


@sync
async def test_a_member_whose_validation_failed_is_shown_failed(fake_set, tmp_path, settle, monkeypatch):
    """The members table's valid column after a build: ✓ pass for the member that passed,
    ✗ FAIL for the one whose validation failed, error for one that did not run."""
    import dataclasses

    from kerncap_tui.app import KerncapApp
    from kerncap_tui.set_mode import SetMembersPane

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    root = fake_set(tmp_path / "set").set_dir
    app = KerncapApp(root)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        pane = app.query_one(SetMembersPane)
        run = fake_run(pane.set, 1, (0.5, 2.0))
        run.runs[1].validation = dataclasses.replace(run.runs[1].validation, passed=False)
        pane.show_results(run)
        members = app.query_one("#members-table", DataTable)
        assert [members.get_row_at(i)[5] for i in range(members.row_count)] == ["✓ pass", "✗ FAIL"]
        run.runs[1].error, run.runs[1].validation = "the replay failed", None
        pane.show_results(run)
        assert [members.get_row_at(i)[5] for i in range(members.row_count)] == ["✓ pass", "error"]
