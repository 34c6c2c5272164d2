"""Replay-server operations that look at the data (docs/replay.md, "Where a variant
differs"): the mismatch map of items after a run, and their bytes written into a .npy
file. Each runs the variant (`cubin`, None: the captured cubin) on the captured or a
perturbed pre-state (`fills`) and compares it with `against`:

  "captured"  the captured post-state (pre-state where the kernel wrote nothing);
  "baseline"  the captured cubin's output on the same (perturbed) input;
  a path      another variant's output on the same input (two variants compared).

The maps are computed by the replay core on the GPU (kerncap._replay.mismatch_map).
"""

from __future__ import annotations

import math
import os
import struct
from typing import Any

from kerncap.core import dtypes as dt
from kerncap.errors import KerncapError
from kerncap.replay import mismatch as mm
from kerncap.replay import tensor_view as tv
from kerncap.replay import session_ops
from kerncap.replay.session_ops import fill_specs
from kerncap.replay.native_session import item_label

CHUNK = 64 << 20  # bytes per device-to-host copy of a dump


def _run(ns, req: dict[str, Any], items: list[int]) -> str:
    """Runs what the request compares; returns the native `against` ("captured" | "reference")."""
    fills = fill_specs(ns, req.get("fills"))
    against = req.get("against") or "captured"
    ns.session.clear_references()
    if against != "captured":
        ns.load(None if against == "baseline" else against)
        ns.session.restore()
        if fills:
            ns.session.fill(fills)
        ns.session.run()
        ns.session.keep_reference(items)
    ns.load(req.get("cubin"))
    ns.session.restore()
    if fills:
        ns.session.fill(fills)
    ns.session.run()
    return "captured" if against == "captured" else "reference"


def _labels(req: dict[str, Any]) -> tuple[str, str]:
    actual = req.get("cubin") or "captured cubin"
    against = req.get("against") or "captured"
    on = f" on {req['input']}" if req.get("input") else ""
    expected = {"captured": "captured post-state", "baseline": f"captured cubin{on}"}.get(against, f"{against}{on}")
    return f"{actual}{on}", expected


def op_mismatch_map(ns, req: dict[str, Any]) -> dict[str, Any]:
    """`maps`: [{item, dtype, tolerance, atol, rtol, view, grid_rows, grid_cols}] (item:
    the replay index, tensor_view.Item.index); answers {"maps": [MismatchMap dicts]}."""
    wanted = req.get("maps") or []
    if not wanted:
        raise KerncapError("mismatch_map names no item", "give maps: [{item, view, …}]")
    items = [int(w["item"]) for w in wanted]
    for i in items:
        if not 0 <= i < len(ns.items):
            raise KerncapError(f"mismatch_map: item {i} does not exist ({len(ns.items)} regions and globals)")
    against = _run(ns, req, items)
    actual_label, expected_label = _labels(req)
    return {"maps": [native_map(ns, w, against, actual_label, expected_label).to_dict() for w in wanted]}


def native_map(ns, w: dict[str, Any], against: str, actual_label: str, expected_label: str) -> mm.MismatchMap:
    """One item's map on the GPU, from its current replay state."""
    index = int(w["item"])
    item = ns.items[index]
    view = tv.View.from_dict(w["view"])
    dtype = w.get("dtype") or None
    spec = ns.core.MapSpec()
    spec.item, spec.against, spec.dtype = index, against, dtype or ""
    spec.tolerance, spec.atol, spec.rtol = bool(w.get("tolerance")), float(w.get("atol") or 0), float(w.get("rtol") or 0)
    spec.view_start, spec.view_rows, spec.view_cols, spec.row_stride = view.start, view.rows, view.cols, view.row_stride
    gr, gc = mm.grid_shape(view, int(w.get("grid_rows", 256)), int(w.get("grid_cols", 256)))
    spec.grid_rows, spec.grid_cols, spec.first_k = gr, gc, mm.FIRST_K
    raw = ns.core.mismatch_map(ns.session, spec)
    name = item_label(item)
    m = from_native(raw, name, item.size, view, dtype, spec.tolerance, spec.atol, spec.rtol, gr, gc,
                    actual_label, expected_label)
    reader = _gatherer(ns, index, against, dtype)
    m.first = [mm.FirstMismatch(i, view.tensor_coords(i), *v) for i, v in zip(m_first(raw), reader(m_first(raw)))]
    cells = [int(f) for f in mm.np.flatnonzero(m.cell_count)]
    worst = [(f, m.worst_index(*divmod(f, m.grid_cols))) for f in cells]
    worst = [(f, i) for f, i in worst if i is not None]
    for (f, i), v in zip(worst, reader([i for _f, i in worst])):
        m.cell_values[f] = (i, v[2], v[0], v[1])
    return m


def m_first(raw: dict) -> list[int]:
    return [int(i) for i in raw["first"]]


def _gatherer(ns, index: int, against: str, dtype: str | None):
    """indices -> [(expected, actual, pre)] element values, read on the GPU."""
    size = dt.itemsize(dtype) if dtype else 1

    def read(indices: list[int]) -> list[tuple]:
        if not indices:
            return []
        got = {w: ns.core.gather(ns.session, index, w, against, size, indices) for w in ("expected", "actual", "pre")}
        return [tuple(mm.element(dtype, got[w][k * size:(k + 1) * size]) for w in ("expected", "actual", "pre"))
                for k in range(len(indices))]
    return read


