"""`kerncap info`: what a reproducer holds, as a dict (`--json`) or as text."""

from __future__ import annotations

import os
import shlex
from typing import Any

from kerncap.core.stack import differences, recorded_stack, running_stack, stack_lines
from kerncap.core.units import dim_tuple, driver_version_text, human_bytes, text_table
from kerncap.errors import KerncapError
from kerncap.reproducer.arrays import OLDER_CAPTURE
from kerncap.reproducer.closure_report import word_text
from kerncap.reproducer.format import NOT_SNAPSHOTTED_OLD, Capture
from kerncap.reproducer.payloads import check_payloads
from kerncap.reproducer.prune_report import PruneReport, by_reason_text
from kerncap.reproducer.record import read_record
from kerncap.reproducer import sequence_text


def summarize(path: str | os.PathLike, *, verify: bool = False) -> dict[str, Any]:
    """Everything `kerncap info` shows, as plain JSON-able data. "payloads" says whether
    every chunk file (or store object) and the cubin is there with the right size; with
    `verify` every hash is checked too."""
    cap = Capture.open(path)
    root = cap.reproducer_dir
    m = cap.manifest

    blob_sizes = _blob_sizes(cap)

    def stored(chunks_pre, chunks_post) -> int:
        return sum(blob_sizes.get(h, 0) for h in {*chunks_pre, *chunks_post} if h is not None)

    try:
        reproducer = read_record(root) or None
    except KerncapError as exc:
        reproducer = {"error": exc.message}

    prov = cap.provenance
    return {
        "path": str(root),
        "capture": str(cap.root),
        "format_version": m.get("format_version"),
        "kernel": _kernel(cap),
        "launch": _launch(cap),
        "params": _params(cap),
        "param_buffer_size": len(cap.param_buffer),
        "regions": [
            {"id": r.id, "base": r.base, "size": r.size, "api": r.api, "kind": r.kind, "written": r.written,
             "zero_fraction": r.zero_fraction, "stored_bytes": stored(r.pre, r.post)}
            for r in cap.regions
        ],
        "host_regions": [
            {"id": h.id, "base": h.base, "size": h.size, "api": h.api, "flags": h.flags,
             "device_pointer": h.device_pointer, "snapshotted": h.snapshotted, "written": h.written,
             "zero_fraction": h.zero_fraction, "why_not": h.why_not,
             "stored_bytes": stored(h.pre, h.post) if h.snapshotted else 0}
            for h in cap.host_regions
        ],
        "closure": cap.closure,
        "globals": [
            {"name": g.name, "section": g.section, "size": g.size, "address": g.address, "written": g.written}
            for g in cap.globals
        ],
        "arrays": [
            {"id": a.id, "dims": a.dims, "size": a.size, "api": a.api, "surface": a.surface, "written": a.written,
             "captured": a.captured, "why": a.why, "stored_bytes": stored(a.pre, a.post)}
            for a in cap.arrays
        ],
        "texture_objects": [
            {"id": o.id, "kind": o.kind, "handle": o.handle, "resource": o.resource_text, "params": o.params,
             "restorable": o.restorable, "why": o.why, "found_in": o.found_in}
            for o in cap.texture_objects
        ],
        "lacks": lacks(cap),
        "provenance": _provenance(prov),
        "sizes": {"logical": cap.logical_bytes, "stored": sum(blob_sizes.values())},
        "payloads": check_payloads(cap, verify=verify).as_dict(),
        "pruned": m.get("pruned"),  # kerncap prune: what the full capture held, why each region stayed
        "warnings": cap.warnings,
        "reproducer": reproducer,
        "stack": recorded_stack(reproducer if isinstance(reproducer, dict) else None, prov),
        "sequence": sequence_text.summary(cap),  # a sequence capture's launches and steps (docs/sequences.md)
    }


def _blob_sizes(cap: Capture) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for h in cap.iter_blobs():
        try:
            sizes[h] = cap.blob_path(h).stat().st_size
        except OSError:
            sizes[h] = 0
    return sizes


