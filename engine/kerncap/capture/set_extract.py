"""A reproducer set from one run of the app (kerncap.reproducer.sets): the run's
capture directories (`capture-<N>/`, one per dispatch, sharing a blob pool) become the
members, weighted by their bucket's share of the kernel's in-app time; set.json is
written and the members' payloads move into the chunk store."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kerncap import __version__
from kerncap.capture.assemble import build_reproducer, captured_dirs, replace_output
from kerncap.capture.run import read_reports
from kerncap.core.units import human_bytes, short_kernel_name
from kerncap.reproducer.buckets import Bucket, time_shares
from kerncap.reproducer.format import Capture
from kerncap.reproducer.sets import SET_FILE, SET_FORMAT, SET_VERSION, ReproducerSet, store_members


@dataclass
class SetExtractResult:
    set_dir: Path
    set: ReproducerSet
    run_dir: Path
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    outcome: Any = None  # kerncap.capture.run.AppOutcome
    stored: dict[str, Any] = field(default_factory=dict)  # chunks, new objects, bytes added to the store

    @property
    def warnings(self) -> list[str]:
        return list(self.notes)


def _bucket_table(run_dir: Path, procs: list[dict]) -> tuple[list[dict], dict]:
    """The capturing process's bucket table (buckets-<pid>.json) and its header."""
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
    run_dir: Path, source_dir, build_dir, force: bool, procs: list[dict], env: dict[str, str] | None = None,
) -> SetExtractResult:
    """The run's capture directories -> a set at `output` (one rename at the end)."""
    table, header = _bucket_table(run_dir, procs)
    by_id = {int(b["id"]): b for b in table}
    stage = run_dir / "set"
    stage.mkdir()
    notes: list[str] = []
    members, demangled = _members(stage, run_dir, by_id, kernel, match, command, source_dir, build_dir, env, procs,
                                  notes)
    weights = _weights(members)

    everything = [Bucket.from_native(b, demangled) for b in table if b.get("kernel") == header.get("kernel")]
    captured = {m[2].key for m in members if m[2]}
    refused = _refused(everything, captured, buckets_mode, notes)
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
        "kernel": header.get("kernel") or (Capture.open(stage / members[0][0]).kernel.get("name") if members else None),
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
    result.stored = store_members(result.set, notes)
    if not header.get("final"):
        notes.append("time shares come from the activity records flushed before the capture ended the app "
                     "(--keep-running times the whole run)")
    if not demangled:
        notes.append(f"kernel {short_kernel_name(kernel)}: no member was captured")
    return result


def _members(stage: Path, run_dir: Path, by_id: dict[int, dict], kernel: str, match: str, command: list[str],
             source_dir, build_dir, env: dict[str, str] | None, procs: list[dict], notes: list[str]
             ) -> tuple[list[tuple[Path, int, Bucket | None]], str]:
    """Each capture directory of the run as a member reproducer under `stage` (its path,
    dispatch and bucket), and the kernel's demangled name."""
    members: list[tuple[Path, int, Bucket | None]] = []
    demangled = ""
    for k, cap_dir in enumerate(captured_dirs(run_dir)):
        dispatch = int(cap_dir.name.split("-", 1)[1])
        rel = Path("members") / str(k)
        record = build_reproducer(stage / rel, cap_dir, run_dir, kernel, match, dispatch, command, source_dir,
                                  build_dir, env, procs)
        demangled = demangled or str(record.get("demangled") or "")
        cap = Capture.open(stage / rel)
        bid = cap.provenance.get("bucket")
        raw = by_id.get(int(bid)) if isinstance(bid, int) else None
        bucket = Bucket.from_native(raw, demangled) if raw else None
        if bucket is None:
            notes.append(f"member {k} (dispatch {dispatch}): no bucket record; weighted equally")
        members.append((rel, dispatch, bucket))
        notes += [f"member {k}: {n}" for n in record.get("notes") or []]
    return members, demangled


def _refused(everything: list[Bucket], captured: set, buckets_mode: bool, notes: list[str]) -> list[dict]:
    """The buckets no member stands for, and why (each also a note)."""
    refused = []
    for b in everything:
        if b.key in captured:
            continue
        if buckets_mode or b.refused:
            reason = b.refused or "not captured before the app ended"
            refused.append({"bucket": b.to_dict(), "signature": b.signature(), "launches": b.launches,
                            "reason": reason})
            notes.append(f"bucket {b.signature()} ({b.launches} launch(es)) not captured: {reason}")
    return refused


def format_set_extract(r: SetExtractResult) -> str:
    """The text `kerncap extract` prints for a reproducer set."""
    s = r.set
    lines = [f"captured    {s.demangled}",
             f"            {len(s.members)} member(s) in one run: "
             + ", ".join(f"dispatch {m.dispatch} ({100 * m.weight:.0f}%)" for m in s.members)]
    for m in s.members:
        lines.append(f"  #{m.index} {100 * m.weight:5.1f}%  {m.signature}")
    for refused in s.refused:
        lines.append(f"  not captured: {refused.get('signature')}: {refused.get('reason')}")
    if r.stored.get("chunks"):
        lines.append(f"store       {r.stored['chunks']} chunks in {r.stored['store']}, "
                     f"{r.stored['objects_added']} new (+{human_bytes(r.stored['bytes_added'])})")
    lines.append(f"time        {r.seconds:.1f} s in all")
    lines.append(f"set         {r.set_dir}")
    q = shlex.quote(str(r.set_dir))
    lines.append(f"next        kerncap info {q}  |  kerncap validate {q}  |  kerncap replay {q}")
    return "\n".join(lines)
