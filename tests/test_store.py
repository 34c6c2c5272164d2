"""The shared chunk store (kerncap.reproducer.store) on real H200 captures: round trips, integrity,
atomic writes, concurrent writers, and incremental adds."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import threading
from pathlib import Path

import pytest
import xxhash
from kerncap.errors import CaptureFormatError, KerncapError
from kerncap.reproducer.format import Capture, capture_chunks
from kerncap.reproducer.store import Store
from kerncap.reproducer.stored import add_capture

ROOT = Path(__file__).resolve().parent.parent
AXPY = ROOT / "tests" / "fixtures" / "captures" / "axpy_small"
DEMO = ROOT / "kerncap_tui" / "demo" / "reproducer"


def visible_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))


def all_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def chunks_of(path: Path) -> list[bytes]:
    cap = Capture.open(path)
    return [cap.read_chunk(h, n) for h, n in capture_chunks(cap)]


def test_put_get_round_trip(tmp_path):
    store = Store(tmp_path / "store")
    for data in chunks_of(AXPY) + chunks_of(DEMO):
        h = store.put(data)
        assert h == xxhash.xxh64_hexdigest(data) and store.has(h)
        assert store.object_path(h).name == f"{h}.zst"
        assert store.get(h, len(data)) == data
    assert store.size() == sum(p.stat().st_size for p in store.objects()) > 0


@pytest.mark.parametrize("how", ["hard link", "symbolic link"])
def test_an_object_with_another_name_is_refused(tmp_path, how):
    """A store object is read only as the plain, singly linked file the store wrote: a link
    could be changed (or lead) outside the store. Mutation caught: the link count not checked."""
    store = Store(tmp_path / "store")
    data = chunks_of(AXPY)[0]
    h = store.put(data)
    obj = store.object_path(h)
    other = tmp_path / "elsewhere.zst"
    if how == "hard link":
        os.link(obj, other)
    else:
        obj.rename(other)
        obj.symlink_to(other)
    with pytest.raises(CaptureFormatError, match=f"is a {how}; the store holds only plain files"):
        store.get(h, len(data))


def test_zero_chunks_are_never_stored(tmp_path):
    store = Store(tmp_path / "store")
    assert store.put(bytes(4096)) is None and store.put(b"") is None
    assert store.get(None, 10) == bytes(10)
    assert list(store.objects()) == [] and store.size() == 0


def test_add_capture_matches_capture_and_second_add_is_free(tmp_path):
    store = Store(tmp_path / "store")
    cap = Capture.open(AXPY)
    objects, nbytes = add_capture(store, cap)
    assert objects == len(list(cap.iter_blobs())) and nbytes == store.size()
    assert add_capture(store, AXPY) == (0, 0)
    for r in cap.regions:
        for chunks in (r.pre, r.post):
            for i, h in enumerate(chunks):
                n = cap.chunk_length(r.size, i)
                assert store.get(h, n) == cap.read_chunk(h, n)
    # A different app adds its own chunks, and only those.
    demo_objects, _ = add_capture(store, DEMO)
    assert demo_objects == len(set(Capture.open(DEMO).iter_blobs()) - set(cap.iter_blobs()))


def test_second_capture_of_same_app_adds_only_what_changed(tmp_path):
    # A second capture of axpy whose output region changed in one chunk.
    second = tmp_path / "second"
    shutil.copytree(AXPY, second)
    mpath = second / "capture" / "manifest.json"
    m = json.loads(mpath.read_text())
    region = next(r for r in m["regions"] if r["written"])
    old = region["post"][0]
    data = bytearray((second / "capture" / "blobs" / f"{old}.bin").read_bytes())
    data[0] ^= 0xFF
    new = xxhash.xxh64_hexdigest(bytes(data))
    (second / "capture" / "blobs" / f"{new}.bin").write_bytes(bytes(data))
    region["post"][0] = new
    mpath.write_text(json.dumps(m))

    store = Store(tmp_path / "store")
    add_capture(store, AXPY)
    before = store.size()
    objects, nbytes = add_capture(store, second)
    assert objects == 1 and store.size() == before + nbytes
    assert store.get(new, len(data)) == bytes(data)


@pytest.mark.parametrize("damage", ["flip", "truncate", "other-object"])
def test_corrupt_object_is_detected(tmp_path, damage):
    store = Store(tmp_path / "store")
    a, b = chunks_of(AXPY)[:2]
    ha, hb = store.put(a), store.put(b)
    path = store.object_path(ha)
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[len(raw) // 2] ^= 0x01
        path.write_bytes(bytes(raw))
    elif damage == "truncate":
        path.write_bytes(bytes(raw[: len(raw) // 2]))
    else:
        shutil.copyfile(store.object_path(hb), path)
    with pytest.raises(CaptureFormatError) as exc:
        store.get(ha, len(a))
    assert str(path) in exc.value.message and "corrupt" in exc.value.message
    assert str(path) in exc.value.hint
    with pytest.raises(CaptureFormatError, match="missing"):
        store.get("0123456789abcdef", 16)


def test_interrupted_write_leaves_no_visible_object(tmp_path, monkeypatch):
    store = Store(tmp_path / "store", fsync=True)
    data = chunks_of(AXPY)[0]

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(KerncapError) as exc:
        store.put(data)
    assert "store object" in exc.value.message and exc.value.hint
    h = xxhash.xxh64_hexdigest(data)
    assert not store.has(h) and list(store.objects()) == [] and all_files(store.root) == []
    monkeypatch.undo()
    # A writer killed mid-way leaves only a hidden temp file: invisible to readers.
    tmp = store.object_path(h).parent / f".{h}.zst.999.deadbeef.tmp"
    tmp.write_bytes(b"partial")
    assert not store.has(h) and list(store.objects()) == [] and store.size() == 0
    assert store.put(data) == h and store.get(h, len(data)) == data


def test_concurrent_threads(tmp_path):
    store = Store(tmp_path / "store")
    shared = chunks_of(AXPY)
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            for data in shared + [(i + 1).to_bytes(4, "little") * 1024]:
                store.put(data)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(list(store.objects())) == len(shared) + 8
    assert all_files(store.root) == visible_files(store.root)  # no temp file left behind
    for data in shared:
        assert store.get(xxhash.xxh64_hexdigest(data), len(data)) == data


def _process_writer(root: str, i: int) -> list[str]:
    store = Store(root)
    hashes = [store.put(d) for d in chunks_of(AXPY)]
    hashes.append(store.put(bytes([i + 1]) * 8192))
    add_capture(store, DEMO)
    return hashes


def test_concurrent_processes(tmp_path):
    root = tmp_path / "store"
    with multiprocessing.get_context("fork").Pool(4) as pool:
        results = pool.starmap(_process_writer, [(str(root), i) for i in range(4)])
    store = Store(root)
    distinct = {h for r in results for h in r}
    assert len(distinct) == len(chunks_of(AXPY)) + 4
    assert all(store.has(h) for h in distinct)
    assert all_files(root) == visible_files(root)
    assert add_capture(store, DEMO) == (0, 0) and add_capture(store, AXPY) == (0, 0)
    for data in chunks_of(AXPY) + chunks_of(DEMO):
        assert store.get(xxhash.xxh64_hexdigest(data), len(data)) == data


def test_bad_hash_is_refused(tmp_path):
    with pytest.raises(KerncapError, match="not a chunk hash"):
        Store(tmp_path).get("../../etc/passwd", 1)
