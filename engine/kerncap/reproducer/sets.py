"""Reproducer sets: several dispatches of one kernel, captured in one run of the app.

    <set>/set.json        which members, their buckets, counts and in-app time shares
    <set>/members/<k>/    one ordinary reproducer per captured dispatch
    <set>/source/         the editable source every member's variant is built from
    <set>/variants/<n>.json  a set variant: the cubin each member runs

`kerncap extract KERNEL --buckets` captures the first dispatch of every launch
signature (docs/selection.md), `--dispatch 3,17,40` those dispatches, in one run
(kerncap.capture.set_extract). Their payloads move into the chunk store
(kerncap.reproducer.store: the workspace's, or <set>/store for a set outside a
workspace), where memory the members share is stored once.

To every command a set is one thing: info, replay, validate and recompile run every
member and report per member (kerncap.replay.set_run, kerncap.recompile.set_variant);
with a variant, the workload-weighted speedup (weights: each member's share of the
kernel's in-app time) and the worst member. This module is the set on disk: reading
set.json and set variants (untrusted input: schema-checked, no path leaves the set),
storing and hydrating the members.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kerncap.core.schema import check, problem
from kerncap.errors import KerncapError
from kerncap.reproducer.buckets import Bucket
from kerncap.reproducer.format import Capture, read_json
from kerncap.reproducer.schemas import SET_JSON, SET_VARIANT_JSON
from kerncap.reproducer.sequence_variant import is_sequence_variant
from kerncap.reproducer.store import Store, store_of
from kerncap.reproducer.stored import hydrate, missing_blobs, store_reproducer

SET_FILE = "set.json"
SET_FORMAT = "kerncap-set"
SET_VARIANT_FORMAT = "kerncap-set-variant"
SET_VERSION = 1
MAX_SET_BYTES = 64 << 20
# Files of a member's source/ that describe that member's own launch: never synced
# from the set's source.
MEMBER_OWN_FILES = {"triton.json", "build.json"}
_HINT = "extract the set again"


def is_set(path: str | os.PathLike) -> bool:
    """Whether `path` is a reproducer set (holds set.json) rather than one reproducer."""
    return (Path(path) / SET_FILE).is_file()


def inside(root: Path, rel: str, what: str, where: Path) -> Path:
    """`root / rel`, refused when it would leave `root` (set.json travels: a hostile one
    must not point a replay or a copy at another directory)."""
    path = (root / rel).resolve()
    if Path(rel).is_absolute() or not path.is_relative_to(root.resolve()):
        raise KerncapError(f"{where}: {what} {rel!r} is outside the set {root}", _HINT)
    return root / rel


@dataclass
class Member:
    index: int
    path: Path
    dispatch: int
    weight: float  # share of the members' in-app time (sums to 1 over the set)
    bucket: Bucket | None

    @property
    def label(self) -> str:
        return f"#{self.index} dispatch {self.dispatch}"

    @property
    def signature(self) -> str:
        return self.bucket.signature() if self.bucket else "?"


@dataclass
class ReproducerSet:
    root: Path
    manifest: dict[str, Any]
    members: list[Member]

    @classmethod
    def open(cls, path: str | os.PathLike) -> "ReproducerSet":
        """The reproducer set at `path`: its members (each an ordinary reproducer) with their
        dispatch, bucket and weight (share of the kernel's in-app time), checked against the
        set format."""
        root = Path(path)
        mpath = root / SET_FILE
        if not mpath.exists():
            raise KerncapError(f"{root} is not a reproducer set (no {SET_FILE})",
                               "extract one with `kerncap extract KERNEL --buckets` or --dispatch N,M,...")
        manifest = read_json(mpath, MAX_SET_BYTES, _HINT, _HINT)
        if isinstance(manifest, dict) and isinstance(manifest.get("format_version"), int) \
                and manifest["format_version"] > SET_VERSION:
            raise KerncapError(f"{mpath} has set format version {manifest['format_version']}; this kerncap "
                               f"reads {SET_VERSION}", "upgrade kerncap")
        check(manifest, SET_JSON, mpath, _HINT)
        members = [Member(index=m["index"], path=inside(root, m["dir"], "member directory", mpath),
                          dispatch=m["dispatch"], weight=float(m["weight"]),
                          bucket=Bucket.from_dict(m["bucket"]) if m.get("bucket") else None)
                   for m in manifest["members"]]
        if len({m.index for m in members}) != len(members):
            raise KerncapError(f"{mpath} lists a member index twice", _HINT)
        return cls(root, manifest, members)

    @property
    def kernel(self) -> str:
        return str(self.manifest.get("kernel") or "")

    @property
    def demangled(self) -> str:
        return str(self.manifest.get("demangled") or self.kernel)

    @property
    def refused(self) -> list[dict[str, Any]]:
        return list(self.manifest.get("refused") or [])

    @property
    def source_dir(self) -> Path:
        return self.root / "source"

    @property
    def variants_dir(self) -> Path:
        return self.root / "variants"

    def weights(self) -> list[float]:
        return [m.weight for m in self.members]


def member_cubins(s: ReproducerSet, variant: str | os.PathLike | None) -> list[Path | None]:
    """The cubin each member runs: the captured one (None), one cubin for all, or a
    set variant (<set>/variants/<n>.json from `kerncap recompile SET`)."""
    if variant is None:
        return [None] * len(s.members)
    path = Path(variant)
    if not path.is_file():
        raise KerncapError(f"variant {path} does not exist", "build one with `kerncap recompile SET`")
    if path.suffix != ".json":
        return [path] * len(s.members)
    hint = "pass a cubin or a variants/<n>.json written by `kerncap recompile SET`"
    record = read_json(path, 1 << 20, hint, hint)
    wrong = problem(record, SET_VARIANT_JSON)
    if wrong:
        raise KerncapError(f"{path} is not a set variant ({wrong})", hint)
    cubins = record["cubins"]
    missing = [m.index for m in s.members if str(m.index) not in cubins]
    if missing:
        raise KerncapError(f"{path} names no cubin for member(s) {', '.join(map(str, missing))} of {s.root}", hint)
    return [inside(s.root, cubins[str(m.index)], "cubin", path) for m in s.members]


# -- the members' payloads in the chunk store ---------------------------------------------------


def store_for_set(root: Path) -> Path:
    """The workspace's store for a set under WORKSPACE/reproducers/, else the set's own
    (a set elsewhere stays one self-contained directory)."""
    root = Path(root).absolute()
    return root.parent.parent / "store" if root.parent.name == "reproducers" else root / "store"


def store_members(s: ReproducerSet, notes: list[str]) -> dict[str, Any]:
    """Moves every member's payloads into the set's chunk store: memory the members share
    is stored once. A failure is a note; the members stay complete."""
    store = Store(store_for_set(s.root))
    out = {"store": str(store.root.absolute()), "chunks": 0, "objects_added": 0, "bytes_added": 0, "bytes_freed": 0}
    try:
        for m in s.members:
            r = store_reproducer(m.path, store)
            out["chunks"] += r.chunks
            out["objects_added"] += r.objects_added
            out["bytes_added"] += r.bytes_added
            out["bytes_freed"] += r.bytes_freed
    except KerncapError as exc:
        notes.append(f"members not moved to the store: {exc.message}; they replay as they are")
    return out


def hydrate_set(s: ReproducerSet) -> None:
    """Writes back the members' blob files before a replay. A chunk another member
    already holds is hard-linked, not decompressed again: the members' shared memory
    stays one copy on disk."""
    have: dict[str, Path] = {}
    for m in s.members:
        cap = Capture.open(m.path)
        if store_of(cap.root) is not None:
            (cap.root / "blobs").mkdir(exist_ok=True)
            for h, _ in missing_blobs(cap):
                src = have.get(h)
                if src is None:
                    continue
                try:
                    os.link(src, cap.blob_path(h))
                except FileExistsError:
                    pass
                except OSError:
                    break  # no hard links here: hydrate copies
            hydrate(m.path)
        for h in cap.iter_blobs():
            path = cap.blob_path(h)
            if h not in have and path.is_file():
                have[h] = path


def expand(paths: list[str | os.PathLike], variant: str | os.PathLike | None
           ) -> tuple[list[Path], list[Path | None] | None]:
    """Reproducer directories with every set among `paths` replaced by its members
    (hydrated), and the cubin each runs when `variant` is a set variant
    (variants/<n>.json; None: `variant` itself for every one)."""
    dirs: list[Path] = []
    cubins: list[Path | None] = []
    # variants/<n>.json is a set's variant unless it is a sequence's (reproducer/sequence_variant.py)
    per_member = variant is not None and Path(variant).suffix == ".json" and not is_sequence_variant(variant)
    for p in map(Path, paths):
        if is_set(p):
            s = ReproducerSet.open(p)
            hydrate_set(s)
            dirs += [m.path for m in s.members]
            cubins += member_cubins(s, variant) if per_member else [None] * len(s.members)
        else:
            if per_member:
                raise KerncapError(f"{variant} is a set variant, and {p} is not a set",
                                   "pass the set it was built for, or a cubin")
            dirs.append(p)
            cubins.append(None)
    return dirs, cubins if per_member else None
