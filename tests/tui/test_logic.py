"""CPU tests of the workbench's pure logic: typed values, history (real git), watcher
filter, bars, themes."""

from __future__ import annotations

import struct

import pytest
from kerncap.core import dtypes as dt
from kerncap.core.units import human_bytes
from kerncap.errors import KerncapError

from kerncap_tui import charts, regions, theming
from kerncap.api import History
from kerncap_tui.watcher import is_source_event


def test_value_rows_are_byte_exact():
    pre = struct.pack("<4f", 1.0, 2.0, 0.0, float("nan"))
    post = struct.pack("<4f", 1.0, 2.5, -0.0, float("nan"))
    rows = regions.value_rows(pre, post, "float32")
    assert [r.changed for r in rows] == [False, True, True, False]  # -0.0 differs from 0.0 in bytes
    assert rows[1].diff == pytest.approx(0.5)


def test_decode_dtypes():
    assert dt.decode("float16", struct.pack("<2e", 1.5, -2.0)) == [1.5, -2.0]
    assert dt.decode("bfloat16", bytes.fromhex("803f")) == [1.0]  # 0x3f80 = 1.0
    assert dt.decode("int32", struct.pack("<2i", -3, 7)) == [-3, 7]
    assert dt.decode("int32", b"\x01\x02\x03") == []  # partial element dropped


def test_human_bytes():
    assert human_bytes(512) == "512 B"
    assert human_bytes(16 * 1024) == "16.0 KiB"
    assert human_bytes(3 * 1024**3) == "3.0 GiB"


def test_history_commits_diffs_and_restores(tmp_path):
    src = tmp_path / "source"
    src.mkdir()
    (src / "k.cu").write_text("// v0\n")
    h = History.load(tmp_path)
    first = h.initial_commit()
    base = h.record(baseline=True, median_ms=2.0, validation="pass")
    assert base.commit == first
    (src / "k.cu").write_text("// v1\n")
    v1 = h.record(median_ms=1.0, validation="pass", cubin="variants/1.cubin")
    assert h.speedup(v1) == pytest.approx(2.0)
    msg = h.repo().commit(v1.commit).message
    assert "Kerncap-Median-Ms: 1.0" in msg and "Kerncap-Validation: pass" in msg and "2.00×" in msg
    assert "-// v0" in h.diff(base, v1) and "+// v1" in h.diff(base, v1)
    h.restore(base)
    assert (src / "k.cu").read_text() == "// v0\n"
    again = History.load(tmp_path)  # mirrored in history.json
    assert [v.label for v in again.variants] == ["baseline", "v1"]
    assert (tmp_path / ".gitignore").read_text().count("capture/blobs/") == 1


def test_history_names_only_a_significant_variant_as_best(tmp_path):
    from kerncap_tui.charts import speedup_cells
    from kerncap_tui.widgets.history_pane import speedup_phrase, validation_cell

    src = tmp_path / "source"
    src.mkdir()
    (src / "k.cu").write_text("// v0\n")
    h = History.load(tmp_path)
    h.record(baseline=True, median_ms=2.0, validation="pass", validation_detail="exact")
    noise = h.record(median_ms=1.9, validation="pass", validation_detail="exact · p4", speedup=1.05,
                     speedup_low=0.97, speedup_high=1.16, confidence=0.99, significant=False)
    (src / "k.cu").write_text("// v2\n")
    fast = h.record(median_ms=1.5, validation="pass", validation_detail="exact · p4", speedup=1.32,
                    speedup_low=1.21, speedup_high=1.35, confidence=0.99, significant=True)
    (src / "k.cu").write_text("// v3\n")
    h.record(median_ms=1.0, validation="fail", speedup=2.0, speedup_low=1.9, speedup_high=2.1, confidence=0.99,
             significant=True)
    assert h.best_significant() is fast  # v3 is faster but failed validation
    assert [c.plain for c in speedup_cells(h, noise)] == ["within noise", "0.97–1.16"]
    assert [c.plain for c in speedup_cells(h, fast)] == ["1.32×", "1.21–1.35"]
    assert validation_cell(fast).plain == "✓ exact · p4"
    assert speedup_phrase(noise) == "within noise (1.05×, 0.97–1.16)"
    assert speedup_phrase(fast) == "1.32× [1.21–1.35]"
    msg = h.repo().commit(noise.commit).message
    assert "within noise" in msg.splitlines()[0]
    assert "Kerncap-Speedup-Interval: 0.9700 1.1600 (99%, within noise)" in msg
    assert "Kerncap-Validation-Detail: exact · p4" in msg
    assert History.load(tmp_path).get(2).speedup_low == 1.21


# Two rows as the first bundled demo recorded them (2026-11-29): medians, no interval.
OLD_ROWS = [
    {"id": 0, "time": "2026-11-29T19:49:08Z", "median_ms": 0.006544000003486872, "min_ms": 0.0055680000223219395,
     "spread_pct": 29.92664980826696, "validation": "pass", "commit": "22e34bdfc1cb5af5a09cb94f373b1b31d306a5dc",
     "cubin": None, "build_seconds": None, "note": "captured cubin"},
    {"id": 1, "time": "2026-11-29T19:49:08Z", "median_ms": 0.006191999884322286, "min_ms": 0.0054720002226531506,
     "spread_pct": 48.73385964139794, "validation": "pass", "commit": "058471a395f8df78c7303a66ca7023be234b58eb",
     "cubin": "variants/1.cubin", "build_seconds": 0.6918152970000051, "note": "unmodified source"},
]