def _double(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def _ordered_double(key: int) -> float:
    bits = key & ~(1 << 63) if key >> 63 else ~key & ((1 << 64) - 1)
    return _double(bits)


def from_native(raw: dict, name: str, size: int, view: tv.View, dtype: str | None, tolerance: bool, atol: float,
                rtol: float, gr: int, gc: int, actual_label: str, expected_label: str) -> mm.MismatchMap:
    """A MismatchMap from kerncap._replay.mismatch_map's answer (mismatch.hpp MapResult)."""
    t = [int(x) for x in raw["totals"]]
    vh = mm.np.array(raw["value_hist"], mm.np.uint64)
    m = mm.MismatchMap(
        name, actual_label, expected_label, dtype, "tolerance" if tolerance else "exact", atol, rtol, size, view, gr,
        gc, mismatched_elements=t[0], mismatched_bytes=t[1] + int(raw["tail_bytes"]), tail_bytes=int(raw["tail_bytes"]),
        nan_errors=t[2], inf_errors=t[3], outside_view=t[4], stale=t[5], max_abs=_double(t[6]), max_rel=_double(t[7]),
        ratio_min=math.inf if t[8] == (1 << 64) - 1 else _ordered_double(t[8]),
        ratio_max=-math.inf if t[9] == 0 else _ordered_double(t[9]),
        err_hist=mm.np.array(raw["err_hist"], mm.np.uint64), ulp_hist=mm.np.array(raw["ulp_hist"], mm.np.uint64),
        value_hist={s: vh[k * mm.VALUE_BINS:(k + 1) * mm.VALUE_BINS] for k, s in enumerate(mm.SIDES)},
        cell_count=mm.np.array(raw["cell_count"], mm.np.uint64).reshape(gr, gc),
        cell_worst=mm.np.array(raw["cell_worst"], mm.np.uint64).reshape(gr, gc),
        row_profile=mm.np.array(raw["row_profile"], mm.np.uint64),
        col_profile=mm.np.array(raw["col_profile"], mm.np.uint64), computed="gpu")
    m.notes.append(f"mapped on the GPU in {1000 * float(raw.get('seconds', 0.0)):.2f} ms")
    return m


def op_dump(ns, req: dict[str, Any]) -> dict[str, Any]:
    """Writes one item's state after the run (`which`: "actual" or "expected") into the
    existing file `path` from byte `data_offset` on (the .npy header before it is the
    client's), CHUNK bytes at a time."""
    index, which = int(req["item"]), req.get("which", "actual")
    if not 0 <= index < len(ns.items):
        raise KerncapError(f"dump: item {index} does not exist ({len(ns.items)} regions and globals)")
    if which not in ("actual", "expected"):
        raise KerncapError(f"dump: state {which!r}: expected actual or expected")
    against = _run(ns, req, [index])
    size = ns.items[index].size
    path, start = req["path"], int(req["data_offset"])
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as exc:
        raise KerncapError(f"cannot write {path}: {exc.strerror}", "check the output directory") from None
    written = 0
    try:
        while written < size:
            n = min(CHUNK, size - written)
            data = ns.core.read_state(ns.session, index, which, against, written, n)
            os.pwrite(fd, data, start + written)
            written += n
    except OSError as exc:
        raise KerncapError(f"cannot write {path}: {exc.strerror}", "check the free space there") from None
    finally:
        os.close(fd)
    return {"bytes": written, "notes": list(ns.session.notes())}


def op_check(ns, req: dict[str, Any]) -> dict[str, Any]:
    """session_ops.op_check; with `report`, every failing region's check also gets the
    mismatch map of the state it was just compared on (`shapes`: region id -> shape)."""
    got = session_ops.op_check(ns, req)
    if req.get("report"):
        attach_reports(ns, session_ops.compare_specs(ns, req.get("tolerances")), got["checks"], req)
    return got


def attach_reports(ns, specs, checks: list[dict[str, Any]], req: dict[str, Any]) -> None:
    against = req.get("against", "captured")
    actual, expected = _labels({**req, "against": "captured" if against == "captured" else "baseline"})
    shapes = {int(k): tuple(v) for k, v in (req.get("shapes") or {}).items()}
    items = tv.replay_items(ns.capture)
    mapped = {(i.kind, i.id): i for i in items if i.kind in ("region", "array")}
    for check in checks:
        if check["passed"] or (check["kind"], check["id"]) not in mapped:
            continue
        item = mapped[(check["kind"], check["id"])]
        spec = specs[item.index]
        try:
            layout = tv.item_layout(ns.capture, item, dtype=spec.dtype or None, shape=shapes.get(item.id))
            if layout.dtype is not None and layout.dtype not in dt.COMPARABLE:
                layout = tv.item_layout(ns.capture, item, dtype="uint8", shape=shapes.get(item.id))
            view = tv.view_of(layout, item)
            m = native_map(ns, {"item": item.index, "dtype": layout.dtype, "tolerance": bool(spec.dtype),
                                "atol": spec.atol, "rtol": spec.rtol, "view": view.to_dict(), "grid_rows": 64,
                                "grid_cols": 64}, "captured" if against == "captured" else "reference", actual, expected)
            m.notes += list(layout.notes)
            check["report"] = m.to_dict()
        except KerncapError as exc:  # e.g. a shape that does not fit: the check stands, the report says why
            check["report_error"] = exc.message
