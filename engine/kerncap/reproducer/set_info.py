"""Reproducer sets for people: what `kerncap info SET` shows (kerncap.reproducer.sets),
one line per member with its weight."""

from __future__ import annotations

import shlex
from typing import Any

from kerncap.errors import KerncapError
from kerncap.reproducer.format import Capture
from kerncap.reproducer.payloads import check_payloads
from kerncap.reproducer.sets import ReproducerSet


def summarize_set(s: ReproducerSet, *, verify: bool = False) -> dict[str, Any]:
    """`kerncap info SET --json`; every member's payloads checked (`verify`: hashes too),
    "payloads_ok" when all are complete."""
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
            payloads = check_payloads(cap, verify=verify)
            row["payloads"] = "ok" if payloads.ok else payloads.summary()
        except KerncapError as exc:
            row["error"] = exc.message
        members.append(row)
    # "set": true tells a set's document from a reproducer's, in the CLI's --json and MCP's info alike
    return {"set": True, "path": str(s.root), "kernel": s.kernel, "demangled": s.demangled, "mode": m.get("mode"),
            "match": m.get("match"), "command": m.get("command"), "created": m.get("created"),
            "members": members, "refused": s.refused, "buckets_total": m.get("buckets_total"),
            "coverage": m.get("coverage"), "times": m.get("times"), "notes": m.get("notes") or [],
            "payloads_ok": all(r.get("payloads") == "ok" for r in members)}


def format_set_info(d: dict[str, Any]) -> str:
    """The text `kerncap info SET` prints for a summary from `summarize_set` (api.set_info; SetInfo.text)."""
    out = [f"reproducer set  {d['path']}", "",
           f"kernel      {d.get('demangled') or d.get('kernel')}",
           f"members     {len(d['members'])} of {d.get('buckets_total') or '?'} bucket(s) "
           f"({'one per launch signature' if d.get('mode') == 'buckets' else 'the dispatches asked for'})"]
    if d.get("coverage") is not None:
        out.append(f"coverage    the members' buckets hold {100 * d['coverage']:.1f}% of the kernel's in-app time "
                   f"({d.get('times')})")
    command = d.get("command")
    if command:
        out.append(f"command     {shlex.join(command) if isinstance(command, list) else command}")
    out += ["", "  #  weight  dispatch  launches  signature"]
    for m in d["members"]:
        launches = "?" if m.get("launches") is None else f"{m['launches']:,}"
        out.append(f"  {m['index']:>1}  {100 * m['weight']:5.1f}%  {m['dispatch']:>8}  {launches:>8}  {m['signature']}")
        if m.get("error"):
            out.append(f"     error: {m['error']}")
        elif m.get("payloads") not in (None, "ok"):
            out.append(f"     payloads: {m['payloads']}")
    for r in d.get("refused") or []:
        out.append(f"  -  not captured ({r.get('launches', '?')} launch(es)): {r.get('signature')}: {r.get('reason')}")
    out.append("")
    out.append("each member is a reproducer: kerncap info " + shlex.quote(d["members"][0]["path"]) + " shows one")
    return "\n".join(out)
