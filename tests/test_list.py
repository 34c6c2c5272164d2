"""`kerncap list` and kerncap.reproducer.listing.list_captures on real H200 reproducers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from kerncap.cli import main
from kerncap.errors import KerncapError
from kerncap.reproducer.format import Capture
from kerncap.reproducer.listing import list_captures

ROOT = Path(__file__).resolve().parent.parent
AXPY = ROOT / "tests" / "fixtures" / "captures" / "axpy_small"
DEMO = ROOT / "kerncap_tui" / "demo" / "reproducer"


@pytest.fixture
def workspace(tmp_path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(AXPY, ws / "reproducers" / "axpy_inplace-1")
    shutil.copytree(DEMO, ws / "reproducers" / "smooth-1", ignore=shutil.ignore_patterns("dot-git"))
    return ws


def test_list_captures(workspace):
    rows = list_captures(workspace)
    assert [r["kernel"] for r in rows] == ["smooth", "axpy_inplace"]  # newest first (2026-12-04 vs 2026-12-01)
    smooth, axpy = rows
    cap = Capture.open(AXPY)
    recorded = json.loads((cap.root.parent / "reproducer.json").read_text())["command"]
    assert axpy["mangled"] == cap.kernel["name"] and axpy["command"] == " ".join(recorded)
    assert axpy["time"] == cap.provenance["time"]
    assert (axpy["logical"], axpy["stored"]) == (cap.logical_bytes, cap.stored_bytes)
    assert axpy["validation"] is None and axpy["variants"] == 0 and axpy["error"] is None
    history = json.loads((DEMO / "history.json").read_text())
    baseline = next(v for v in history["variants"] if v["id"] == 0)
    assert smooth["validation"] == baseline["validation"] and smooth["variants"] == len(history["variants"])
    json.dumps(rows)


def test_extra_dirs_and_duplicates(workspace, tmp_path):
    rows = list_captures(tmp_path / "empty-ws", [AXPY, AXPY.parent, workspace / "reproducers"])
    # AXPY.parent holds every committed capture (axpy_small, graph_explicit, the small ones of
    # tests/gpu/make_small_fixtures.py); AXPY again is a duplicate.
    committed = [p.name for p in AXPY.parent.iterdir() if (p / "capture" / "manifest.json").is_file()]
    assert {"axpy_older", "axpy_small", "graph_explicit"} <= set(committed)
    assert sorted(Path(r["path"]).name for r in rows) == sorted(["axpy_inplace-1", "smooth-1", *committed])
    assert list_captures(tmp_path / "empty-ws") == []


def test_broken_reproducers_are_listed_with_the_reason(workspace):
    broken = workspace / "reproducers" / "broken"
    (broken / "capture").mkdir(parents=True)
    (workspace / "reproducers" / "smooth-1" / "history.json").write_text("{not json")
    rows = {Path(r["path"]).name: r for r in list_captures(workspace)}
    assert "manifest.json is missing" in rows["broken"]["error"] and rows["broken"]["kernel"] is None
    assert rows["smooth-1"]["validation"] == "unreadable history.json" and rows["smooth-1"]["error"] is None


def test_cli_list(workspace, tmp_path, capsys):
    assert main(["list", "--workspace", str(workspace)]) == 0
    out = capsys.readouterr().out
    assert "axpy_inplace" in out and "smooth" in out and "pass" in out and "32.0 KiB" in out
    assert main(["list", "--workspace", str(workspace), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2
    (workspace / "reproducers" / "broken" / "capture").mkdir(parents=True)
    assert main(["list", "--workspace", str(workspace)]) == 3  # listed, and the status says one is damaged
    assert "(unreadable)" in capsys.readouterr().out
    assert main(["list", "--workspace", str(tmp_path / "none")]) == 0
    assert "no reproducers under" in capsys.readouterr().out


def test_cli_list_exits_3_for_a_problem_named_on_a_readable_row(workspace, capsys):
    # The capture reads but its history.json does not: the row is listed, its problem named
    # beneath the table, and the exit status says something is damaged.
    (workspace / "reproducers" / "smooth-1" / "history.json").write_text("{not json")
    assert main(["list", "--workspace", str(workspace)]) == 3
    out = capsys.readouterr().out
    assert "unreadable history.json" in out and f"  ! {workspace / 'reproducers' / 'smooth-1'}: " in out
    assert main(["list", "--workspace", str(workspace), "--json"]) == 3


def test_a_sets_members_come_in_numeric_order(tmp_path):
    """A set's members/<n> are listed by their number (2 before 10), not by name."""
    from kerncap.reproducer.listing import find_reproducers
    from kerncap.reproducer.sets import SET_FILE

    root = tmp_path / "axpy-set"
    for n in ("10", "2", "1"):
        (root / "members" / n / "capture").mkdir(parents=True)
    (root / SET_FILE).write_text("{}")
    assert [p.name for p in find_reproducers(root)] == ["1", "2", "10"]
    assert [p.name for p in find_reproducers(tmp_path)] == ["1", "2", "10"]


def test_a_reproducer_json_of_the_wrong_shape_is_said_not_read(workspace):
    """reproducer.json travels with a reproducer: one whose notes are a string, not a list,
    is a problem `list` names and `info` warns of, never read as notes one letter each."""
    from kerncap.reproducer.info import format_summary, summarize
    from kerncap.reproducer.record import read_record

    repro = workspace / "reproducers" / "axpy_inplace-1"
    record = json.loads((repro / "reproducer.json").read_text())
    (repro / "reproducer.json").write_text(json.dumps(record | {"notes": "oops"}))
    with pytest.raises(KerncapError, match="notes"):
        read_record(repro)
    row = {Path(r["path"]).name: r for r in list_captures(workspace)}["axpy_inplace-1"]
    assert row["error"] is None and any("notes" in p for p in row["problems"])
    s = summarize(repro)
    assert "notes" in s["reproducer"]["error"]
    assert not any(line.startswith("note        ") for line in format_summary(s).splitlines())
