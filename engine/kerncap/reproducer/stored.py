"""Reproducers whose payloads live in the workspace's chunk store.

`store_reproducer(dir)` adds every chunk of a reproducer to the content-addressed store
(kerncap.reproducer.store: zstd, zero chunks elided, shared by every capture of the workspace, so
a second capture of the same app adds only what changed) and then removes the
reproducer's own `capture/blobs/*.bin`, leaving `capture/stored.json` that names the
store. The reproducer keeps its manifest, cubins, sources and history: `kerncap info`,
`list`, `prune`'s closure and `pack` read its chunks from the store (verified on
read). The native replay reads blob files, so `hydrate(dir)` (run by ReplayClient
before it starts a server) writes them back, each verified, each temp file + rename.

Blobs are removed only after every chunk the manifest names is present in the store,
so an interrupted `store` leaves a reproducer that still replays as it is.
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from kerncap.core.confined import Tree, TreeError, link_error, real_dir
from kerncap.core.fsio import fs_error, remove_dead_temps, write_atomic
from kerncap.errors import CaptureFormatError, KerncapError
from kerncap.reproducer.format import Capture, capture_chunks
from kerncap.reproducer.store import (
    DEFAULT_STORE,
    MARKER,
    MARKER_FORMAT,
    Store,
    marker_path,
    store_of,
)

__all__ = ["MARKER", "StoreResult", "HydrateResult", "add_capture", "default_store_for", "hydrate", "store_of",
           "store_reproducer"]


@dataclass
class StoreResult:
    path: Path
    store: Path
    chunks: int          # distinct non-zero chunks the manifest names
    objects_added: int   # of those, new in the store
    bytes_added: int     # compressed bytes the store grew by
    bytes_freed: int     # blob bytes removed from the reproducer

    def as_dict(self) -> dict:
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}


@dataclass
class HydrateResult:
    path: Path
    chunks: int    # blob files written
    bytes: int


def default_store_for(repro_dir: str | os.PathLike) -> Path:
    """`<workspace>/store` for a reproducer under `<workspace>/reproducers/`, else the
    default workspace's store."""
    repro = Path(repro_dir).absolute()
    if repro.parent.name == "reproducers":
        return repro.parent.parent / "store"
    return DEFAULT_STORE.absolute()


def add_capture(store: Store, capture: Capture | str | os.PathLike) -> tuple[int, int]:
    """Import every chunk of a capture into `store`; (objects added, bytes added).
    Chunks already present are skipped without being read."""
    cap = capture if isinstance(capture, Capture) else Capture.open(capture)
    return store.add(capture_chunks(cap), cap.read_chunk)  # read_chunk verifies


def missing_blobs(cap: Capture) -> list[tuple[str, int]]:
    """The chunks whose blob file is absent, or is not a plain file of the chunk's length
    (what `info` calls DAMAGED): hydrate writes those back from the store."""
    out = []
    for h, n in capture_chunks(cap):
        try:
            st = cap.blob_path(h).lstat()
        except FileNotFoundError:
            st = None
        if st is None or not stat.S_ISREG(st.st_mode) or st.st_size != n:
            out.append((h, n))
    return out


def _blob_problem(cap: Capture, h: str, n: int) -> str:
    path = cap.blob_path(h)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return f"no {path.name}"
    if not stat.S_ISREG(st.st_mode):
        return f"{path.name} is not a regular file"
    return f"{path.name} holds {st.st_size} bytes, expected {n}"


def _blobs_dir(cap: Capture, what: str) -> Path:
    """capture/blobs of a reproducer, checked to be real directories (a link there would
    redirect the writes of hydrate and the deletes of store out of the reproducer)."""
    base = cap.reproducer_dir if cap.root == cap.reproducer_dir / "capture" else cap.root
    rel = cap.root.relative_to(base) / "blobs"
    return real_dir(base, rel, create=True, what=what)


def store_reproducer(repro_dir: str | os.PathLike, store: Store | None = None) -> StoreResult:
    repro = Path(repro_dir)
    cap = Capture.open(repro)
    store = store or Store(default_store_for(repro))
    blobs = _blobs_dir(cap, "delete files")
    current = store_of(cap.root)
    if current is not None and current.root.absolute() != store.root.absolute():
        raise KerncapError(f"{repro}'s payloads are already in the store {current.root}",
                           f"run `kerncap hydrate {repro}` first to move it to {store.root}")
    chunks = list(capture_chunks(cap))
    objects, added = add_capture(store, cap)  # reads (and verifies) only chunks the store lacks
    absent = [h for h, _ in chunks if not store.has(h)]
    if absent:
        raise KerncapError(f"the store {store.root} lacks {len(absent)} chunk(s) of {repro} after adding it "
                           f"(first: {absent[0]}); nothing was removed", "check the store's disk and permissions")
    # The marker first, then the blobs go: a reader that finds a blob gone finds the
    # marker that names where it went (kerncap.reproducer.payloads, format.read_chunk).
    _write_json(marker_path(cap.root), {"format": MARKER_FORMAT, "store": str(store.root.absolute()),
                                        "chunks": len(chunks), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    freed = 0
    for h, _ in chunks:
        path = blobs / f"{h}.bin"
        try:
            freed += path.lstat().st_size
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise fs_error(exc, f"remove {path} (its chunk is safe in the store {store.root})") from None
    return StoreResult(path=repro, store=store.root, chunks=len(chunks), objects_added=objects, bytes_added=added,
                       bytes_freed=freed)


def hydrate(repro_dir: str | os.PathLike) -> HydrateResult:
    """Write back every blob file a stored reproducer lacks (verified against its hash),
    each through a temp file renamed into place, never through a link. A reproducer
    whose payloads are local is left as it is."""
    repro = Path(repro_dir)
    cap = Capture.open(repro)
    store = store_of(cap.root)
    missing = missing_blobs(cap)
    if not missing:
        return HydrateResult(path=repro, chunks=0, bytes=0)
    if store is None:
        raise CaptureFormatError(
            f"{repro}: {len(missing)} chunk file(s) missing or damaged (first: {_blob_problem(cap, *missing[0])}), "
            "and its payloads are in no store (it has no capture/stored.json) to write them back from",
            f"`kerncap info {repro}` lists them; unpack the reproducer again from its pack, or extract it again")
    blobs = _blobs_dir(cap, "write")
    remove_dead_temps(blobs)  # what a killed hydrate left
    written = 0
    try:
        with Tree(blobs) as tree:
            for h, n in missing:
                out = tree.create(f"{h}.bin", replace=True)
                try:
                    store.stream_into(h, n, out)  # verifies length and hash
                    tree.commit(out)
                except BaseException:
                    tree.discard(out)
                    raise
                written += n
    except TreeError as exc:
        raise link_error(blobs / exc.path) from None
    except OSError as exc:
        raise fs_error(exc, f"write {len(missing)} chunks ({sum(x for _, x in missing)} bytes) into {blobs}") from None
    return HydrateResult(path=repro, chunks=len(missing), bytes=written)


def _write_json(path: Path, record: dict) -> None:
    write_atomic(path, json.dumps(record, indent=1) + "\n")
