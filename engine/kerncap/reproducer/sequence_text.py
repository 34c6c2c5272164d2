"""What `info`, `extract` and `replay` say about a sequence capture (docs/sequences.md)."""

from __future__ import annotations

import shlex
from typing import Any

from kerncap.core.units import dim_tuple, human_bytes, short_kernel_name, text_table
from kerncap.reproducer.format import Capture
from kerncap.reproducer.record import read_record

MAX_LISTED = 60  # launches listed in text; --json has them all


def selection_text(seq) -> str:
    sel = seq.selection or {}
    mode = seq.mode
    if mode == "nvtx":
        return f"instance {sel.get('instance', 0)} of NVTX range {sel.get('nvtx')!r}" + (
            f" (path {sel['path']})" if sel.get("path") else "")
    if mode == "graph":
        g = seq.graph or {}
        return (f"launch {g.get('exec_launch', '?')} of executable graph #{g.get('exec_id', '?')} "
                f"({g.get('nodes', '?')} nodes, {g.get('built_by', '?')}), running dispatch {sel.get('dispatch', 0)} "
                f"of {sel.get('kernel')!r}")
    end = f"{sel['count']} launches" if sel.get("count") else f"up to the next launch of {sel.get('until')!r}"
    return f"from dispatch {sel.get('dispatch', 0)} of {sel.get('kernel')!r}, {end}"


def summary(cap: Capture) -> dict[str, Any] | None:
    """The sequence part of `kerncap info --json` (None for one dispatch)."""
    seq = cap.sequence
    if seq is None:
        return None
    record = {}
    try:
        record = read_record(cap.reproducer_dir) or {}
    except Exception:  # noqa: BLE001 - info shows the capture whatever its record says
        record = {}
    ops: dict[str, int] = {}
    for s in seq.steps:
        key = f"{s.op} {s.kind}".strip() if s.op == "copy" else s.op
        ops[key] = ops.get(key, 0) + 1
    return {
        "mode": seq.mode, "selection": seq.selection, "graph": seq.graph, "text": selection_text(seq),
        "launches": [{"index": l.index, "kernel": seq.kernels[l.kernel].demangled or seq.kernels[l.kernel].name,
                      "mangled": seq.kernels[l.kernel].name, "module": seq.kernels[l.kernel].module,
                      "grid": list(l.grid), "block": list(l.block), "shared_mem_bytes": l.shared_mem_bytes,
                      "stream": l.stream, "nvtx": l.nvtx} for l in seq.launches],
        "kernels": len(seq.kernels), "modules": len(seq.modules), "steps": ops, "streams": seq.streams,
        "events": seq.events, "dropped_waits": seq.dropped_waits, "notes": seq.notes, "seconds": seq.seconds,
        "freed": [r.id for r in cap.regions if r.sequence_state == "freed"],
        "allocated": [r.id for r in cap.regions if r.sequence_state == "allocated"],
        "kernel_entries": (record.get("sequence") or {}).get("kernels", []),
    }


def summary_lines(s: dict[str, Any]) -> list[str]:
    """The text `kerncap info` prints for a sequence, after its header."""
    steps = s["steps"]
    other = ", ".join(f"{n} {op}" for op, n in sorted(steps.items()) if op != "launch")
    out = [f"sequence    {len(s['launches'])} launches of {s['kernels']} kernels ({s['modules']} modules) on "
           f"{len(s['streams'])} stream(s)" + (f"; {other}" if other else ""),
           f"window      {s['text']}"]
    if s.get("allocated") or s.get("freed"):
        out.append(f"            regions allocated inside: {s.get('allocated') or 'none'}; freed inside (not compared): "
                   f"{s.get('freed') or 'none'}")
    rows = []
    for l in s["launches"][:MAX_LISTED]:
        rows.append([str(l["index"]), short_kernel_name(l["kernel"], 60), str(l["stream"]), dim_tuple(l["grid"]),
                     dim_tuple(l["block"]), str(l["shared_mem_bytes"]), l.get("nvtx") or ""])
    out += text_table(["#", "kernel", "stream", "grid", "block", "smem", "nvtx"], rows, right={0, 2, 5})
    if len(s["launches"]) > MAX_LISTED:
        out.append(f"  … {len(s['launches']) - MAX_LISTED} more launches (kerncap info --json lists them all)")
    entries = [e for e in s.get("kernel_entries") or [] if e.get("sources") == "cuda"]
    if entries:
        out.append("rebuild     " + ", ".join(f"{e['dir']} ({short_kernel_name(e['name'], 40)})" for e in entries)
                   + ": kerncap recompile SEQ --kernel K")
    for n in s.get("notes") or []:
        out.append(f"note        {n}")
    out.append("")
    return out