def _params(cap: Capture) -> list[dict[str, Any]]:
    regions = {r.id: r for r in cap.regions}
    params = []
    for p in cap.params:
        entry: dict[str, Any] = {"index": p.index, "offset": p.offset, "size": p.size, "hex": p.value.hex()}
        if p.region is not None:
            r = regions.get(p.region)
            entry["pointer"] = {"region": p.region, "offset": p.region_offset,
                                "base": r.base if r else None}
        if p.handle_object is not None:
            entry["handle"] = {"object": p.handle_object, "match": p.handle_match}
        params.append(entry)
    return params


def _kernel(cap: Capture) -> dict[str, Any]:
    return {
        "name": cap.kernel.get("name"),
        "demangled": cap.kernel.get("demangled"),
        "handle_kind": cap.kernel.get("handle_kind"),
        "launch_api": cap.kernel.get("launch_api"),
        "module": cap.kernel.get("module", {}),
        "attributes": cap.kernel.get("attributes", {}),
    }


def _launch(cap: Capture) -> dict[str, Any]:
    return {
        "grid": cap.launch.get("grid"),
        "block": cap.launch.get("block"),
        "shared_mem_bytes": cap.launch.get("shared_mem_bytes", 0),
        "stream": cap.launch.get("stream"),
        "cooperative": cap.launch.get("cooperative", False),
        "param_form": cap.launch.get("param_form"),
        "attributes": cap.launch.get("attributes", []),
        "graph": cap.launch.get("graph"),  # set when the dispatch ran as a node of a CUDA graph
        "nvtx": cap.launch.get("nvtx"),  # the NVTX ranges around the launch (when NVTX was followed)
    }


def _provenance(prov: dict[str, Any]) -> dict[str, Any]:
    return {
        "tool_version": prov.get("tool_version"),
        "gpu": prov.get("gpu", {}),
        "command": prov.get("command"),
        "cwd": prov.get("cwd"),
        "host": prov.get("host"),
        "pid": prov.get("pid"),
        "time": prov.get("time"),
        "dispatch_index": prov.get("dispatch_index"),
        "job": prov.get("job"),  # rank, world size, local rank of the capturing process
        "bucket": prov.get("bucket"),  # a set member's bucket id
        "match": prov.get("match"),
        "capture_seconds": prov.get("capture_seconds"),
        "env": prov.get("env", {}),
    }


def lacks(cap: Capture) -> list[str]:
    """What a capture from an older kerncap does not hold (it still opens and replays what it has)."""
    out = []
    if "arrays" not in cap.manifest:
        out.append(OLDER_CAPTURE)
    if any(h.why_not == NOT_SNAPSHOTTED_OLD for h in cap.host_regions):
        out.append("host memory contents: this kerncap recorded the app's pinned/registered host allocations "
                   "but did not snapshot them, so a kernel that reads them faults in replay and its writes there "
                   "are not compared; extract again with this kerncap")
    if "closure" not in cap.manifest:
        out.append("the closure check: parameter words pointing outside the captured memory were not looked for "
                   "(extract again to have them named)")
    return out


# -- text -----------------------------------------------------------------------------------


def _v(x) -> str:
    """A manifest value for display; '?' where the capture did not record it."""
    return "?" if x is None or x == "" else str(x)


def graph_origin_text(g: dict[str, Any]) -> str:
    """How a graph-launched dispatch ran, in one line (docs/graphs.md)."""
    depth = len(g.get("path") or [])
    where = "in a child graph, " if depth > 1 else ""
    text = (f"node {_v(g.get('node_index'))} of {_v(g.get('nodes'))} ({where}target node "
            f"{(g.get('target_index') or 0) + 1} of {_v(g.get('targets'))}) in launch {_v(g.get('exec_launch'))} "
            f"of executable graph #{_v(g.get('exec_id'))}, built by {_v(g.get('built_by'))}")
    if g.get("updates"):
        text += f", {g['updates']} update(s) since instantiation"
    text += f"; pre-state after {_v(g.get('prefix_nodes'))} earlier node(s)"
    skipped = g.get("skipped") or {}
    if skipped:
        text += " (not run by kerncap: " + ", ".join(f"{n} {k}" for k, n in skipped.items()) + ")"
    return text


