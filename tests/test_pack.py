"""`kerncap pack` / `kerncap unpack` on real H200 reproducers: byte-identical round
trips, damaged pack files, refusals, and the CLI."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from kerncap.cli import main
from kerncap.errors import CaptureFormatError, KerncapError
from kerncap.reproducer.format import Capture, capture_chunks
from kerncap.reproducer.pack import (
    _HEADER,
    INDEX_NAME,
    MAGIC,
    PACK_VERSION,
    _write_frame,
    pack,
    unpack,
)
from kerncap.reproducer.store import compress

ROOT = Path(__file__).resolve().parent.parent
AXPY = ROOT / "tests" / "fixtures" / "captures" / "axpy_small"
DEMO = ROOT / "kerncap_tui" / "demo" / "reproducer"
FIXTURES = [AXPY, DEMO]


def tree(root: Path) -> dict[str, tuple]:
    """Every path under root: kind, bytes or link target, permission bits."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(p))
        elif p.is_dir():
            out[rel] = ("dir", stat.S_IMODE(st.st_mode))
        else:
            out[rel] = ("file", p.read_bytes(), stat.S_IMODE(st.st_mode))
    return out


@pytest.fixture(scope="module")
def demo_pack(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("packs") / "demo.kcap"
    pack(DEMO, out)
    return out


@pytest.mark.parametrize("src", FIXTURES, ids=["axpy_small", "demo"])
def test_round_trip_is_byte_identical(tmp_path, src):
    packed = pack(src, tmp_path / "r.kcap")
    assert packed.packed == (tmp_path / "r.kcap").stat().st_size and packed.ratio > 1
    assert packed.blobs == len(set(Capture.open(src).iter_blobs())) and not packed.left_out
    restored = unpack(tmp_path / "r.kcap", tmp_path / "restored")
    assert tree(tmp_path / "restored") == tree(src)
    cap = Capture.open(tmp_path / "restored")
    cap.verify()
    assert (restored.files, restored.blobs, restored.stored, restored.logical) == (
        packed.files, packed.blobs, packed.stored, packed.logical)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.kcap", "restored"]  # no temp or partial left


def test_empty_dirs_and_modes_survive_links_are_left_out(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(AXPY, src)
    (src / "source").mkdir()
    (src / "source" / "empty").mkdir()
    (src / "source" / "run.sh").write_text("#!/bin/sh\n")
    (src / "source" / "run.sh").chmod(0o755)
    (src / "source" / "latest").symlink_to("run.sh")
    (src / "capture" / "blobs" / "ffffffffffffffff.bin").write_bytes(b"orphan")  # no manifest entry uses it
    r = pack(src)
    assert r.path == tmp_path / "src.kcap"
    assert r.left_out == ["capture/blobs/ffffffffffffffff.bin (no manifest entry uses it)",
                          "source/latest (a symbolic link: unpack refuses links, so none are packed)"]
    moved = tmp_path / "moved"
    moved.mkdir()
    assert unpack(r.path.rename(moved / "src.kcap")).path == moved / "src"  # default: named after the file
    (src / "capture" / "blobs" / "ffffffffffffffff.bin").unlink()
    (src / "source" / "latest").unlink()
    assert tree(moved / "src") == tree(src)


def test_pack_refuses_overwrite_without_force(tmp_path):
    out = tmp_path / "a.kcap"
    out.write_bytes(b"keep me")
    with pytest.raises(KerncapError, match="already exists"):
        pack(AXPY, out)
    assert out.read_bytes() == b"keep me"
    pack(AXPY, out, force=True)
    assert out.read_bytes().startswith(MAGIC)


def test_pack_refuses_corrupt_capture(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(AXPY, src)
    blob = next((src / "capture" / "blobs").iterdir())
    data = bytearray(blob.read_bytes())
    data[7] ^= 0x10
    blob.write_bytes(bytes(data))
    with pytest.raises(CaptureFormatError, match=str(blob)):
        pack(src, tmp_path / "x.kcap")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no pack, no temp file
    with pytest.raises(KerncapError, match="not a directory"):
        pack(tmp_path / "nope")


def test_unpack_refuses_non_empty_dir_accepts_empty(tmp_path, demo_pack):
    target = tmp_path / "t"
    target.mkdir()
    (target / "x").write_text("mine")
    with pytest.raises(KerncapError, match="not empty"):
        unpack(demo_pack, target)
    assert [p.name for p in target.iterdir()] == ["x"]
    empty = tmp_path / "empty"
    empty.mkdir()
    unpack(demo_pack, empty)
    Capture.open(empty).verify()


def test_unpack_makes_the_directories_above_the_target_and_removes_them_on_failure(tmp_path, demo_pack):
    """`-o new/deeper/r` under a directory that does not exist yet unpacks there (ggml's
    reproducer, unpacked on the H200 under another path, failed with "No such file or
    directory" and a hint about free space); a damaged pack leaves none of them behind."""
    target = tmp_path / "new" / "deeper" / "r"
    unpack(demo_pack, target)
    Capture.open(target).verify()
    damaged = tmp_path / "damaged.kcap"
    damaged.write_bytes(demo_pack.read_bytes()[:200])
    with pytest.raises(KerncapError, match="truncated"):
        unpack(damaged, tmp_path / "other" / "deeper" / "r")
    assert not (tmp_path / "other").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.kcap", "new"]


def assert_clean_failure(tmp_path: Path, bad: Path, *needles: str) -> KerncapError:
    with pytest.raises(KerncapError) as exc:
        unpack(bad, tmp_path / "out")
    msg = exc.value.message
    assert str(bad) in msg and all(n in msg for n in needles), msg
    assert "pack" in (exc.value.hint or "")
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]
    return exc.value


def test_truncated_pack_files(tmp_path, demo_pack):
    data = demo_pack.read_bytes()
    for cut in [0, 5, 12, 20, 200, len(data) // 3, len(data) // 2, len(data) - 1]:
        bad = tmp_path / f"cut{cut}.kcap"
        bad.write_bytes(data[:cut])
        err = assert_clean_failure(tmp_path, bad)
        assert ("truncated" in err.message) or ("not a kerncap pack file" in err.message)


def frame_ends(data: bytes) -> list[tuple[str, int]]:
    """(name, offset just past it) of every frame of a pack file, in file order."""
    from kerncap.reproducer.pack import _NAME_LEN, _PAYLOAD_LEN

    out, at = [], _HEADER.size
    while at < len(data):
        (n,) = _NAME_LEN.unpack_from(data, at)
        name = data[at + _NAME_LEN.size: at + _NAME_LEN.size + n].decode()
        at += _NAME_LEN.size + n
        (size,) = _PAYLOAD_LEN.unpack_from(data, at)
        at += _PAYLOAD_LEN.size + size
        out.append((name, at))
    return out


def test_a_pack_cut_between_two_entries_is_refused(tmp_path, demo_pack):
    """A cut exactly at a frame's end reads as a shorter, well-formed pack: the entries its
    index lists and it no longer holds (a file, a chunk) are named as missing, whichever
    entry the cut falls after."""
    data = demo_pack.read_bytes()
    frames = frame_ends(data)
    assert frames[0][0] == INDEX_NAME and frames[-1][1] == len(data)
    kinds = {name.split("/")[0] for name, _ in frames[1:]}
    assert kinds == {"files", "blobs"}
    cuts = {}  # the last cut after an entry of each kind, and the one just after the index
    for name, end in frames[1:-1]:
        cuts[name.split("/")[0]] = end
    cuts["index"] = frames[0][1]
    for kind, end in cuts.items():
        bad = tmp_path / f"cut-{kind}.kcap"
        bad.write_bytes(data[:end])
        err = assert_clean_failure(tmp_path, bad)
        assert "missing, and" in err.message and "(truncated)" in err.message, (kind, err.message)


def test_a_pack_without_a_chunk_its_manifest_uses_is_refused(tmp_path, demo_pack):
    """A pack whose index and frames both leave out a chunk the manifest uses (well formed,
    nothing truncated: made or edited by something else) would unpack into a reproducer
    missing a payload: refused, naming the chunk, and nothing is left behind."""
    import io

    import zstandard

    data = demo_pack.read_bytes()
    frames = frame_ends(data)
    starts = [_HEADER.size] + [end for _, end in frames[:-1]]
    raw = {name: data[start:end] for (name, end), start in zip(frames, starts)}
    head = len(INDEX_NAME.encode()) + 2 + 8
    index = json.loads(zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw[INDEX_NAME][head:])).read())
    dropped = index["blobs"].pop(0)["hash"]
    assert dropped in dict(capture_chunks(Capture.open(DEMO)))
    bad = tmp_path / "lacking.kcap"
    with open(bad, "wb") as f:
        f.write(data[:_HEADER.size])
        _write_frame(f, INDEX_NAME, compress(json.dumps(index).encode()))
        for name, _ in frames[1:]:
            if name != f"blobs/{dropped}":
                f.write(raw[name])
    assert_clean_failure(tmp_path, bad, "the manifest uses 1 chunk(s) the pack does not hold", dropped)


def test_corrupt_blob_names_the_entry(tmp_path, demo_pack):
    data = bytearray(demo_pack.read_bytes())
    h = next(Capture.open(DEMO).iter_blobs())
    name = f"blobs/{h}".encode()
    at = data.index(name) + len(name) + 8 + 40  # inside that entry's payload
    data[at] ^= 0xFF
    bad = tmp_path / "flip.kcap"
    bad.write_bytes(bytes(data))
    assert_clean_failure(tmp_path, bad, f"blobs/{h}")


def test_corrupt_index_and_foreign_files(tmp_path, demo_pack):
    data = bytearray(demo_pack.read_bytes())
    data[_HEADER.size + 2 + len(INDEX_NAME) + 8 + 10] ^= 0xFF
    bad = tmp_path / "index.kcap"
    bad.write_bytes(bytes(data))
    assert_clean_failure(tmp_path, bad, INDEX_NAME)
    foreign = tmp_path / "foreign.kcap"
    foreign.write_text("hello, not a pack\n" * 10)
    assert_clean_failure(tmp_path, foreign, "not a kerncap pack file")


def crafted_pack(path: Path, entries: list[dict], frames: list[tuple[str, bytes]], version: int = PACK_VERSION) -> Path:
    index = {"format": "kerncap-pack", "format_version": 1, "blobs_dir": "capture/blobs", "entries": entries, "blobs": []}
    with open(path, "wb") as f:
        f.write(_HEADER.pack(MAGIC, version))
        _write_frame(f, INDEX_NAME, compress(json.dumps(index).encode()))
        for name, payload in frames:
            _write_frame(f, name, payload)
    return path


def test_paths_leaving_the_target_are_refused(tmp_path):
    for evil in ["../evil", "/etc/evil", "a/../../evil"]:
        entry = {"path": evil, "type": "file", "size": 1, "xxh64": "0" * 16, "mode": 0o644, "mtime": 0}
        bad = crafted_pack(tmp_path / "evil.kcap", [entry], [])
        assert_clean_failure(tmp_path, bad, "would leave the target directory")
    assert not (tmp_path.parent / "evil").exists()


@pytest.mark.parametrize("kind", ["dir", "file"])
def test_an_entry_among_the_chunks_is_refused(tmp_path, kind):
    """Only the pack's own chunks are restored into the capture's chunk directory: an
    index entry there (a directory named like a chunk, found by the pack-index fuzzer) is
    refused, so nothing no manifest uses is left among the chunks."""
    entry = {"path": "capture/blobs/00.bin", "type": kind, "mode": 0o755, "mtime": 0}
    if kind == "file":
        entry.update(size=1, xxh64="0" * 16)
    bad = crafted_pack(tmp_path / "among.kcap", [entry], [("files/capture/blobs/00.bin", compress(b"x"))] * (kind == "file"))
    assert_clean_failure(tmp_path, bad, "capture/blobs/00.bin", "holds only the pack's chunks")


def test_pack_leaves_out_a_directory_among_the_chunks(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(AXPY, src)
    (src / "capture" / "blobs" / "stray").mkdir()
    (src / "capture" / "blobs" / "stray" / "x.bin").write_bytes(b"x")
    packed = pack(src, tmp_path / "p.kcap")
    assert any(w.startswith("capture/blobs/stray (a directory among the chunks") for w in packed.left_out), \
        packed.left_out
    unpack(tmp_path / "p.kcap", tmp_path / "out")
    assert not (tmp_path / "out" / "capture" / "blobs" / "stray").exists()
    assert tree(tmp_path / "out" / "capture" / "blobs") == tree(AXPY / "capture" / "blobs")


def test_unknown_entry_and_newer_version(tmp_path):
    bad = crafted_pack(tmp_path / "extra.kcap", [], [("files/stray", compress(b"x"))])
    assert_clean_failure(tmp_path, bad, "files/stray", "not in the index")
    newer = crafted_pack(tmp_path / "newer.kcap", [], [], version=PACK_VERSION + 1)
    with pytest.raises(KerncapError, match="upgrade kerncap"):
        unpack(newer, tmp_path / "out")


def test_cli_pack_unpack(tmp_path, capsys):
    out = tmp_path / "a.kcap"
    assert main(["pack", str(AXPY), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "logical" in text and "stored" in text and "packed" in text and "x smaller" in text
    assert main(["pack", str(AXPY), "-o", str(out)]) == 3
    assert "already exists" in capsys.readouterr().err
    assert main(["unpack", str(out), "-o", str(tmp_path / "a"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["path"] == str(tmp_path / "a") and result["blobs"] == 3 and result["ratio"] > 1
    assert main(["info", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    out.write_bytes(out.read_bytes()[:-10])
    assert main(["unpack", str(out), "-o", str(tmp_path / "b")]) == 3
    err = capsys.readouterr().err
    assert "kerncap unpack: error:" in err and str(out) in err and "hint:" in err and "truncated" in err
    assert main(["unpack", str(tmp_path / "missing.kcap")]) == 3
    assert "cannot open" in capsys.readouterr().err


def test_cli_unpack_holds_a_pack_to_the_max_bytes_given(tmp_path, capsys):
    """`--max-bytes SIZE` is the limit the CLI applies, not only its usage check: a pack
    declaring more than SIZE is refused before anything is written, one of less unpacks."""
    out = tmp_path / "a.kcap"
    declared = pack(AXPY, out).logical
    assert 1024 < declared < 1 << 30
    assert main(["unpack", str(out), "-o", str(tmp_path / "small"), "--max-bytes", "1K"]) == 3
    err = capsys.readouterr().err
    assert "more than the 1.0 KiB kerncap unpacks (--max-bytes)" in err, err
    assert not (tmp_path / "small").exists()
    assert main(["unpack", str(out), "-o", str(tmp_path / "fits"), "--max-bytes", "1G"]) == 0
    assert main(["info", str(tmp_path / "fits")]) == 0
