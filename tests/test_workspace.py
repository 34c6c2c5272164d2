"""kerncap.reproducer.workspace: where profiles and reproducers go without --output, and the
names two runs in one second get."""

from __future__ import annotations

from kerncap.reproducer import workspace
from kerncap.reproducer.workspace import Workspace


def test_profiles_saved_in_one_second_get_distinct_names_and_are_all_listed(tmp_path, monkeypatch):
    monkeypatch.setattr(workspace, "timestamp", lambda: "20261205-030000")  # three runs in one second
    ws = Workspace(tmp_path / "ws")
    assert ws.profiles() == []  # no profiles directory yet
    saved = []
    for _ in range(3):
        p = ws.new_profile_path()
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("{}")
        saved.append(p)
    assert [p.name for p in saved] == ["20261205-030000.json", "20261205-030000-2.json", "20261205-030000-3.json"]
    assert ws.profiles() == saved[::-1]  # newest first: the last one taken in that second leads


def test_reproducers_made_in_one_second_get_distinct_safe_directories(tmp_path, monkeypatch):
    monkeypatch.setattr(workspace, "timestamp", lambda: "20261205-030000")
    ws = Workspace(tmp_path / "ws")
    first = ws.new_reproducer_path("void axpy<float>(float*, int)")
    assert first == tmp_path / "ws" / "reproducers" / "void_axpy_float_float_int-20261205-030000"
    first.mkdir(parents=True)
    assert ws.new_reproducer_path("void axpy<float>(float*, int)").name == "void_axpy_float_float_int-20261205-030000-2"
