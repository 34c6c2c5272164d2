"""Reproducers whose payloads live in the workspace store (`kerncap store` / `hydrate`),
on real H200 captures: blobs leave only once the store holds them, every reader gets
the same verified bytes, hydration restores the files byte for byte, damage is named."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from kerncap.cli import main
from kerncap.errors import CaptureFormatError, KerncapError
from kerncap.replay.client import ReplayClient
from kerncap.reproducer.format import Capture, capture_chunks
from kerncap.reproducer.pack import pack, unpack
from kerncap.reproducer.store import Store
from kerncap.reproducer.stored import (
    MARKER,
    default_store_for,
    hydrate,
    store_reproducer,
)

ROOT = Path(__file__).resolve().parent.parent
AXPY = ROOT / "tests" / "fixtures" / "captures" / "axpy_small"
DEMO = ROOT / "kerncap_tui" / "demo" / "reproducer"


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def blob_files(repro: Path) -> dict[str, bytes]:
    cap = Capture.open(repro)
    return {p.name: p.read_bytes() for p in (cap.root / "blobs").glob("*.bin")}


def test_store_moves_the_payloads_and_readers_still_get_them(tmp_path):
    repro = copy(AXPY, tmp_path / "axpy")
    before = blob_files(repro)
    r = store_reproducer(repro, Store(tmp_path / "store"))
    cap = Capture.open(repro)
    assert r.chunks == len(list(capture_chunks(cap))) == r.objects_added > 0
    assert r.bytes_freed == sum(len(b) for b in before.values()) and r.bytes_added > 0
    assert blob_files(repro) == {} and (cap.root / MARKER).is_file()
    cap.verify()  # every chunk read (and hash-checked) from the store
    for h, n in capture_chunks(cap):
        assert cap.read_chunk(h, n) == before[f"{h}.bin"]


def test_a_second_capture_adds_only_what_it_does_not_share(tmp_path):
    store = Store(tmp_path / "store")
    first = store_reproducer(copy(AXPY, tmp_path / "a"), store)
    again = store_reproducer(copy(AXPY, tmp_path / "b"), store)  # same app, same chunks
    other = store_reproducer(copy(DEMO, tmp_path / "demo"), store)
    assert first.objects_added > 0 and again.objects_added == 0 and again.bytes_added == 0
    assert other.objects_added > 0 and again.bytes_freed == first.bytes_freed


def test_hydrate_restores_the_blob_files_byte_for_byte(tmp_path):
    repro = copy(DEMO, tmp_path / "demo")
    before = blob_files(repro)
    store_reproducer(repro, Store(tmp_path / "store"))
    r = hydrate(repro)
    assert r.chunks == len(before) and r.bytes == sum(len(b) for b in before.values())
    assert blob_files(repro) == before
    assert hydrate(repro).chunks == 0  # nothing missing: nothing done
    assert not list((Capture.open(repro).root / "blobs").glob(".*.tmp"))


def test_replay_client_hydrates_before_it_starts_a_server(tmp_path):
    repro = copy(AXPY, tmp_path / "axpy")
    before = blob_files(repro)
    store_reproducer(repro, Store(tmp_path / "store"))
    ReplayClient(repro)._hydrate()  # what start() runs before spawning the server
    assert blob_files(repro) == before


def test_a_damaged_store_object_is_named_and_nothing_half_written_remains(tmp_path):
    repro = copy(DEMO, tmp_path / "demo")
    store = Store(tmp_path / "store")
    store_reproducer(repro, store)
    cap = Capture.open(repro)
    h, n = max(capture_chunks(cap), key=lambda x: x[1])
    obj = store.object_path(h)
    obj.write_bytes(obj.read_bytes()[:-7])
    with pytest.raises(CaptureFormatError, match=f"store object {obj}"):
        cap.verify()
    with pytest.raises(CaptureFormatError, match=f"store object {obj}"):
        hydrate(repro)
    assert not cap.blob_path(h).exists()
    assert not list((cap.root / "blobs").glob(".*"))  # no temp file left behind
    for p in (cap.root / "blobs").glob("*.bin"):  # what was restored is whole
        assert cap.read_chunk(p.stem, len(p.read_bytes())) == p.read_bytes()


def test_a_capture_missing_a_blob_is_not_stored_and_keeps_its_other_blobs(tmp_path):
    repro = copy(DEMO, tmp_path / "demo")
    cap = Capture.open(repro)
    victim = sorted((cap.root / "blobs").glob("*.bin"))[0]
    victim.unlink()
    rest = blob_files(repro)
    with pytest.raises(CaptureFormatError, match="is missing"):
        store_reproducer(repro, Store(tmp_path / "store"))
    assert blob_files(repro) == rest and not (cap.root / MARKER).exists()


def test_a_stored_reproducer_packs_and_unpacks_with_its_payloads(tmp_path):
    repro = copy(AXPY, tmp_path / "axpy")
    before = blob_files(repro)
    store_reproducer(repro, Store(tmp_path / "store"))
    out = pack(repro, tmp_path / "axpy.kcap")
    assert out.blobs == len(before)
    restored = tmp_path / "restored"
    unpack(tmp_path / "axpy.kcap", restored)
    assert blob_files(restored) == before
    assert not (Capture.open(restored).root / MARKER).exists()  # self-contained again
    Capture.open(restored).verify()


def test_a_store_marker_that_is_a_dangling_link_is_named_not_taken_for_local_payloads(tmp_path):
    """A stored reproducer whose stored.json became a link to nothing (a marker moved or
    deleted elsewhere) still has its payloads in a store: reading a chunk names the broken
    marker instead of calling the payload missing as if it were local. Mutation caught:
    a dangling link treated as no marker (payloads local)."""
    from kerncap.reproducer.store import store_of

    repro = copy(AXPY, tmp_path / "axpy")
    store_reproducer(repro, Store(tmp_path / "store"))
    cap = Capture.open(repro)
    marker = cap.root / MARKER
    marker.unlink()
    marker.symlink_to(tmp_path / "gone.json")
    with pytest.raises(CaptureFormatError, match=r"cannot read .*stored\.json"):
        store_of(cap.root)
    h, n = next(iter(capture_chunks(cap)))
    with pytest.raises(CaptureFormatError, match=r"stored\.json") as err:
        Capture.open(repro).read_chunk(h, n)
    assert "payload" not in err.value.message


def test_moving_to_another_store_needs_a_hydrate_first(tmp_path):
    repro = copy(AXPY, tmp_path / "axpy")
    store_reproducer(repro, Store(tmp_path / "one"))
    with pytest.raises(KerncapError, match="already in the store"):
        store_reproducer(repro, Store(tmp_path / "two"))
    hydrate(repro)
    store_reproducer(repro, Store(tmp_path / "one"))  # the same store again is fine


def test_default_store_is_the_reproducers_workspace(tmp_path):
    assert default_store_for(tmp_path / "ws" / "reproducers" / "k-1") == (tmp_path / "ws" / "store").absolute()
    assert default_store_for(tmp_path / "elsewhere").name == "store"


def test_cli_store_list_hydrate(tmp_path, capsys):
    ws = tmp_path / "ws"
    repro = copy(AXPY, ws / "reproducers" / "axpy")
    before = blob_files(repro)
    assert main(["store", str(repro)]) == 0
    out = capsys.readouterr().out
    assert f"stored {repro} in {(ws / 'store').absolute()}" in out and "freed in the reproducer" in out
    assert main(["list", "--workspace", str(ws)]) == 0
    assert "in store" in capsys.readouterr().out
    assert main(["info", str(repro)]) == 0
    capsys.readouterr()
    assert main(["hydrate", str(repro)]) == 0
    assert f"hydrated {repro}: {len(before)} chunks" in capsys.readouterr().out
    assert blob_files(repro) == before


def test_hydrate_writes_back_a_blob_file_cut_short_or_grown(tmp_path):
    """A hydrated blob file of the wrong length (a full disk, a copy cut short, an editor)
    is what `info` calls damaged: hydrate writes it back from the store, and only it.
    Mutation caught: the length not compared, so the short file stayed and the replay
    read it."""
    repro = copy(DEMO, tmp_path / "demo")
    before = blob_files(repro)
    store_reproducer(repro, Store(tmp_path / "store"))
    hydrate(repro)
    cap = Capture.open(repro)
    (short, n_short), (long, n_long) = list(capture_chunks(cap))[:2]
    cap.blob_path(short).write_bytes(before[f"{short}.bin"][:-1])
    cap.blob_path(long).write_bytes(before[f"{long}.bin"] + b"\0")
    r = hydrate(repro)
    assert (r.chunks, r.bytes) == (2, n_short + n_long)
    assert blob_files(repro) == before
    Capture.open(repro).verify()
