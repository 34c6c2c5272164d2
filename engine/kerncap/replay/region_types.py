"""What kerncap knows about the element types of captured memory, span by span.

Sources, strongest first:
  * the user: `--region-dtype REGION=DTYPE` (the whole region holds DTYPE);
  * a Triton / Inductor reproducer: each tensor argument's dtype and storage extent
    (source/triton.json);
  * CUDA C++: the demangled parameter types of the kernel (`float const*`): the region a
    pointer parameter points into holds that type from the pointer on, up to the next
    pointer into the same region (or the region's end).
A span's *role* decides what perturbed validation may do with it: "float" data can be
redrawn; "integer" data may be indices, offsets or expert ids and "pointers" (a `T**`
parameter) hold addresses, so both stay as captured; "unknown" stays too.
DWARF is not read: the demangled signature already names what DWARF would add for a
kernel's parameters, and reading it would need the app's host binary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kerncap.reproducer.format import Capture
from kerncap.errors import KerncapError
from kerncap.core import dtypes as dt
from kerncap.sources.names import classify_cxx_type, cxx_parameter_types
from kerncap.triton import region_dtypes


@dataclass(frozen=True)
class TypedSpan:
    region: int
    offset: int  # bytes from the region's base
    length: int  # bytes
    dtype: str | None  # a comparable kerncap.core.dtypes name; None when not one of those
    role: str  # "float" | "integer" | "pointers" | "unknown"
    source: str  # where the type comes from, for the report
    explicit: bool = False  # --region-dtype

    @property
    def end(self) -> int:
        return self.offset + self.length


# -- CUDA C++ ------------------------------------------------------------------------------


def cxx_spans(capture: Capture) -> list[TypedSpan]:
    """Spans typed by the kernel's demangled parameter list."""
    types = cxx_parameter_types(capture.kernel.get("demangled"))
    if types is None or len(types) != len(capture.params):
        return []
    starts = _pointer_starts(capture)
    spans = []
    for p, text in zip(capture.params, types):
        if p.region is None or p.region_offset is None:
            continue
        depth, role, dtype = classify_cxx_type(text)
        if depth == 0:
            continue
        region = _region(capture, p.region)
        end = min([s for s in starts.get(p.region, []) if s > p.region_offset] + [region.size])
        spans.append(TypedSpan(p.region, p.region_offset, end - p.region_offset, dtype, role,
                               f"argument {p.index} `{text}`"))
    return spans


def _pointer_starts(capture: Capture) -> dict[int, list[int]]:
    """Region id -> offsets that any parameter (also inside a struct) points at."""
    starts: dict[int, list[int]] = {}
    for p in capture.params:
        if p.region is not None and p.region_offset is not None:
            starts.setdefault(p.region, []).append(p.region_offset)
    for raw in capture.manifest.get("params", []):
        for ptr in raw.get("pointers", []) or []:
            starts.setdefault(ptr["region"], []).append(ptr["offset"])
    return starts


def _region(capture: Capture, rid: int):
    for r in capture.regions:
        if r.id == rid:
            return r
    raise KerncapError(f"{capture.root / 'manifest.json'}: a parameter points into region {rid}, which is not listed",
                       "extract again")


# -- Triton ---------------------------------------------------------------------------------


def triton_tensor_args(reproducer_dir: Path) -> list[dict]:
    """The tensor arguments of a Triton reproducer's launch (source/triton.json), [] for
    any other reproducer or an unreadable spec."""
    path = reproducer_dir / "source" / "triton.json"
    if not path.is_file():
        return []
    try:
        spec = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [a for a in (spec.get("launch") or {}).get("args", [])
            if isinstance(a, dict) and a.get("kind") == "tensor" and "data_ptr" in a]


def triton_spans(capture: Capture, reproducer_dir: Path) -> list[TypedSpan]:
    """Spans of a Triton reproducer's tensor arguments (source/triton.json)."""
    spans = []
    for arg in triton_tensor_args(reproducer_dir):
        start = int(arg["data_ptr"])
        region = capture.region_of(start)
        if region is None:
            continue
        shape, strides = arg.get("shape") or [], arg.get("strides") or []
        size = int(arg.get("element_size", 1))
        extent = 0 if any(int(n) == 0 for n in shape) else (sum((int(n) - 1) * int(s) for n, s in zip(shape, strides)) + 1) * size
        extent = min(extent, region.end - start)
        name, torch_dtype = arg.get("name", "?"), str(arg.get("dtype", ""))
        role, dtype = triton_role(torch_dtype)
        spans.append(TypedSpan(region.id, start - region.base, extent, dtype, role,
                               f"Triton tensor {name} ({torch_dtype})"))
    return spans


