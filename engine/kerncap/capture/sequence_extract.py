"""`kerncap extract --sequence`: a run of launches captured as one reproducer (docs/sequences.md).

What opens and closes the window (`SequenceRequest.mode`):

* ``nvtx``: every launch of one instance of an NVTX range (``--nvtx PATH``; ``--dispatch N``
  picks the N-th instance, from 0); no kernel name needed;
* ``graph``: the whole launch of the executable CUDA graph in which dispatch N of KERNEL runs;
* ``run``: the launches from dispatch N of KERNEL on, ``--count C`` of them or up to and
  including the next launch of a kernel matching ``--until PATTERN``.

The reproducer is an ordinary one to `info`, `replay`, `validate`, `pack` and `store` (its
capture/ holds sequence.json beside the manifest) plus one *kernel entry* per distinct
kernel, `kernels/<k>/` (that kernel's first launch, its cubin, its sources with
--source-dir), which `kerncap recompile SEQ --kernel K` rebuilds.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kerncap.capture.assemble import build_reproducer, replace_output
from kerncap.capture.selection import Selection, closest
from kerncap.errors import KerncapError, UsageError
from kerncap.reproducer.format import Capture
from kerncap.recompile.selfcontained import finish_sources
from kerncap.sources import attach_sources

SEQUENCE_MODES = ("nvtx", "graph", "run")
KERNELS_DIR = "kernels"
MEMBER_KEY = "sequence_member"  # a kernel entry's manifest: {"launch": i, "kernel": k}


@dataclass(frozen=True)
class SequenceRequest:
    mode: str
    count: int | None = None   # run: launches in the window
    until: str | None = None   # run: the window ends with the next launch of a kernel matching it

    def check(self, kernel: str, selection: Selection, dispatches: list[int], set_mode: bool) -> None:
        if self.mode not in SEQUENCE_MODES:
            raise UsageError(f"--sequence {self.mode!r}", f"use one of: {', '.join(SEQUENCE_MODES)}")
        if set_mode:
            raise UsageError("--sequence captures one window; a dispatch list or --buckets makes a set",
                             "pass one --dispatch")
        if self.mode == "nvtx" and selection.nvtx is None:
            raise UsageError("--sequence nvtx needs --nvtx PATH (the range whose instance is captured)",
                             "e.g. --sequence nvtx --nvtx 'step.3/layer.5' --dispatch 0")
        if self.mode != "nvtx" and not kernel:
            raise UsageError(f"--sequence {self.mode} needs KERNEL: the window starts at (graph: the graph launch "
                             "running) dispatch N of it", "pass the kernel pattern and --dispatch N")
        if self.mode == "run" and not self.count and not self.until:
            raise UsageError("--sequence run needs --count C or --until PATTERN (where the run ends)",
                             "e.g. --sequence run --count 40")
        if self.mode != "run" and (self.count or self.until):
            raise UsageError("--count and --until bound a run (--sequence run)", "drop them, or use --sequence run")
        if self.count is not None and self.count < 1:
            raise UsageError(f"--count {self.count}: a run has at least one launch", "pass --count 1 or more")

    def settings(self) -> dict[str, str]:
        out = {"KERNCAP_SEQUENCE": self.mode}
        if self.count:
            out["KERNCAP_SEQ_COUNT"] = str(self.count)
        if self.until:
            out["KERNCAP_SEQ_UNTIL"] = self.until
        return out

    def describe(self, kernel: str, dispatch: int, selection: Selection) -> str:
        if self.mode == "nvtx":
            return f"instance {dispatch} of the NVTX range {selection.nvtx!r}"
        if self.mode == "graph":
            return f"the graph launch running dispatch {dispatch} of {kernel!r}"
        end = f"{self.count} launches" if self.count else f"up to the next launch of {self.until!r}"
        return f"the run from dispatch {dispatch} of {kernel!r}, {end}"


# -- assembling ----------------------------------------------------------------------------------


def kernel_entry_manifest(cap: Capture, kernel: int) -> dict:
    """A one-dispatch manifest of the sequence kernel's first launch: what recompile reads
    (kernel, cubin, parameter layout, module globals). It holds no regions: a kernel entry
    is rebuilt, never replayed alone (its manifest says whose entry it is)."""
    seq = cap.sequence
    assert seq is not None
    first = next(l for l in seq.launches if l.kernel == kernel)
    k = seq.kernels[kernel]
    module = seq.modules[k.module]
    m = cap.manifest
    out = {key: m[key] for key in ("format", "format_version", "complete", "chunk_size", "hash", "provenance") if key in m}
    out["kernel"] = {"name": k.name, "demangled": k.demangled, "launch_api": first.api,
                     "module": {"cubin": module.cubin, "sha256": module.sha256}}
    raw = json.loads((cap.root / "sequence.json").read_text())["launches"][first.index]
    out["launch"] = {key: raw[key] for key in ("grid", "block", "shared_mem_bytes", "stream", "cooperative",
                                                "attributes", "param_form") if key in raw}
    out["params"] = [{key: p[key] for key in ("index", "offset", "size", "value")} for p in raw["params"]]
    out["param_buffer"] = raw["param_buffer"]
    out["regions"], out["host_regions"] = [], []
    out["globals"] = [g for i, g in enumerate(m.get("globals", [])) if i in set(module.globals)]
    out["warnings"] = [f"a kernel entry of the sequence in ../..: launch {first.index} of it; rebuilt with "
                       "`kerncap recompile SEQ --kernel`, replayed only as part of the sequence"]
    out["triton"] = None
    out[MEMBER_KEY] = {"launch": first.index, "kernel": kernel}
    return out


def write_kernel_entries(stage: Path, source_dir: Path | None, build_dir: Path | None, notes: list[str]) -> list[dict]:
    """kernels/<k>/ for every kernel of the staged sequence reproducer; with `source_dir`,
    each with the sources discovery finds for it. Returns what each entry holds."""
    cap = Capture.open(stage)
    seq = cap.sequence
    assert seq is not None
    entries = []
    for k in seq.kernels:
        entry = stage / KERNELS_DIR / str(k.id)
        (entry / "capture" / "cubins").mkdir(parents=True)
        module = seq.modules[k.module]
        src = cap.root / module.cubin
        dst = entry / "capture" / module.cubin
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
        (entry / "capture" / "manifest.json").write_text(json.dumps(kernel_entry_manifest(cap, k.id), indent=1) + "\n")
        (entry / "capture" / "interposer.log").write_text("kernel entry of a sequence capture (see ../../capture)\n")
        sources = None
        if source_dir is not None:
            try:
                sources = attach_sources(entry, Capture.open(entry), Path(source_dir),
                                         Path(build_dir) if build_dir else None)
                if sources.get("kind") == "cuda":  # headers from outside --source-dir, the extraction's record
                    try:
                        sources["notes"] = [*sources.get("notes", []), *finish_sources(entry)["notes"]]
                    except Exception as exc:  # noqa: BLE001 - the sources copied so far stay usable
                        sources.setdefault("notes", []).append(f"finish_sources failed ({type(exc).__name__}: {exc})")
            except KerncapError as exc:
                sources = {"kind": "none", "reason": exc.message}
            except Exception as exc:  # noqa: BLE001 - a discovery bug must not cost the capture
                sources = {"kind": "none", "reason": f"{type(exc).__name__}: {exc}"}
        record = {"kernel": k.name, "demangled": k.demangled, "sequence_kernel": k.id, "module": k.module,
                  "sources": sources}
        (entry / "reproducer.json").write_text(json.dumps(record, indent=1) + "\n")
        if sources and sources.get("kind") == "none":
            notes.append(f"kernel {k.demangled or k.name}: no sources ({sources.get('reason')})")
        entries.append({"kernel": k.id, "dir": f"{KERNELS_DIR}/{entry.name}", "name": k.name,
                        "sources": (sources or {}).get("kind")})
    return entries


def assemble_sequence(kernel: str, match: str, dispatch: int, command: list[str], output: Path, run_dir: Path,
                      source_dir, build_dir, force: bool, env, procs, request: SequenceRequest) -> list[str]:
    """The sequence reproducer: the capture moved in, reproducer.json (with "sequence"),
    the kernel entries; staged in the run directory, then renamed to `output`. Returns the notes."""
    stage = run_dir / "reproducer"
    record = build_reproducer(stage, run_dir / "capture", run_dir, kernel, match, dispatch, command, None,
                              None, env, procs, triton_records=False)
    notes = list(record["notes"])
    entries = write_kernel_entries(stage, source_dir, build_dir, notes)
    record["notes"] = notes
    record["sequence"] = {"mode": request.mode, "count": request.count, "until": request.until,
                          "kernels": entries}
    tmp = stage / ".reproducer.json.tmp"
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, stage / "reproducer.json")
    replace_output(stage, output, force)
    return notes


# -- saying why no sequence was captured ---------------------------------------------------------


def _errors(procs: list[dict], kind: str) -> list[tuple[int, str]]:
    return [(int(p.get("pid", 0)), e.get("message", "")) for p in procs for e in p.get("errors") or []
            if isinstance(e, dict) and e.get("kind") == kind]


def diagnose(request: SequenceRequest, kernel: str, dispatch: int, selection: Selection,
             procs: list[dict]) -> KerncapError | None:
    """The error explaining why the window was not captured; None to let the dispatch's
    own diagnosis speak (the kernel never ran, too few dispatches)."""
    what = request.describe(kernel, dispatch, selection)
    hint = "docs/sequences.md says what opens and closes a window; --keep-run-dir keeps the run's reports"
    unclosed = _errors(procs, "sequence_unclosed")
    if unclosed:
        pid, message = unclosed[0]
        # A run bounded by a kernel another process launched crosses processes.
        others = [(int(p.get("pid", 0)), (p.get("sequence") or {}).get("until_seen", 0)) for p in procs
                  if int(p.get("pid", 0)) != pid]
        crossing = [(opid, n) for opid, n in others if n]
        if crossing and request.until:
            opid, n = crossing[0]
            return KerncapError(
                f"{what} crosses processes: it began in process {pid}, and {request.until!r} ran only in process "
                f"{opid} ({n} launch(es)); a sequence is one process's work",
                "end the run with a kernel of the same process (--until), or bound it with --count")
        return KerncapError(f"{what} was not captured: {message}" + _range_listing(selection, procs), hint)
    for kind in ("sequence_crosses", "sequence_empty", "graph_refused", "disk", "capture_failed"):
        found = _errors(procs, kind)
        if found:
            pid, message = found[0]
            return KerncapError(f"{what} was not captured (process {pid}): {message}", hint)
    unopened = _errors(procs, "sequence_unopened")
    if request.mode == "nvtx" and (unopened or not any((p.get("sequence") or {}).get("state") not in (None, "waiting")
                                                       for p in procs)):
        seen = max([int((p.get("sequence") or {}).get("instances_seen") or 0) for p in procs] or [0])
        return KerncapError(
            f"{what} never began: {seen} instance(s) of a range matching it opened in any process"
            + _range_listing(selection, procs),
            "pick an instance below the count seen (--dispatch), or a range path from the list" if seen else
            "pass one of the listed range paths (a path is the open start/end ranges, then the thread's push/pop "
            "ranges, joined with '/')")
    return None


def _range_listing(selection: Selection, procs: list[dict]) -> str:
    if selection.nvtx is None:
        return ""
    sections = [p["nvtx"] for p in procs if isinstance(p.get("nvtx"), dict)]
    names = sorted({n for s in sections for n in s.get("names") or []})
    paths = sorted({n for s in sections for n in s.get("paths") or []})
    if not names and not paths:
        return ". kerncap saw no NVTX range at all (ranges opened before the process's first CUDA call are not seen)"
    listing = "\n".join(f"    {c}" for c in closest(selection.nvtx, names + paths))
    return f". The range names and paths seen, closest first:\n{listing}"


def sequence_extract_arguments(mode: str | None, *, nvtx: str | None = None, count: int | None = None,
                               until: str | None = None) -> dict[str, Any]:
    """`extract`'s `sequence` and `selection` for a window (what `extract --sequence MODE
    --nvtx --count --until` passes; the workbench's extract dialog and MCP's extract too):
    {} for one dispatch (mode None); checked when extract runs (SequenceRequest.check)."""
    if not mode:
        if count is not None or until:
            raise UsageError("--count and --until bound a run of launches", "add --sequence run")
        return {"selection": Selection(nvtx=nvtx)} if nvtx else {}
    out: dict[str, Any] = {"sequence": SequenceRequest(mode=mode, count=count, until=until or None)}
    if nvtx:
        out["selection"] = Selection(nvtx=nvtx)
    return out