def test_old_history_records_show_no_interval(tmp_path):
    import json

    from kerncap_tui.charts import speedup_cells

    (tmp_path / "history.json").write_text(json.dumps({"version": 1, "variants": OLD_ROWS}))
    h = History.load(tmp_path)
    v1 = h.get(1)
    assert not h.has_interval(v1) and h.best_significant() is None
    assert [c.plain for c in speedup_cells(h, v1)] == ["(1.06×)", "no interval"]


def test_history_unreadable_names_the_file(tmp_path):
    (tmp_path / "history.json").write_text("{not json")
    with pytest.raises(KerncapError, match="history.json"):
        History.load(tmp_path)


def test_watcher_ignores_editor_droppings():
    assert is_source_event("/r/source/k.cu")
    for name in (".k.cu.swp", "k.cu~", "4913", ".#k.cu", ".hidden", "k.cu.swo", "k.cu.tmp", "k.cu.orig"):
        assert not is_source_event(f"/r/source/{name}")
    assert not is_source_event("/r/source/.git/k.cu", __import__("pathlib").Path("/r/source"))


def test_a_save_by_renaming_a_temporary_file_onto_a_source_is_seen(tmp_path):
    """Editors (vim's backupcopy, VS Code, sed -i) save by writing a dropping and renaming it
    onto the source: the watchdog's move event names the dropping as its src and the
    source as its dest, and it is the dest that was saved. Mutation caught: the path taken
    from the event's src (the dropping: ignored, so such a save never built)."""
    import os
    import threading

    from kerncap_tui.messages import SourceChanged
    from kerncap_tui.watcher import SourceWatcher

    src = tmp_path / "source"
    src.mkdir()
    (src / "k.cu").write_text("// v0\n")
    seen: list[SourceChanged] = []
    got = threading.Event()

    def post(message) -> None:
        seen.append(message)
        if isinstance(message, SourceChanged) and message.path.name == "k.cu":
            got.set()

    watcher = SourceWatcher(src, post)
    watcher.start()
    try:
        dropping = src / ".k.cu.swp"
        dropping.write_text("// v1\n")
        os.replace(dropping, src / "k.cu")
        assert got.wait(30), [getattr(m, "path", m) for m in seen]  # 30 s only bounds a failure
    finally:
        watcher.stop()
    assert (src / "k.cu").read_text() == "// v1\n"
    assert all(is_source_event(str(m.path), src) for m in seen)  # the dropping itself posts nothing


def test_one_definition_of_the_sources(tmp_path):
    """Listing (MCP's list_sources), the history's fingerprint and the watcher agree on
    what a source is: an editor's droppings change none of them."""
    from kerncap import api

    src = tmp_path / "source"
    (src / ".cache").mkdir(parents=True)
    (src / "k.cu").write_text("// kernel\n")
    before = api.source_fingerprint(src)
    droppings = [".k.cu.swp", "k.cu.swo", "k.cu~", "4913", "k.cu.tmp", "k.cu.orig", "build.json.lock",
                 ".cache/k.cu"]
    for name in droppings:
        (src / name).write_text("not a source\n")
        assert not is_source_event(str(src / name), src), name
    assert api.source_fingerprint(src) == before
    assert [f.path for f in api.list_sources(tmp_path)] == ["k.cu"]
    (src / "k.cu").write_text("// edited\n")
    assert api.source_fingerprint(src) != before and is_source_event(str(src / "k.cu"), src)


def test_bar():
    assert charts.bar(1.0, 1.0, 4) == "████"
    assert charts.bar(0.5, 1.0, 4) == "██  "
    assert charts.bar(None, 1.0, 3) == "   "
    from kerncap.core.units import interval_text, speedup_text

    assert speedup_text(1.234) == "1.23×" and speedup_text(1.2345, 3) == "1.234×" and speedup_text(None) == "—"
    assert interval_text(1.2, 1.35) == "1.20–1.35" and interval_text(None, 1.0) == ""


def _theme_dir(tmp_path, monkeypatch):
    """The user's theme directory, under a fresh XDG_CONFIG_HOME."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    tdir = tmp_path / "kerncap" / "themes"
    tdir.mkdir(parents=True)
    return tdir


def test_house_themes_and_user_theme_errors(tmp_path, monkeypatch):
    names = {t.name for t in theming.house_themes()}
    assert {"kerncap-dark", "kerncap-light"} <= names
    tdir = _theme_dir(tmp_path, monkeypatch)
    (tdir / "mine.toml").write_text('primary = "#ff0000"\ndark = false\n')
    (tdir / "bad.toml").write_text('primary = "#ff0000"\ncolour = "x"\n')
    themes, errors = theming.user_themes()
    assert [t.name for t in themes] == ["mine"]
    assert len(errors) == 1 and "bad.toml" in errors[0].message and "colour" in errors[0].message


def test_a_user_theme_keeps_the_name_it_gives_itself(tmp_path, monkeypatch):
    """`name = "solarized-night"` in mine.toml is the theme's name (what `theme` in the
    palette and the config name); the file's name only stands in where it gives none."""
    tdir = _theme_dir(tmp_path, monkeypatch)
    (tdir / "mine.toml").write_text('name = "solarized-night"\nprimary = "#268bd2"\n')
    (tdir / "plain.toml").write_text('primary = "#ff0000"\n')
    themes, errors = theming.user_themes()
    assert [t.name for t in themes] == ["solarized-night", "plain"] and errors == []