def job_text(prov: dict[str, Any]) -> str:
    """'rank 1 of 2 (RANK), local rank 1' from provenance.job; '' outside a job."""
    job = prov.get("job") or {}
    rank = job.get("rank")
    if not isinstance(rank, int) or rank < 0:
        return ""
    size = job.get("world_size")
    text = f"rank {rank}" + (f" of {size}" if isinstance(size, int) and size >= 0 else "")
    text += f" ({job['rank_var']})" if job.get("rank_var") else ""
    local = job.get("local_rank")
    return text + (f", local rank {local}" if isinstance(local, int) and local >= 0 else "")


def launch_context(cap: Capture) -> str:
    """'rank 1 of 2 (RANK), local rank 1, NVTX forward.S1024/layer.5' for a selected capture."""
    parts = []
    job = job_text(cap.provenance)
    if job:
        parts.append(job)
    nvtx = (cap.launch.get("nvtx") or {}).get("path")
    if nvtx is not None:
        parts.append(f"NVTX {nvtx or '(no range)'}")
    return ", ".join(parts)


def nvtx_text(nvtx: dict[str, Any]) -> str:
    """The NVTX path of a launch, with the start/end ranges said apart from the stack."""
    path = nvtx.get("path") or "(no range open)"
    ranges = nvtx.get("ranges") or []
    return path + (f"  (start/end ranges: {', '.join(ranges)})" if ranges else "")


def format_summary(s: dict[str, Any]) -> str:
    """The text `kerncap info` prints: the kernel and its launch, the parameters, the
    regions, the globals, then where it came from."""
    out = _kernel_lines(s) + _param_lines(s) + _region_lines(s) + _global_lines(s) + _origin_lines(s) \
        + _record_lines(s)
    return "\n".join(out)


def _kernel_lines(s: dict[str, Any]) -> list[str]:
    k, launch, prov = s["kernel"], s["launch"], s["provenance"]
    module, attrs = k.get("module") or {}, k.get("attributes") or {}
    out = [f"reproducer  {s['path']}", ""]
    out.append(f"kernel      {k.get('demangled') or k.get('name')}")
    if k.get("demangled") and k.get("demangled") != k.get("name"):
        out.append(f"mangled     {k.get('name')}")
    out.append(f"launch      {_v(k.get('launch_api'))} ({_v(k.get('handle_kind'))}), grid {dim_tuple(launch['grid'])}, "
               f"block {dim_tuple(launch['block'])}, dynamic smem {launch['shared_mem_bytes']} B, stream {_v(launch['stream'])}"
               + (", cooperative" if launch.get("cooperative") else ""))
    for a in launch.get("attributes") or []:
        out.append(f"            launch attribute {a.get('id')}: {a.get('value', '')[:32]}…")
    graph = launch.get("graph")
    if isinstance(graph, dict):
        out.append(f"graph       {graph_origin_text(graph)}")
    if isinstance(launch.get("nvtx"), dict):
        out.append(f"nvtx        {nvtx_text(launch['nvtx'])}")
    if attrs:
        out.append("attributes  " + ", ".join(f"{name} {value}" for name, value in attrs.items()))
    selection = _v(module.get("selection"))
    if module.get("candidates") is not None:
        selection += f" ({module['candidates']} candidate cubin(s))"
    verified = module.get("verified") or {}
    if verified:
        selection += ", verified: " + ", ".join(f"{n} {'ok' if v else 'MISMATCH'}" for n, v in verified.items())
    out.append(f"module      {_v(module.get('cubin'))}  selection: {selection}")
    out.append("")
    if s.get("sequence"):  # the kernel and launch above are the sequence's first
        out += sequence_text.summary_lines(s["sequence"])
    return out


