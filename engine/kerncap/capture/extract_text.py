"""What `kerncap extract` prints about the reproducer it wrote; the shape of the capture
(one dispatch or a sequence) picks the text here, so the CLI tests none."""

from __future__ import annotations

from kerncap.capture.extract import ExtractResult
from kerncap.core.units import format_dim, human_bytes
from kerncap.reproducer.info import launch_context
from kerncap.reproducer.sequence_text import closing_lines, format_extract as format_sequence_extract


def format_extract(r: ExtractResult) -> str:
    """The text `kerncap extract` prints: a sequence's (sequence_text), or one dispatch's."""
    cap = r.capture
    if cap.sequence is not None:
        return format_sequence_extract(r)
    k, launch, prov = cap.kernel, cap.launch, cap.provenance
    written = [reg for reg in cap.regions if reg.written]
    written_text = ", ".join(f"#{reg.id} ({human_bytes(reg.size)})" for reg in written[:6])
    if len(written) > 6:
        written_text += f", … {len(written) - 6} more"
    lines = [
        f"captured    {k.get('demangled') or k.get('name')}",
        f"            dispatch {prov.get('dispatch_index', '?')} via {k.get('launch_api')}, grid "
        f"{format_dim(launch.get('grid', []))}, block {format_dim(launch.get('block', []))}, "
        f"dynamic smem {launch.get('shared_mem_bytes', 0)} B",
        f"memory      {len(cap.regions)} regions, {human_bytes(cap.logical_bytes)} logical, "
        f"{human_bytes(cap.stored_bytes)} stored; written: {written_text or 'none'}",
    ]
    if cap.globals:
        lines.append(f"globals     {len(cap.globals)} ({sum(g.written for g in cap.globals)} written)")
    if cap.arrays or cap.texture_objects:
        unrestorable = sum(not o.restorable for o in cap.texture_objects)
        lines.append(f"arrays      {len(cap.arrays)} CUDA arrays ({sum(a.written for a in cap.arrays)} written), "
                     f"{len(cap.texture_objects)} texture/surface objects"
                     + (f", {unrestorable} not replayable (see the warnings)" if unrestorable else ""))
    if cap.host_regions:
        snap = cap.snapshotted_host_regions
        lines.append(f"host        {len(cap.host_regions)} host region(s), {len(snap)} snapshotted "
                     f"({human_bytes(sum(h.size for h in snap))}, {sum(h.written for h in snap)} written)")
    unresolved = cap.closure.get("unresolved") or []
    if unresolved:
        lines.append(f"closure     {len(unresolved)} parameter word(s) point outside the captured memory "
                     "(warnings below; `kerncap info` lists them)")
    where = launch_context(cap)
    if where:
        lines.append(f"where       {where}")
    if r.sources:
        lines.append(f"sources     {r.sources.get('kind')}: "
                     f"{r.sources.get('translation_unit') or r.sources.get('reason', '')}")
    secs = prov.get("capture_seconds") or {}
    snap = f"snapshot {secs['total']:.2f} s, " if isinstance(secs.get("total"), (int, float)) else ""
    lines.append(f"time        {snap}{r.seconds:.1f} s in all")
    return "\n".join(lines + closing_lines(r))
