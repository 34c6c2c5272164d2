"""The variant history's model in the engine (kerncap.reproducer.history): one schema
(reproducer/schemas.py HISTORY_JSON) for every reader, atomic writes, and what a
damaged or hostile history.json says. The fuzzing of the same readers is in
test_fuzz_history.py; the git commits, diffs and restores in tui/test_logic.py."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from unprivileged import run_unprivileged, shared_tmp

from kerncap.errors import CaptureFormatError, KerncapError
from kerncap.reproducer import history as hist
from kerncap.reproducer.history import History, best_variant, summary
from kerncap.reproducer.listing import describe_reproducer

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "kerncap_tui" / "demo" / "reproducer"


@pytest.fixture
def demo(tmp_path) -> Path:
    d = tmp_path / "demo"
    shutil.copytree(DEMO, d)
    return d


def write(d: Path, doc) -> None:
    (d / hist.HISTORY_FILE).write_text(json.dumps(doc))


def test_the_demo_reads_back_with_every_reader(demo):
    h = History.load(demo)
    assert [v.label for v in h.variants] == ["baseline", "v1", "v2", "v3"]
    assert best_variant(demo).label == "v2"  # the fastest passing one
    assert summary(demo) == {"validation": "pass", "variants": 4}
    row = describe_reproducer(demo)
    assert row["validation"] == "pass" and row["variants"] == 4


def test_inconclusive_is_a_verdict_every_reader_accepts(demo):
    """The two old dataclasses disagreed: the engine's reader had no `inconclusive`."""
    doc = json.loads((demo / hist.HISTORY_FILE).read_text())
    doc["variants"][2]["validation"] = "inconclusive"
    write(demo, doc)
    assert History.load(demo).get(2).validation == "inconclusive"
    assert best_variant(demo).label == "v1"  # not a pass: not the best


@pytest.mark.parametrize("change,field", [
    (lambda d: d["variants"][1].update(validation="great"), "variants[1].validation"),
    (lambda d: d["variants"][2].pop("id"), "variants[2].id is missing"),
    (lambda d: d["variants"][1].update(id=-1), "variants[1].id"),
    (lambda d: d["variants"][0].update(median_ms=-1), "variants[0].median_ms"),
    (lambda d: d.update(variants={"0": {}}), "variants must be a list"),
    (lambda d: d["variants"][1].update(commit="not hex"), "variants[1].commit"),
    (lambda d: d["variants"][1].update(cubin="variants/\x00.cubin"), "variants[1].cubin"),
    (lambda d: d.update(version=7), "version"),
])
def test_a_damaged_history_names_the_file_and_the_field(demo, change, field):
    doc = json.loads((demo / hist.HISTORY_FILE).read_text())
    change(doc)
    write(demo, doc)
    with pytest.raises(CaptureFormatError) as exc:
        History.load(demo)
    assert str(demo / hist.HISTORY_FILE) in exc.value.message and field in exc.value.message, exc.value.message
    assert exc.value.hint
    # kerncap list names it (and why), lists the rest
    assert summary(demo) == {"validation": "unreadable history.json",
                             "problem": f"{exc.value.message}; {exc.value.hint}"}


def test_two_variants_with_one_id_are_refused(demo):
    doc = json.loads((demo / hist.HISTORY_FILE).read_text())
    doc["variants"][2]["id"] = 1
    write(demo, doc)
    with pytest.raises(CaptureFormatError, match="two variants have the same id"):
        History.load(demo)


@pytest.mark.parametrize("where", ["dot-dot", "absolute", "link"])
def test_a_best_variant_whose_cubin_lies_outside_the_reproducer_is_never_chosen(demo, tmp_path, where):
    """history.json travels with shared reproducers: the fastest passing row naming a cubin
    outside the reproducer (by `..`, an absolute path, a link in variants/ leading out) is
    not the best variant, so `kerncap check` and `--apply` never run that file."""
    outside = tmp_path / "elsewhere.cubin"
    outside.write_bytes((demo / "variants" / "2.cubin").read_bytes())
    if where == "link":
        (demo / "variants" / "out.cubin").symlink_to(outside)
    cubin = {"dot-dot": "../elsewhere.cubin", "absolute": str(outside), "link": "variants/out.cubin"}[where]
    doc = json.loads((demo / hist.HISTORY_FILE).read_text())
    doc["variants"][2]["cubin"] = cubin  # v2, the fastest passing row
    write(demo, doc)
    assert (demo / cubin).is_file()  # it exists: only where it lies refuses it
    assert best_variant(demo).label == "v1"
    from kerncap.fleet.check import cases_of
    assert cases_of(demo) == [("baseline", None), ("v1", "variants/1.cubin")]


def test_a_newer_writers_fields_are_kept_out_not_refused(demo):
    doc = json.loads((demo / hist.HISTORY_FILE).read_text())
    doc["variants"][1]["heatmap"] = {"from": "a newer kerncap"}
    write(demo, doc)
    assert History.load(demo).get(1).cubin == "variants/1.cubin"