def _param_lines(s: dict[str, Any]) -> list[str]:
    launch = s["launch"]
    out: list[str] = []
    out.append(f"parameters ({len(s['params'])}, {_v(launch.get('param_form'))} form, {s['param_buffer_size']} bytes)")
    rows = []
    for p in s["params"]:
        ptr = p.get("pointer")
        target = f"region {ptr['region']} + {ptr['offset'] or 0:#x}" if ptr else ""
        handle = p.get("handle")
        if handle:
            target = f"texture object {handle['object']}" + (" (by value)" if handle.get("match") == "value" else "")
        hexval = p["hex"] if len(p["hex"]) <= 34 else p["hex"][:32] + "…"
        rows.append([str(p["index"]), str(p["offset"]), str(p["size"]), hexval, target])
    out += text_table(["#", "offset", "size", "bytes (hex)", "points to"], rows, right={0, 1, 2})
    out.append("")
    return out


def _region_lines(s: dict[str, Any]) -> list[str]:
    out: list[str] = []
    out.append(f"regions ({len(s['regions'])})")
    pruned = s.get("pruned") or {}
    why = pruned.get("reasons") or {}
    rows = [
        [str(r["id"]), f"{r['base']:#x}", human_bytes(r["size"]), r["api"], "yes" if r["written"] else "",
         f"{100 * r['zero_fraction']:.0f}%", human_bytes(r["stored_bytes"])]
        + ([why.get(str(r["id"]), "?")] if why else [])
        for r in s["regions"]
    ]
    headers = ["id", "base", "size", "api", "written", "zero", "stored"] + (["kept because"] if why else [])
    out += text_table(headers, rows, right={0, 2, 5, 6})
    out.append("")
    if s["host_regions"]:
        out.append(f"host regions ({len(s['host_regions'])}: pinned or registered host memory, replayed at its address)")
        rows = [
            [str(h["id"]), f"{h['base']:#x}", human_bytes(h["size"]), h["api"],
             "=" if h["device_pointer"] == h["base"] else (f"{h['device_pointer']:#x}" if h["device_pointer"] else "-"),
             ("yes" if h["written"] else "") if h["snapshotted"] else "?",
             human_bytes(h["stored_bytes"]) if h["snapshotted"] else "not snapshotted"]
            for h in s["host_regions"]
        ]
        out += text_table(["id", "base", "size", "api", "device ptr", "written", "stored"], rows, right={0, 2, 6})
        for h in s["host_regions"]:
            if not h["snapshotted"] and h["why_not"]:
                out.append(f"  host region {h['id']}: {h['why_not']}")
        out.append("")
    unresolved = (s.get("closure") or {}).get("unresolved") or []
    if unresolved:
        out.append(f"outside the closure ({len(unresolved)} parameter word(s) point at nothing captured; "
                   "a replay faults if the kernel dereferences them)")
        for u in unresolved[:8]:
            out.append(f"  {word_text(u)} = {u['value']:#x}: {u.get('reason', '')}")
        if len(unresolved) > 8:
            out.append(f"  and {len(unresolved) - 8} more")
        out.append("")
    return out


