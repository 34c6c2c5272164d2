"""Reproducer sets: several dispatches of one kernel, captured in one run of the app.

    <set>/set.json        which members, their buckets, counts and in-app time shares
    <set>/members/<k>/    one ordinary reproducer per captured dispatch
    <set>/source/         the editable source every member's variant is built from

`kerncap extract KERNEL --buckets` captures the first dispatch of every launch
signature (docs/selection.md), `--dispatch 3,17,40` those dispatches. The interposer
writes one capture directory per dispatch (sharing a blob pool, so memory the members
share is written once); here they become members, and their payloads move into the
chunk store (kerncap.store: the workspace's, or <set>/store for a set outside a
workspace), where identical chunks are stored once.

To every command a set is one thing: info, replay and validate run every member and
report per member; with a variant, the workload-weighted speedup (weights: each
member's share of the kernel's in-app time) and the worst member.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kerncap import __version__
from kerncap.buckets import Bucket, WorkloadSpeedup, time_shares, weighted_speedup
from kerncap.capture.format import Capture
from kerncap.errors import KerncapError

SET_FILE = "set.json"
SET_FORMAT = "kerncap-set"
SET_VERSION = 1
# Files of a member's source/ that describe that member's own launch: never synced
# from the set's source.
MEMBER_OWN_FILES = {"triton.json", "build.json"}


def is_set(path: str | os.PathLike) -> bool:
    return (Path(path) / SET_FILE).is_file()


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
        root = Path(path)
        mpath = root / SET_FILE
        try:
            manifest = json.loads(mpath.read_text())
        except FileNotFoundError:
            raise KerncapError(f"{root} is not a reproducer set (no {SET_FILE})",
                               "extract one with `kerncap extract KERNEL --buckets` or --dispatch N,M,...") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise KerncapError(f"{mpath} cannot be read ({exc})", "extract the set again") from None
        if manifest.get("format") != SET_FORMAT:
            raise KerncapError(f"{mpath} is not a kerncap set manifest", "extract the set again")
        if not isinstance(manifest.get("format_version"), int) or manifest["format_version"] > SET_VERSION:
            raise KerncapError(f"{mpath} has set format version {manifest.get('format_version')}; this kerncap "
                               f"reads {SET_VERSION}", "upgrade kerncap")
        try:
            members = [Member(index=int(m["index"]), path=root / m["dir"], dispatch=int(m["dispatch"]),
                              weight=float(m["weight"]),
                              bucket=Bucket.from_dict(m["bucket"]) if m.get("bucket") else None)
                       for m in manifest["members"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise KerncapError(f"{mpath} is malformed ({type(exc).__name__}: {exc})", "extract the set again") from None
        if not members:
            raise KerncapError(f"{mpath} lists no member", "extract the set again")
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


# -- assembling a set from one run -----------------------------------------------------------


@dataclass
class SetExtractResult:
    set_dir: Path
    set: ReproducerSet
    run_dir: Path
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    outcome: Any = None  # kerncap.run.AppOutcome
    stored: dict[str, Any] = field(default_factory=dict)  # chunks, new objects, bytes added to the store

    @property
    def warnings(self) -> list[str]:
        return list(self.notes)


def _bucket_table(run_dir: Path, procs: list[dict]) -> tuple[list[dict], dict]:
    """The capturing process's bucket table (buckets-<pid>.json) and its header."""
    from kerncap.run import read_reports

    reports = read_reports(run_dir, "buckets")
    capturing = {int(p.get("pid", 0)) for p in procs if p.get("captured")}
    mine = [r for r in reports if int(r.get("pid", 0)) in capturing] or reports
    if not mine:
        return [], {}
    report = max(mine, key=lambda r: len(r.get("buckets") or []))
    return list(report.get("buckets") or []), report


def _weights(members: list[tuple[Path, int, Bucket | None]]) -> list[float]:
    """Each member's share of the members' in-app time: its bucket's time, split evenly
    among members of one bucket (a dispatch list may hit a bucket twice)."""
    keys = [b.key if b else ("?", i) for i, (_, _, b) in enumerate(members)]
    distinct: dict[tuple, Bucket | None] = {}
    for k, (_, _, b) in zip(keys, members):
        distinct.setdefault(k, b)
    known = [b for b in distinct.values() if b is not None]
    shares = dict(zip([k for k, b in distinct.items() if b is not None], time_shares(known)))
    if len(known) < len(distinct):  # a member without a bucket record: equal weights, said in a note
        return [1.0 / len(members)] * len(members)
    return [shares[k] / keys.count(k) for k in keys]


