"""Damaged reproducers, tried as a new user would: every reader checks its file against a
declared schema (one message naming the file and the field), `info` and `list` check
payload presence and size (hashes with --verify), `list` names a damaged reproducer on
its row and carries on, and nothing blocks on a FIFO or reads a huge file."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from kerncap import api
from kerncap.cli import main
from kerncap.errors import CaptureFormatError, KerncapError
from kerncap.reproducer.format import Capture, capture_chunks

ROOT = Path(__file__).resolve().parent.parent
AXPY = ROOT / "tests" / "fixtures" / "captures" / "axpy_small"
DEMO = ROOT / "kerncap_tui" / "demo" / "reproducer"


@pytest.fixture
def repro(tmp_path) -> Path:
    out = tmp_path / "ws" / "reproducers" / "axpy"
    shutil.copytree(AXPY, out)
    return out


def edit_manifest(repro: Path, change) -> Path:
    path = repro / "capture" / "manifest.json"
    m = json.loads(path.read_text())
    change(m)
    path.write_text(json.dumps(m))
    return path


@pytest.mark.parametrize("change, field", [
    (lambda m: m.pop("kernel"), "field kernel is missing"),
    (lambda m: m.pop("launch"), "field launch is missing"),
    (lambda m: m["kernel"]["module"].pop("cubin"), "field kernel.module.cubin is missing"),
    (lambda m: m["regions"][1].update(size="16384"), "field regions[1].size must be an integer"),
    (lambda m: m["regions"][0].update(pre=[1]), "field regions[0].pre[0]"),
    (lambda m: m["launch"].update(grid=[-1, 1, 1]), "field launch.grid[0] must be >= 0"),
    (lambda m: m["params"][1].update(value="xyz"), "field params[1].value is malformed"),
    (lambda m: m["kernel"]["module"].update(cubin="../../../etc/passwd"), "field kernel.module.cubin is malformed"),
    (lambda m: m["regions"][0].update(size=1 << 60), "field regions[0].size must be <="),
    (lambda m: m.update(chunk_size=0), "field chunk_size must be >= 4096"),
    (lambda m: m["provenance"].update(command=[1, 2]), "field provenance.command"),
    (lambda m: m["provenance"].update(synthetic=[1]), "field provenance.synthetic"),
    (lambda m: m["regions"][1].update(id=0), "lists a region id twice"),
    (lambda m: m["regions"][1].update(base=m["regions"][0]["base"] + 8), "overlaps another"),
    (lambda m: m["regions"][0].update(pre=[]), "regions[0].pre/post list 0/1 chunks, expected 1"),
    # the post-state list checked too, not only the pre-state one (mutation caught: its count skipped)
    (lambda m: m["regions"][1].update(post=m["regions"][1]["post"][:-1]), "regions[1].pre/post list"),
    (lambda m: m["regions"][0].update(post=[*m["regions"][0]["post"], None]), "regions[0].pre/post list 1/2 chunks"),
    # JSON's true and false are no integers, though Python's bool is one (mutation caught: isinstance)
    (lambda m: m["launch"].update(grid=[True, 1, 1]), "field launch.grid[0] must be an integer (got True)"),
    (lambda m: m["launch"].update(block=[256, False, 1]), "field launch.block[1] must be an integer (got False)"),
])
def test_manifest_fields_are_named(repro, change, field, capsys):
    path = edit_manifest(repro, change)
    with pytest.raises(CaptureFormatError) as err:
        Capture.open(repro)
    assert str(path) in err.value.message and field in err.value.message, err.value.message
    for argv in (["info", str(repro)], ["prune", str(repro), "--no-validate"], ["pack", str(repro)]):
        assert main(argv) == 3
        text = capsys.readouterr().err
        assert field in text and "Traceback" not in text


def test_list_names_the_damaged_reproducer_on_its_row_and_carries_on(repro, capsys):
    shutil.copytree(DEMO, repro.parent / "demo")
    edit_manifest(repro, lambda m: m.pop("kernel"))
    rows = {Path(r["path"]).name: r for r in api.list_reproducers(repro.parent.parent)}
    assert "field kernel is missing" in rows["axpy"]["error"]
    assert rows["demo"]["error"] is None and rows["demo"]["payloads"] == "ok"
    assert main(["list", "--workspace", str(repro.parent.parent)]) == 3
    out = capsys.readouterr().out
    assert "(unreadable)" in out and "smooth" in out and "field kernel is missing" in out


def test_truncated_blob_is_reported_by_info_and_list(repro, capsys):
    cap = Capture.open(repro)
    h = next(cap.iter_blobs())
    blob = cap.blob_path(h)
    blob.write_bytes(blob.read_bytes()[:100])
    s = api.info(repro)
    assert not s["payloads"]["ok"] and s["payloads"]["damaged_count"] == 1
    assert main(["info", str(repro)]) == 3
    assert (f"DAMAGED     1 chunks damaged (first: {h} (region 0 pre-state chunk 0): {h}.bin holds 100 bytes"
            in capsys.readouterr().out)
    assert main(["list", "--workspace", str(repro.parent.parent)]) == 3
    out = capsys.readouterr().out
    assert "DAMAGED" in out and "payloads: 1 chunks damaged" in out


def test_missing_blob_and_cubin_are_reported(repro, capsys):
    cap = Capture.open(repro)
    for h in cap.iter_blobs():
        cap.blob_path(h).unlink()
    cap.cubin_path.unlink()
    p = api.info(repro)["payloads"]
    assert p["missing_count"] == len(list(cap.iter_blobs())) and p["cubin"] == "missing" and not p["ok"]


def test_verify_finds_a_flipped_byte_that_keeps_the_size(repro, capsys):
    cap = Capture.open(repro)
    h = next(cap.iter_blobs())
    data = bytearray(cap.blob_path(h).read_bytes())
    data[7] ^= 1
    cap.blob_path(h).write_bytes(bytes(data))
    assert main(["info", str(repro)]) == 0  # sizes only: fast, and fine
    capsys.readouterr()
    assert main(["info", str(repro), "--verify", "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["payloads"]["verified"] and "does not match its hash" in doc["payloads"]["damaged"][0]
    rows = api.list_reproducers(repro.parent.parent, verify=True)
    assert "does not match its hash" in rows[0]["payloads"]


def test_payloads_in_the_store_are_counted(repro):
    api.store(repro)
    p = api.info(repro)["payloads"]
    assert p["ok"] and p["in_store"] == p["chunks"] > 0 and p["local"] == 0
    assert "in the store" in p["summary"]


def test_verify_reads_the_chunks_held_in_the_store(repro, capsys):
    """`--verify` checks every chunk's hash wherever it lies: a store object that still
    decompresses to a chunk of the right length, but of other bytes, is damaged under
    --verify (the chunk named with what it is) and fine without. Mutation caught: the
    chunks in the store counted without being read."""
    from kerncap.reproducer.store import compress, store_of

    api.store(repro)
    cap = Capture.open(repro)
    h, n = max(capture_chunks(cap), key=lambda c: c[1])
    obj = store_of(cap.root).object_path(h)
    obj.unlink()
    obj.write_bytes(compress(b"\x01" * n))  # the right length, other bytes
    assert api.info(repro)["payloads"]["ok"]  # sizes only
    assert main(["info", str(repro), "--verify", "--json"]) == 3
    p = json.loads(capsys.readouterr().out)["payloads"]
    assert p["verified"] and not p["ok"] and p["in_store"] == p["chunks"] and p["damaged_count"] == 1
    assert p["damaged"][0].startswith(f"{h} (") and "does not match its hash" in p["damaged"][0]
    rows = api.list_reproducers(repro.parent.parent, verify=True)
    assert "does not match its hash" in rows[0]["payloads"]


def test_a_fifo_blob_or_manifest_never_blocks(repro):
    cap = Capture.open(repro)
    h = next(cap.iter_blobs())
    cap.blob_path(h).unlink()
    os.mkfifo(cap.blob_path(h))
    with pytest.raises(CaptureFormatError, match="not a regular file"):
        cap.verify()
    assert "not a regular file" in api.info(repro)["payloads"]["damaged"][0]
    manifest = repro / "capture" / "manifest.json"
    manifest.unlink()
    os.mkfifo(manifest)
    with pytest.raises(CaptureFormatError, match="not a regular file"):
        Capture.open(repro)


def test_reproducer_json_fields_are_named(repro, capsys):
    (repro / "reproducer.json").write_text(json.dumps({"sources": {"kind": 3}}))
    s = api.info(repro)
    assert "reproducer.json: field sources.kind must be a string" in s["reproducer"]["error"]
    assert main(["info", str(repro)]) == 0  # the capture itself is fine; the text says what is wrong
    assert "WARNING     " in capsys.readouterr().out
    with pytest.raises(CaptureFormatError, match=r"reproducer.json: field sources.kind"):
        api.recompile(repro)


def test_build_json_fields_are_named(tmp_path):
    repro = tmp_path / "demo"
    shutil.copytree(DEMO, repro)
    build = repro / "source" / "build.json"
    record = json.loads(build.read_text())
    del record["compile_command"]
    build.write_text(json.dumps(record))
    with pytest.raises(CaptureFormatError, match=r"build.json: field compile_command is missing"):
        api.recompile(repro)
    record["compile_command"] = ["nvcc"]
    record["tu"] = "../../outside.cu"
    build.write_text(json.dumps(record))
    with pytest.raises(CaptureFormatError, match=r"build.json: field tu is malformed"):
        api.recompile(repro)


def test_build_json_naming_a_translation_unit_by_an_absolute_path_is_refused(tmp_path):
    """`tu` lies inside source/: a shared reproducer whose build.json names an absolute
    file (one that exists, outside the reproducer) is refused as malformed before anything
    is compiled or written, whatever the flags."""
    repro = tmp_path / "demo"
    shutil.copytree(DEMO, repro)
    outside = tmp_path / "outside.cu"
    outside.write_text("__global__ void k() {}\n")
    build = repro / "source" / "build.json"
    record = json.loads(build.read_text())
    record["tu"] = str(outside)
    build.write_text(json.dumps(record))
    variants = sorted(p.name for p in (repro / "variants").iterdir()) if (repro / "variants").is_dir() else []
    with pytest.raises(CaptureFormatError, match=r"build.json: field tu is malformed"):
        api.recompile(repro)
    now = sorted(p.name for p in (repro / "variants").iterdir()) if (repro / "variants").is_dir() else []
    assert now == variants


def test_store_marker_fields_are_named(repro):
    (repro / "capture" / "stored.json").write_text(json.dumps({"format": "kerncap-stored"}))
    cap = Capture.open(repro)
    for h in cap.iter_blobs():
        cap.blob_path(h).unlink()
    with pytest.raises(KerncapError, match=r"stored.json: field store is missing"):
        cap.verify()
    payloads = api.info(repro)["payloads"]
    assert "field store is missing" in payloads["marker"] and not payloads["ok"]
    assert payloads["summary"].startswith("the store marker: ") and "3 of 3 chunks" in payloads["summary"]


def test_store_marker_naming_a_path_with_a_nul_is_named(repro):
    # Found by test_fuzz.py: the OS refuses such a path with ValueError, not OSError.
    (repro / "capture" / "stored.json").write_text(json.dumps({"format": "kerncap-stored", "store": "/tmp/x\0y"}))
    cap = Capture.open(repro)
    for h in cap.iter_blobs():
        cap.blob_path(h).unlink()
    with pytest.raises(KerncapError, match=r"stored.json: field store holds a NUL character"):
        cap.verify()