def _global_lines(s: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if s["globals"]:
        out.append(f"globals ({len(s['globals'])})")
        rows = [[g["name"], g["section"], str(g["size"]), "yes" if g["written"] else ""] for g in s["globals"]]
        out += text_table(["name", "section", "size", "written"], rows, right={2})
        out.append("")
    out += arrays_text(s)
    return out


def _origin_lines(s: dict[str, Any]) -> list[str]:
    prov = s["provenance"]
    gpu = prov.get("gpu") or {}
    cc = gpu.get("cc") or []
    out: list[str] = []
    sizes = s["sizes"]
    ratio = f" ({sizes['logical'] / sizes['stored']:.1f}x smaller)" if 0 < sizes["stored"] < sizes["logical"] else ""
    out.append(f"size        {human_bytes(sizes['logical'])} logical, {human_bytes(sizes['stored'])} stored{ratio}")
    payloads = s.get("payloads") or {}
    if payloads:
        out.append(f"payloads    {payloads['summary']}" if payloads["ok"] else f"DAMAGED     {payloads['summary']}")
    out.append(f"gpu         {_v(gpu.get('name'))}, sm_{''.join(str(c) for c in cc) or '?'}, "
               f"driver CUDA {driver_version_text(gpu.get('driver_version'))}, device {_v(gpu.get('ordinal'))}"
               + (f" ({gpu['uuid']})" if gpu.get("uuid") else ""))
    job = job_text(prov)
    if job:
        out.append(f"job         {job}")
    command = prov.get("command")
    if command:
        out.append(f"command     {shlex.join(command) if isinstance(command, list) else command}")
    if prov.get("cwd"):
        out.append(f"cwd         {prov['cwd']}")
    match = prov.get("match") or {}
    out.append(f"captured    {_v(prov.get('time'))} on {_v(prov.get('host'))} (pid {_v(prov.get('pid'))}), "
               f"dispatch {_v(prov.get('dispatch_index'))}"
               + (f" of {match.get('mode')} match {match.get('pattern')!r}" if match.get("pattern") else ""))
    secs = prov.get("capture_seconds") or {}
    if secs:
        out.append("timing      " + ", ".join(f"{k} {v:.2f} s" for k, v in secs.items() if isinstance(v, (int, float))))
    return out


def _record_lines(s: dict[str, Any]) -> list[str]:
    pruned = s.get("pruned") or {}
    out: list[str] = []
    rep = s.get("reproducer") or {}
    out += [f"{label:<11} {text}" for label, text in stack_lines(rep.get("provenance"))]
    if rep.get("error"):
        out.append(f"WARNING     {rep['error']}")
    src = rep.get("sources")
    if src:
        out.append(f"sources     {src.get('kind')}: {src.get('translation_unit') or src.get('reason', '')}"
                   + (f" ({src.get('method')}, {src.get('confidence')})" if src.get("method") else ""))
    if pruned:
        out.append(f"pruned      from {pruned.get('from', '?')}: held {pruned.get('regions_full', '?')} regions "
                   f"({human_bytes(pruned.get('logical_full', 0))} logical, "
                   f"{human_bytes(pruned.get('stored_full', 0))} stored); {pruned.get('regions_dropped', '?')} dropped")
        kept_for = by_reason_text(pruned.get("by_reason") or {})
        if kept_for:
            out.append(f"            {kept_for}")
    record = rep.get("prune")
    if isinstance(record, dict):
        out.append(f"prune       {PruneReport.from_json(record).summary()}")
    for note in rep.get("notes") or []:
        out.append(f"note        {note}")
    for w in s["warnings"]:
        out.append(f"WARNING     {w}")
    for w in s.get("lacks") or []:
        out.append(f"LACKS       {w}")
    return out


def arrays_text(s: dict[str, Any]) -> list[str]:
    """The CUDA arrays and texture/surface objects of a summary, as `info` prints them."""
    out: list[str] = []
    if s.get("arrays"):
        out.append(f"CUDA arrays ({len(s['arrays'])})")
        rows = [[str(a["id"]), a["dims"], human_bytes(a["size"]), a["api"], "yes" if a["written"] else "",
                 human_bytes(a["stored_bytes"]) if a["captured"] else f"not captured: {a['why']}"]
                for a in s["arrays"]]
        out += text_table(["id", "array", "size", "api", "written", "stored"], rows, right={0, 2})
        out.append("")
    if s.get("texture_objects"):
        out.append(f"texture and surface objects ({len(s['texture_objects'])})")
        rows = [[str(o["id"]), o["kind"], str(o["handle"]), o["resource"],
                 ", ".join(f"#{p}" for p in o["params"]) or "-",
                 "yes" if o["restorable"] else f"no: {o['why']}"] for o in s["texture_objects"]]
        out += text_table(["id", "kind", "handle", "resource", "argument", "replayable"], rows, right={0, 2})
        out.append("")
    return out


def stack_differences(reproducer: str | os.PathLike, running: dict[str, Any] | None = None) -> list[str]:
    """How the stack a reproducer recorded differs from `running` (default: this
    machine's): one line per differing fact (kerncap, driver, CUDA, GPU, torch, triton)."""
    return differences(summarize(reproducer)["stack"], running if running is not None else running_stack())