def triton_role(torch_dtype: str) -> tuple[str, str | None]:
    name = torch_dtype.removeprefix("torch.")
    try:
        canon = dt.normalize(name)
    except KerncapError:
        canon = None
    if canon is not None:
        return ("float" if dt.is_float(canon) else "integer"), canon
    if name.startswith(("int", "uint", "bool")):
        return "integer", None
    return "unknown", None


# -- all together ----------------------------------------------------------------------------


def typed_spans(capture: Capture, reproducer_dir: Path | None, explicit: dict[int, str] | None = None
                ) -> tuple[list[TypedSpan], list[str]]:
    """Every typed span of the capture, overlaps resolved, and notes for the report.
    `explicit`: region id -> dtype from --region-dtype (the whole region)."""
    notes: list[str] = []
    explicit = {int(k): dt.normalize(v) for k, v in (explicit or {}).items()}
    by_id = {r.id: r for r in capture.regions}
    for rid in explicit:
        if rid not in by_id:
            raise KerncapError(f"--region-dtype {rid}=…: the capture has no region {rid}",
                               f"its regions are {_list_ids(by_id)}; see `kerncap info DIR`")
    found = triton_spans(capture, reproducer_dir) if reproducer_dir else []
    if not found:
        found = cxx_spans(capture)
        if not found and capture.params:
            types = cxx_parameter_types(capture.kernel.get("demangled"))
            if types is None:
                notes.append("the kernel's parameter types are unknown (no demangled C++ signature, no Triton record)")
    spans = [s for s in found if s.region not in explicit and s.length > 0]
    for rid, dtype in explicit.items():
        role = "float" if dt.is_float(dtype) else "integer"
        spans.append(TypedSpan(rid, 0, by_id[rid].size, dtype, role, f"--region-dtype {rid}={dtype}", explicit=True))
    return _resolve_overlaps(spans, notes), notes


def _resolve_overlaps(spans: list[TypedSpan], notes: list[str]) -> list[TypedSpan]:
    """Spans of one region that overlap: merged when they agree on the dtype, else the
    overlapping ones lose their type (they are left alone)."""
    out: list[TypedSpan] = []
    for rid in sorted({s.region for s in spans}):
        group = sorted((s for s in spans if s.region == rid), key=lambda s: (s.offset, -s.length))
        merged: list[TypedSpan] = []
        for s in group:
            if merged and s.offset < merged[-1].end:
                prev = merged[-1]
                end = max(prev.end, s.end)
                if (prev.dtype, prev.role) == (s.dtype, s.role):
                    source = prev.source if s.source in prev.source else f"{prev.source}, {s.source}"
                    merged[-1] = TypedSpan(rid, prev.offset, end - prev.offset, prev.dtype, prev.role, source,
                                           prev.explicit or s.explicit)
                else:
                    notes.append(f"region {rid} +{s.offset:#x}: {prev.source} and {s.source} overlap with different "
                                 "types; left as captured")
                    merged[-1] = TypedSpan(rid, prev.offset, end - prev.offset, None, "unknown",
                                           f"{prev.source} overlapping {s.source}")
                continue
            merged.append(s)
        out += merged
    return out


def _list_ids(by_id: dict) -> str:
    ids = sorted(by_id)
    return ", ".join(str(i) for i in ids[:20]) + (f" … ({len(ids)} in all)" if len(ids) > 20 else "")


def known_dtypes(capture: Capture, triton: dict[int, str], notes: list[str]) -> dict[int, str]:
    """Region id -> dtype for tolerance checks, from what is known: a Triton reproducer's
    tensor dtypes (`triton`, kerncap.triton.region_dtypes), else a dtype hint on a
    manifest parameter pointing into the region, else the demangled C++ parameter types
    when every typed pointer into the region agrees."""
    hints: dict[int, str] = dict(triton)
    for p in capture.manifest.get("params", []):
        region, hint = (p.get("pointer") or {}).get("region"), p.get("dtype")
        if region is None or not hint or region in triton:
            continue
        try:
            hint = dt.normalize(hint)
        except KerncapError:
            notes.append(f"parameter {p.get('index')}: dtype hint {hint!r} not usable for tolerance checks")
            continue
        if hints.setdefault(region, hint) != hint:
            notes.append(f"region {region}: parameters disagree on its dtype ({hints[region]}, {hint}); "
                         f"using {hints[region]}")
    by_region: dict[int, set[str | None]] = {}
    for s in cxx_spans(capture):
        by_region.setdefault(s.region, set()).add(s.dtype)
    for region, kinds in by_region.items():
        if region not in hints and len(kinds) == 1 and None not in kinds:
            hints[region] = next(iter(kinds))
    return hints


def triton_region_dtypes(capture: Capture) -> dict[int, str]:
    """kerncap.triton.region_dtypes for a Triton reproducer; {} for any other."""
    repro = capture.reproducer_dir
    if not (repro / "source" / "triton.json").is_file():
        return {}
    return region_dtypes(repro, capture)
