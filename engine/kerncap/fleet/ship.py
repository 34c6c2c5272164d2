"""Getting a reproducer to a worker on another machine.

Two ways (docs/cluster.md):
  * a shared path: the reproducer lies at the same path on every worker (NFS, Lustre,
    a bind mount); tasks carry the path and nothing is copied;
  * shipping: the reproducer's own files travel with the task as a `Bundle` — its
    manifest, cubins, sources, variants and records, and its payload blobs unless they
    were moved to a chunk store (`kerncap store`), whose path every worker must then
    reach; the worker writes the bundle once into its cache directory
    (KERNCAP_WORKER_CACHE, default ~/.cache/kerncap/worker/<digest>/<name>) and
    hydrates the payloads from the store there.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kerncap.errors import KerncapError
from kerncap.reproducer.store import MARKER
from kerncap.reproducer.stored import hydrate

# Payload bytes a bundle may carry; a bigger reproducer must be stored first.
MAX_SHIPPED_BLOBS = 256 << 20
SKIPPED_DIRS = {".git", "build", "__pycache__"}


@dataclass
class Bundle:
    name: str                 # the reproducer directory's name
    digest: str               # sha256 over every (path, content): the cache key
    files: dict[str, bytes] = field(default_factory=dict)  # relative path -> bytes
    stored: bool = False      # payloads are in a store (hydrated on the worker)

    @property
    def size(self) -> int:
        return sum(len(b) for b in self.files.values())


def make_bundle(reproducer: str | os.PathLike) -> Bundle:
    """Everything a worker needs of `reproducer`, read into memory (see module doc)."""
    root = Path(reproducer)
    stored = (root / "capture" / MARKER).is_file()
    files: dict[str, bytes] = {}
    blob_bytes = 0
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIPPED_DIRS for part in rel.parts) or path.is_symlink() or not path.is_file():
            continue
        is_blob = rel.parts[:2] == ("capture", "blobs")
        if is_blob:
            blob_bytes += path.stat().st_size
            if blob_bytes > MAX_SHIPPED_BLOBS:
                raise KerncapError(
                    f"{root} holds more than {MAX_SHIPPED_BLOBS >> 20} MiB of payloads to ship to remote workers",
                    f"move them to a store every worker reaches (`kerncap store {root} --store /shared/store`), "
                    "or put the reproducer on a path every worker shares and drop --ship")
        files[rel.as_posix()] = path.read_bytes()
    h = hashlib.sha256()
    for rel, data in sorted(files.items()):
        h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return Bundle(name=root.name, digest=h.hexdigest()[:20], files=files, stored=stored)


def cache_dir() -> Path:
    return Path(os.environ.get("KERNCAP_WORKER_CACHE") or Path.home() / ".cache" / "kerncap" / "worker")


def materialize(bundle: Bundle) -> Path:
    """The bundle's reproducer in this worker's cache: written once (temp dir + rename, so
    a half-written copy is never used), hydrated from its store when it was stored."""
    target = cache_dir() / bundle.digest / bundle.name
    if not target.is_dir():
        stage = target.parent / f".{bundle.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        try:
            for rel, data in bundle.files.items():
                dest = stage / rel
                if not dest.resolve().is_relative_to(stage.resolve()):
                    raise KerncapError(f"bundle {bundle.name} names a file outside itself: {rel}")
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
            try:
                os.rename(stage, target)
            except OSError:
                if not target.is_dir():  # another task of this worker won the race: use its copy
                    raise
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    if bundle.stored:
        hydrate(target)
    return target