def assemble_set(
    kernel: str, match: str, dispatches: Sequence[int], buckets_mode: bool, command: list[str], output: Path,
    run_dir: Path, source_dir, build_dir, force: bool, procs: list[dict], outcome,
) -> SetExtractResult:
    """The run's capture directories -> a set at `output` (one rename at the end)."""
    from kerncap.extract import build_reproducer, captured_dirs, replace_output
    from kerncap.profile import short_kernel_name

    table, header = _bucket_table(run_dir, procs)
    by_id = {int(b["id"]): b for b in table}
    stage = run_dir / "set"
    stage.mkdir()
    notes: list[str] = []
    members: list[tuple[Path, int, Bucket | None]] = []
    demangled = ""
    for k, cap_dir in enumerate(captured_dirs(run_dir)):
        dispatch = int(cap_dir.name.split("-", 1)[1])
        rel = Path("members") / str(k)
        record = build_reproducer(stage / rel, cap_dir, run_dir, kernel, match, dispatch, command, source_dir,
                                  build_dir)
        demangled = demangled or str(record.get("demangled") or "")
        cap = Capture.open(stage / rel)
        bid = cap.provenance.get("bucket")
        raw = by_id.get(int(bid)) if isinstance(bid, int) else None
        bucket = Bucket.from_native(raw, demangled) if raw else None
        if bucket is None:
            notes.append(f"member {k} (dispatch {dispatch}): no bucket record; weighted equally")
        members.append((rel, dispatch, bucket))
        notes += [f"member {k}: {n}" for n in record.get("notes") or []]
    weights = _weights(members)

    everything = [Bucket.from_native(b, demangled) for b in table if b.get("kernel") == header.get("kernel")]
    captured = {m[2].key for m in members if m[2]}
    refused = []
    for b in everything:
        if b.key in captured:
            continue
        if buckets_mode or b.refused:
            reason = b.refused or "not captured before the app ended"
            refused.append({"bucket": b.to_dict(), "signature": b.signature(), "launches": b.launches,
                            "reason": reason})
            notes.append(f"bucket {b.signature()} ({b.launches} launch(es)) not captured: {reason}")
    total = sum(b.time_ns for b in everything)
    covered = sum(b.time_ns for b in everything if b.key in captured)
    if buckets_mode:
        wanted = None
    else:
        got = {d for _, d, _ in members}
        missing = [d for d in dispatches if d not in got]
        wanted = list(dispatches)
        if missing:
            notes.append(f"dispatch(es) {', '.join(map(str, missing))} not captured (see the errors above)")

    member_rows = [
        {"index": k, "dir": str(rel), "dispatch": d, "weight": w, "bucket": b.to_dict() if b else None,
         "signature": b.signature() if b else None, "launches": b.launches if b else None,
         "time_ns": b.time_ns if b else None}
        for k, ((rel, d, b), w) in enumerate(zip(members, weights))
    ]
    if (stage / "members" / "0" / "source").is_dir():
        shutil.copytree(stage / "members" / "0" / "source", stage / "source", symlinks=True)
    manifest = {
        "format": SET_FORMAT, "format_version": SET_VERSION, "kerncap_version": __version__,
        "kernel": header.get("kernel") or (members and Capture.open(stage / members[0][0]).kernel.get("name")),
        "demangled": demangled,
        "match": {"pattern": kernel, "mode": match},
        "mode": "buckets" if buckets_mode else "dispatches",
        "dispatches": wanted,
        "command": command,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "members": member_rows,
        "refused": refused,
        "buckets_total": len(everything),
        "dispatches_counted": header.get("dispatches_counted"),
        # Times cover the whole run only when the app ran to its end.
        "times": "whole run" if header.get("final") else "until the capture ended the app",
        "coverage": covered / total if total else None,  # members' share of the kernel's in-app time
        "notes": notes,
    }
    tmp = stage / f".{SET_FILE}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, stage / SET_FILE)
    replace_output(stage, output, force)
    result = SetExtractResult(set_dir=output, set=ReproducerSet.open(output), run_dir=run_dir, notes=notes)
    result.stored = _store_members(result.set, notes)
    if not header.get("final"):
        notes.append("time shares come from the activity records flushed before the capture ended the app "
                     "(--keep-running times the whole run)")
    if not demangled:
        notes.append(f"kernel {short_kernel_name(kernel)}: no member was captured")
    return result


def store_for_set(root: Path) -> Path:
    """The workspace's store for a set under WORKSPACE/reproducers/, else the set's own
    (a set elsewhere stays one self-contained directory)."""
    root = Path(root).absolute()
    return root.parent.parent / "store" if root.parent.name == "reproducers" else root / "store"


def _store_members(s: ReproducerSet, notes: list[str]) -> dict[str, Any]:
    """Moves every member's payloads into the workspace's chunk store: memory the
    members share is stored once. A failure is a note; the members stay complete."""
    from kerncap.store import Store
    from kerncap.stored import store_reproducer

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
    from kerncap.stored import hydrate, missing_blobs, store_of

    have: dict[str, Path] = {}
    for m in s.members:
        cap = Capture.open(m.path)
        if store_of(cap.root) is not None:
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


# -- running every member ---------------------------------------------------------------------


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
    try:
        cubins = json.loads(path.read_text())["cubins"]
        return [Path(s.root / cubins[str(m.index)]) for m in s.members]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise KerncapError(f"{path} is not a set variant ({type(exc).__name__}: {exc})",
                           "pass a cubin or a variants/<n>.json written by `kerncap recompile SET`") from None