def test_a_fifo_or_a_huge_file_is_never_read(demo):
    (demo / hist.HISTORY_FILE).unlink()
    os.mkfifo(demo / hist.HISTORY_FILE)
    with pytest.raises(CaptureFormatError, match="not a regular file"):
        History.load(demo)


def test_recording_writes_atomically_and_checks_its_own_output(demo, monkeypatch):
    h = History.load(demo)
    h.initial_commit = lambda: "0" * 40  # no git here: the write is what is checked
    writes = []
    real = hist.write_atomic
    monkeypatch.setattr(hist, "write_atomic", lambda path, data, **kw: writes.append(path) or real(path, data, **kw))
    h.record(baseline=True, median_ms=0.5, validation="inconclusive")
    assert writes == [demo / hist.HISTORY_FILE]
    assert History.load(demo).baseline.validation == "inconclusive"  # what it wrote fits the schema
    assert not [p for p in demo.iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(ValueError):
        h.record(baseline=True, median_ms=0.5, validation="great")


def _first_commit(root: str):
    History(root=Path(root)).initial_commit()


def test_a_read_only_reproducer_names_that_not_git(tmp_path):
    """A read-only reproducer (a shared mount, another user's) gets a message about the
    directory, never "is git installed?" (git is installed)."""
    import mmap  # noqa: F401 - what GitPython imports lazily, loaded before dropping privileges

    import git  # noqa: F401

    base = shared_tmp()
    try:
        repro = base / "demo"
        shutil.copytree(DEMO, repro)  # shipped as dot-git/: there is no .git, so it must be created
        for d, _, files in os.walk(base):
            os.chmod(d, 0o555)
            for f in files:
                os.chmod(Path(d) / f, 0o444)
        with pytest.raises(KerncapError) as exc:
            run_unprivileged(_first_commit, str(repro))
        assert "read-only" in exc.value.message and str(repro) in exc.value.message
        assert "git installed" not in (exc.value.hint or "") and "writable" in exc.value.hint
    finally:
        for d, _, _ in os.walk(base):
            os.chmod(d, 0o755)
        shutil.rmtree(base, ignore_errors=True)


def test_two_processes_recording_into_one_history_keep_each_others_rows(demo):
    """The workbench, `kerncap build` and an MCP agent each hold a History loaded once; each
    record wrote its own list back, so a row another process recorded in between was lost
    and its id given out twice. A record now reads history.json again under a lock."""
    if (demo / "dot-git").exists():
        (demo / "dot-git").rename(demo / ".git")
    workbench, agent = History.load(demo), History.load(demo)
    a = agent.record(median_ms=1.0, validation="pass", cubin="variants/8.cubin")
    w = workbench.record(median_ms=2.0, validation="pass", cubin="variants/9.cubin")
    on_disk = History.load(demo)
    assert (a.id, w.id) == (4, 5)
    assert [v.cubin for v in on_disk.variants[-2:]] == ["variants/8.cubin", "variants/9.cubin"]
    assert [v.id for v in workbench.variants] == [v.id for v in on_disk.variants]  # it sees the agent's row too
    outcome = {"command": "./app", "launches": 3, "substituted": 3, "check": "pass", "compared": 3,
               "mismatch_launch": None, "share": 0.5,
               **{f"{k}_{q}": 1.1 for k in ("kernel", "app") for q in ("speedup", "low", "high")}}
    agent.note_in_app(4, outcome)
    assert History.load(demo).get(5).cubin == "variants/9.cubin"  # the note kept the workbench's row


def test_an_older_records_speedup_is_the_baselines_median_over_the_variants(tmp_path):
    """A row recorded before intervals existed has no speedup: it is the ratio of medians,
    baseline over variant (a variant twice as fast is 2x, not 0.5x)."""
    h = History(root=tmp_path, variants=[hist.Variant(id=0, time="t", median_ms=2.0),
                                         hist.Variant(id=1, time="t", median_ms=1.0),
                                         hist.Variant(id=2, time="t", median_ms=1.0, speedup=1.8)])
    assert h.speedup(h.get(1)) == 2.0 and h.speedup(h.get(2)) == 1.8
    assert History(root=tmp_path, variants=[hist.Variant(id=1, time="t", median_ms=1.0)]).speedup(
        hist.Variant(id=1, time="t", median_ms=1.0)) is None  # no baseline: no ratio


def test_the_best_significant_variant_lies_strictly_above_one(tmp_path):
    """An interval whose low end is exactly 1 includes "no faster" (significance's own rule:
    low <= 1 <= high is within noise), so such a row is never the best significant one,
    even where its record says significant; one just above 1 is (twenty-first audit:
    `speedup_low >= 1.0`)."""
    touching = hist.Variant(id=1, time="t", median_ms=0.5, validation="pass", speedup=1.9,
                            speedup_low=1.0, speedup_high=2.5, significant=True)
    above = hist.Variant(id=2, time="t", median_ms=0.8, validation="pass", speedup=1.2,
                         speedup_low=1.0001, speedup_high=1.4, significant=True)
    base = hist.Variant(id=0, time="t", median_ms=1.0, validation="pass")
    assert History(root=tmp_path, variants=[base, touching]).best_significant() is None
    assert History(root=tmp_path, variants=[base, touching, above]).best_significant() is above
