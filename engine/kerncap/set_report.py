"""Reproducer sets for people: what `extract`, `info`, `replay` and `validate` print
for a set (kerncap.sets), one line per member with its weight."""

from __future__ import annotations

import shlex
from typing import Any

from kerncap.capture.format import Capture
from kerncap.errors import KerncapError
from kerncap.info import human_bytes
from kerncap.profile import short_kernel_name
from kerncap.replay.devices import describe as describe_device
from kerncap.replay.results import format_ms, time_unit
from kerncap.sets import ReproducerSet, SetExtractResult, SetRun


def summarize_set(s: ReproducerSet) -> dict[str, Any]:
    """`kerncap info SET --json`."""
    m = s.manifest
    members = []
    for member in s.members:
        row: dict[str, Any] = {"index": member.index, "path": str(member.path), "dispatch": member.dispatch,
                               "weight": member.weight, "signature": member.signature,
                               "launches": member.bucket.launches if member.bucket else None}
        try:
            cap = Capture.open(member.path)
            row.update(grid=cap.launch.get("grid"), block=cap.launch.get("block"), logical=cap.logical_bytes,
                       nvtx=(cap.launch.get("nvtx") or {}).get("path"), job=cap.provenance.get("job"))
        except KerncapError as exc:
            row["error"] = exc.message
        members.append(row)
    return {"path": str(s.root), "kernel": s.kernel, "demangled": s.demangled, "mode": m.get("mode"),
            "match": m.get("match"), "command": m.get("command"), "created": m.get("created"),
            "members": members, "refused": s.refused, "buckets_total": m.get("buckets_total"),
            "coverage": m.get("coverage"), "times": m.get("times"), "notes": m.get("notes") or []}


def format_set_info(d: dict[str, Any]) -> str:
    out = [f"reproducer set  {d['path']}", "",
           f"kernel      {d.get('demangled') or d.get('kernel')}",
           f"members     {len(d['members'])} of {d.get('buckets_total') or '?'} bucket(s) "
           f"({'one per launch signature' if d.get('mode') == 'buckets' else 'the dispatches asked for'})"]
    if d.get("coverage") is not None:
        out.append(f"coverage    the members' buckets hold {100 * d['coverage']:.1f}% of the kernel's in-app time "
                   f"({d.get('times')})")
    if d.get("command"):
        out.append(f"command     {shlex.join(d['command'])}")
    out += ["", "  #  weight  dispatch  launches  signature"]
    for m in d["members"]:
        launches = "?" if m.get("launches") is None else f"{m['launches']:,}"
        out.append(f"  {m['index']:>1}  {100 * m['weight']:5.1f}%  {m['dispatch']:>8}  {launches:>8}  {m['signature']}")
        if m.get("error"):
            out.append(f"     error: {m['error']}")
    for r in d.get("refused") or []:
        out.append(f"  -  not captured ({r.get('launches', '?')} launch(es)): {r.get('signature')}: {r.get('reason')}")
    out.append("")
    out.append("each member is a reproducer: kerncap info " + shlex.quote(d["members"][0]["path"]) + " shows one")
    return "\n".join(out)


def format_set_extract(r: SetExtractResult) -> str:
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


def format_set_run(run: SetRun) -> str:
    s = run.set
    lines = [f"{s.demangled}: {len(run.runs)} member(s)"
             + (f" on {describe_device(run.device)}" if run.device else "")
             + (f", variant {run.variant}" if run.variant else "")]
    timed = [r.baseline.median_ms for r in run.runs if r.baseline]
    unit = time_unit(min(timed)) if timed else "us"
    for r in run.runs:
        m = r.member
        head = f"  #{m.index} {100 * m.weight:5.1f}%  dispatch {m.dispatch:<6}"
        if r.error:
            lines.append(f"{head}  ERROR {r.error}")
            continue
        parts = []
        if r.validation is not None:
            parts.append("PASS" if r.validation.passed else f"FAIL ({len(r.validation.failures)} differ)")
        if r.baseline is not None:
            parts.append(f"baseline {format_ms(r.baseline.median_ms, unit)}")
        if r.variant is not None:
            parts.append(f"variant {format_ms(r.variant.median_ms, unit)} ({r.speedup:.2f}x)")
        lines.append(f"{head}  {'  '.join(parts)}  {short_kernel_name(m.signature, 60)}")
    if run.workload:
        worst = run.runs[run.workload.worst_member].member
        lines.append(f"weighted speedup {run.workload.weighted:.3f}x over the workload (weights: each member's "
                     f"share of in-app time); worst member #{worst.index} "
                     f"{run.workload.speedups[run.workload.worst_member]:.2f}x ({worst.signature})")
    if any(r.validation is not None or r.error for r in run.runs):
        failed = [r.member.index for r in run.runs if r.error or (r.validation and not r.validation.passed)]
        lines.append("all members PASS" if not failed else f"FAIL: member(s) {', '.join(map(str, failed))}")
    return "\n".join(lines)