@dataclass
class MemberRun:
    member: Member
    baseline: Any = None    # ReplayResult of the captured cubin
    variant: Any = None     # ReplayResult of the variant
    validation: Any = None  # ValidationResult
    error: str | None = None

    @property
    def speedup(self) -> float | None:
        if self.baseline is None or self.variant is None or self.variant.median_ms <= 0:
            return None
        return self.baseline.median_ms / self.variant.median_ms


@dataclass
class SetRun:
    set: ReproducerSet
    runs: list[MemberRun]
    variant: str | None = None
    workload: WorkloadSpeedup | None = None
    device: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        return all(r.error is None and (r.validation is None or r.validation.passed) for r in self.runs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "set": str(self.set.root), "kernel": self.set.kernel, "variant": self.variant, "device": self.device,
            "passed": self.passed,
            "weighted_speedup": self.workload.weighted if self.workload else None,
            "worst_member": self.workload.worst_member if self.workload else None,
            "members": [{
                "index": r.member.index, "dispatch": r.member.dispatch, "weight": r.member.weight,
                "signature": r.member.signature, "error": r.error, "speedup": r.speedup,
                "baseline": r.baseline.to_dict() if r.baseline else None,
                "variant": r.variant.to_dict() if r.variant else None,
                "validation": r.validation.to_dict() if r.validation else None,
            } for r in self.runs],
        }


def run_set(
    s: ReproducerSet, *, variant: str | os.PathLike | None = None, replay: bool = True, validate: bool = False,
    iterations: int = 20, warmup: int = 3, flush_l2: bool = False, device: int = 0,
    atol: float | None = None, rtol: float | None = None, dtype: str | None = None,
    progress=None,
) -> SetRun:
    """Replays (baseline, and the variant when given) and/or validates every member, one
    replay server per member. A member that fails is reported, the others still run.
    `progress(member, text)` is called as members finish (the workbench's log)."""
    from kerncap.replay.client import ReplayClient

    cubins = member_cubins(s, variant)
    hydrate_set(s)
    runs: list[MemberRun] = []
    device_info = None
    for m, cubin in zip(s.members, cubins):
        run = MemberRun(m)
        try:
            with ReplayClient(m.path, device=device) as rc:
                device_info = device_info or (rc.info or {}).get("device")
                if validate:
                    run.validation = rc.validate(cubin=cubin, atol=atol, rtol=rtol, dtype=dtype)
                if replay:
                    run.baseline = rc.replay(iterations=iterations, warmup=warmup, flush_l2=flush_l2)
                    if cubin is not None:
                        run.variant = rc.replay(cubin=cubin, iterations=iterations, warmup=warmup, flush_l2=flush_l2)
        except KerncapError as exc:
            run.error = exc.message + (f" ({exc.hint})" if exc.hint else "")
        runs.append(run)
        if progress:
            progress(m, run)
    result = SetRun(s, runs, str(variant) if variant is not None else None, device=device_info)
    speedups = [r.speedup for r in runs]
    if variant is not None and replay and all(x is not None for x in speedups):
        result.workload = weighted_speedup(s.weights(), speedups)
    return result


# -- one variant for every member ------------------------------------------------------------


@dataclass
class SetVariant:
    path: Path  # <set>/variants/<n>.json
    cubins: dict[int, Path]
    seconds: float
    builds: int  # compiler runs (members sharing a captured cubin share one build)


def sync_source(s: ReproducerSet) -> None:
    """Copies the set's edited source over every member's source/ (files that describe
    a member's own launch stay the member's)."""
    if not s.source_dir.is_dir():
        raise KerncapError(f"{s.root} has no editable source ({s.source_dir} is missing)",
                           "extract with --source-dir (CUDA C++) or from a Triton app to get one")
    for m in s.members:
        dst_root = m.path / "source"
        for src in s.source_dir.rglob("*"):
            if src.is_dir() or src.name in MEMBER_OWN_FILES:
                continue
            dst = dst_root / src.relative_to(s.source_dir)
            if dst.is_file() and dst.read_bytes() == src.read_bytes():
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def recompile_set(s: ReproducerSet, config: str | None = None) -> SetVariant:
    """Builds the set's source once per distinct captured cubin (members of one cubin
    share the build; Triton members with their own autotune configs get their own)
    and writes <set>/variants/<n>.json naming each member's cubin."""
    from kerncap.recompile import recompile

    t0 = time.perf_counter()
    sync_source(s)
    built: dict[str, Path] = {}
    cubins: dict[int, Path] = {}
    for m in s.members:
        sha = Capture.open(m.path).kernel.get("module", {}).get("sha256") or str(m.index)
        if sha not in built:
            built[sha] = recompile(m.path, config).cubin
        cubins[m.index] = built[sha]
    s.variants_dir.mkdir(exist_ok=True)
    n = max((int(p.stem) for p in s.variants_dir.glob("*.json") if p.stem.isdigit()), default=0) + 1
    path = s.variants_dir / f"{n}.json"
    record = {"format": "kerncap-set-variant", "config": config, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "cubins": {str(i): os.path.relpath(c, s.root) for i, c in cubins.items()}}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, path)
    return SetVariant(path, cubins, time.perf_counter() - t0, len(built))
