"""`kerncap info` on every capture in tests/fixtures/captures/ (real captures made on
the H200), plus the unit helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kerncap.cli import main
from kerncap.core.units import driver_version_text, human_bytes
from kerncap.reproducer.format import Capture
from kerncap.reproducer.info import format_summary, summarize

FIXTURES = Path(__file__).parent / "fixtures" / "captures"
CAPTURES = sorted(p for p in FIXTURES.glob("*") if p.is_dir()) if FIXTURES.is_dir() else []


@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
def test_summary_of_real_capture(path: Path, capsys):
    cap = Capture.open(path)
    s = summarize(path)
    assert s["kernel"]["name"] == cap.kernel["name"]
    assert len(s["regions"]) == len(cap.regions) and len(s["params"]) == len(cap.params)
    assert s["sizes"]["logical"] == cap.logical_bytes and s["sizes"]["stored"] == cap.stored_bytes
    for p, param in zip(s["params"], cap.params):
        assert bytes.fromhex(p["hex"]) == param.value
        if param.region is not None:
            assert p["pointer"]["region"] == param.region
    json.dumps(s)  # --json must serialise
    text = format_summary(s)
    assert cap.kernel["name"] in text or (cap.kernel.get("demangled") or "") in text
    for r in cap.regions:
        assert f"{r.base:#x}" in text
    assert main(["info", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kernel"]["name"] == cap.kernel["name"]


def test_summary_tolerates_sparse_manifest(tmp_path):
    # A real capture with the optional fields removed: info must not trip over them.
    import shutil

    repro = tmp_path / "repro"
    shutil.copytree(CAPTURES[0], repro)
    mpath = repro / "capture" / "manifest.json"
    m = json.loads(mpath.read_text())
    for key in ("provenance", "warnings", "globals", "host_regions"):
        m.pop(key, None)
    m["kernel"].pop("attributes", None)
    mpath.write_text(json.dumps(m))
    s = summarize(repro)
    assert s["path"] == str(repro) and s["capture"] == str(repro / "capture")
    text = format_summary(s)
    assert "gpu         ?, sm_?, driver CUDA ?" in text
    for r in m["regions"]:
        assert f"{r['base']:#x}" in text


def test_human_bytes():
    assert human_bytes(0) == "0 B"
    assert human_bytes(1023) == "1023 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(4 << 20) == "4.0 MiB"
    assert human_bytes(int(1.5 * (1 << 30))) == "1.5 GiB"
    assert human_bytes(3 << 40) == "3.0 TiB"


def test_driver_version_text():
    assert driver_version_text(13000) == "13.0"
    assert driver_version_text(12080) == "12.8"
    assert driver_version_text(None) == "?"


def test_info_set_info_and_list_are_typed_with_the_json_unchanged(fake_set, tmp_path):
    """api.info/set_info/list_reproducers return typed results whose JSON is what --json
    printed before (a dict: the documented shape), with the fields as attributes."""
    import json

    from kerncap import api
    from kerncap.reproducer.info import summarize
    from kerncap.reproducer.listing import list_captures
    from kerncap.reproducer.set_info import summarize_set

    axpy = Path(__file__).resolve().parent / "fixtures" / "captures" / "axpy_small"
    info = api.info(axpy)
    assert isinstance(info, api.ReproducerInfo) and info.kernel["name"] == "_Z12axpy_inplacefPKfPfi"
    assert info.payloads_ok and info.regions == info["regions"]
    assert json.loads(json.dumps(info)) == json.loads(json.dumps(summarize(axpy)))
    s = fake_set(tmp_path / "set").set_dir
    si = api.set_info(s)
    assert isinstance(si, api.SetInfo) and [m["dispatch"] for m in si.members] == [3, 17] and si.payloads_ok
    assert si.to_dict() == summarize_set(api.ReproducerSet.open(s))
    [row, *_] = api.list_reproducers(tmp_path / "none", [axpy])
    assert isinstance(row, api.ReproducerRow) and row.path == str(axpy) and row.error is None
    assert [dict(r) for r in api.list_reproducers(tmp_path / "none", [axpy])] == list_captures(tmp_path / "none", [axpy])


def test_size_line_says_how_many_times_smaller_the_stored_payloads_are():
    s = summarize(FIXTURES / "graph_explicit")
    s["sizes"] = {"logical": 10 << 20, "stored": 4 << 20}
    assert "size        10.0 MiB logical, 4.0 MiB stored (2.5x smaller)" in format_summary(s).splitlines()
    s["sizes"] = {"logical": 4 << 20, "stored": 10 << 20}  # stored larger (chunk rounding): no ratio
    assert "size        4.0 MiB logical, 10.0 MiB stored" in format_summary(s).splitlines()


def test_every_typed_field_reads_the_key_of_its_own_name():
    """ReproducerInfo, SetInfo and ReproducerRow: each typed attribute is its own key of the
    JSON document (`row.stored` is the bytes on disk, not the logical bytes)."""
    from kerncap import api

    for cls in (api.ReproducerInfo, api.SetInfo, api.ReproducerRow):
        names = [n for n, v in vars(cls).items()
                 if isinstance(v, property) and v.fget.__name__ == "<lambda>"]
        assert names, cls
        doc = cls({n: f"{cls.__name__}.{n}" for n in names})
        assert {n: getattr(doc, n) for n in names} == dict(doc), cls
    axpy = Path(__file__).resolve().parent / "fixtures" / "captures" / "axpy_small"
    [row] = [r for r in api.list_reproducers(Path("/nonexistent-workspace"), [axpy]) if r.path == str(axpy)]
    assert (row.logical, row.stored) == (row["logical"], row["stored"]) and row.stored is not None


def test_rank_0_of_a_job_is_said_like_any_other_rank():
    """Rank 0 is a rank: `info`'s job line and the selection's context name it (only a
    missing or negative rank means no job)."""
    from kerncap.reproducer.info import job_text

    job = {"rank": 0, "world_size": 2, "rank_var": "RANK", "local_rank": 0}
    assert job_text({"job": job}) == "rank 0 of 2 (RANK), local rank 0"
    assert job_text({"job": {"rank": -1}}) == "" and job_text({}) == ""
    s = summarize(FIXTURES / "graph_explicit")
    s["provenance"]["job"] = job
    assert "job         rank 0 of 2 (RANK), local rank 0" in format_summary(s).splitlines()