def format_extract(result) -> str:
    """The text `kerncap extract --sequence` prints."""
    cap = result.capture
    seq = cap.sequence
    s = summary(cap)
    secs = (cap.provenance.get("capture_seconds") or {})
    written = [r for r in cap.regions if r.written]
    lines = [
        f"captured    a sequence: {seq.summary()}",
        f"window      {s['text']}",
        f"memory      {len(cap.regions)} regions, {human_bytes(cap.logical_bytes)} logical, "
        f"{human_bytes(cap.stored_bytes)} stored; {len(written)} written by the sequence",
    ]
    kernels = sorted({k.demangled or k.name for k in seq.kernels})
    lines.append("kernels     " + ", ".join(short_kernel_name(k, 40) for k in kernels[:6])
                 + (f", … {len(kernels) - 6} more" if len(kernels) > 6 else ""))
    if isinstance(secs.get("total"), (int, float)):
        lines.append(f"time        snapshots {secs.get('pre', 0):.2f} + {secs.get('post', 0):.2f} s, window "
                     f"{secs.get('window', 0):.3f} s, {result.seconds:.1f} s in all")
    return "\n".join(lines + closing_lines(result, " --per-launch"))


def closing_lines(result, replay_flags: str = "") -> list[str]:
    """How every `kerncap extract` summary ends: what --prune dropped, where the
    reproducer (and a kept run dir) is, and the commands to run next."""
    lines = []
    prune = getattr(result, "prune", None)  # extract --prune
    if prune is not None:
        lines.append(f"prune       {prune.summary()}")
        if prune.by_reason_text():
            lines.append(f"            {prune.by_reason_text()}")
    lines.append(f"reproducer  {result.reproducer_dir}")
    if result.run_dir.exists():
        lines.append(f"run dir     {result.run_dir} (kept)")
    q = shlex.quote(str(result.reproducer_dir))
    lines.append(f"next        kerncap info {q}  |  kerncap validate {q}  |  kerncap replay {q}{replay_flags}")
    return lines


def launches_table(launches: list[dict[str, Any]]) -> list[str]:
    """`kerncap replay --per-launch`: each launch's median time and its share."""
    total = sum(l["median_ms"] for l in launches) or 1.0
    rows = [[str(l["launch"]), short_kernel_name(l["label"], 60), str(l["stream"]), f"{l['median_ms']:.4f}",
             f"{100 * l['median_ms'] / total:.1f}%"] for l in launches[:MAX_LISTED]]
    out = text_table(["#", "launch", "stream", "median ms", "share"], rows, right={0, 2, 3, 4})
    if len(launches) > MAX_LISTED:
        out.append(f"  … {len(launches) - MAX_LISTED} more (--json lists them all)")
    out.append(f"sum of launches {sum(l['median_ms'] for l in launches):.4f} ms (each timed between events on its "
               "stream; the whole sequence's time above includes the gaps)")
    return out


def localization_text(result: dict[str, Any]) -> str:
    """`kerncap validate --per-launch`: the first launch after which the variant's state departs."""
    n = result.get("launches_checked", 0)
    if not result.get("diverged"):
        return f"per launch  the variant's state agrees with the captured sequence after each of {n} launch(es)"
    lines = [f"per launch  the state first departs after {result['at']} ({n} launch(es) checked; every earlier one "
             "agrees)"]
    for c in result.get("checks", [])[:8]:
        first = c.get("first_mismatches") or []
        at = f", first at +{first[0][0]:#x}" if first else ""
        lines.append(f"            {c['name']} ({c['base']:#x}, {human_bytes(c['size'])}): "
                     f"{c['mismatched_bytes']} bytes differ{at}")
    return "\n".join(lines)
