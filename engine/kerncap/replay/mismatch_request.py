"""The client side of the mismatch map: which items, in which layout, against what, on
which input; the replay server computes the maps on the GPU (kerncap.replay.mismatch_ops)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from kerncap.core import dtypes as dt
from kerncap.errors import KerncapError, UsageError
from kerncap.replay import perturb as pt
from kerncap.replay.differential import is_fault
from kerncap.replay import tensor_view as tv
from kerncap.replay.mismatch import MismatchMap
from kerncap.reproducer.format import Capture


def request_maps(client, capture: Capture, *, cubin: str | Path | None = None, against: str | Path | None = None,
                 perturbation: int | None = None, seed: int = 0, items: Sequence[str] = (),
                 dtype: str | None = None, shape: tuple[int, ...] | None = None,
                 views: dict[str, tv.View] | None = None, grid: tuple[int, int] = (256, 256),
                 atol: float | None = None, rtol: float | None = None) -> list[MismatchMap]:
    """Maps of `items` (default: every written region) after `cubin` runs on the captured
    input or on `perturbation` (1-based, with `seed`), against the captured post-state
    (`against` None on the captured input), the captured cubin ("baseline", the default on
    a perturbed input) or another variant's cubin. `views`: item name -> a View (zoom)."""
    targets = tv.select_items(capture, list(items))
    if shape is not None and len(targets) > 1:
        raise UsageError(f"a shape applies to one item; {len(targets)} are selected", "name the item")
    fills, label = None, "captured input"
    if perturbation is not None:
        if perturbation < 1:
            raise UsageError(f"perturbation {perturbation}: they count from 1", "e.g. perturbation 3")
        plan = pt.plan(capture, (), None)
        fills = plan.fills(seed, perturbation - 1)
        label = f"perturbation {perturbation} (seed {seed})"
    if against is None:
        against_wire = "captured" if fills is None else "baseline"
    elif str(against) in ("captured", "baseline"):
        against_wire = str(against)
    else:
        against_wire = str(Path(against).resolve())
    tolerance = atol is not None or rtol is not None
    wanted = []
    for item, argument in targets:
        layout = tv.item_layout(capture, item, argument=argument, dtype=dtype, shape=shape)
        if layout.dtype is not None and layout.dtype not in dt.COMPARABLE:
            layout = tv.item_layout(capture, item, dtype="uint8", shape=shape)
        view = (views or {}).get(item.name) or tv.view_of(layout, item)
        wanted.append({"item": item.index, "dtype": layout.dtype, "tolerance": tolerance and layout.dtype is not None,
                       "atol": atol or 0.0, "rtol": rtol or 0.0, "view": view.to_dict(), "grid_rows": grid[0],
                       "grid_cols": grid[1], "notes": list(layout.notes)})
    try:
        got = client.request("mismatch_map", cubin=None if cubin is None else str(Path(cubin).resolve()),
                             fills=fills, against=against_wire, input=label if fills else None,
                             maps=[{k: v for k, v in w.items() if k != "notes"} for w in wanted])
    except KerncapError as exc:
        if is_fault(exc):  # the launch faulted (other CUDA errors are not the kernel's)
            raise KerncapError(f"{cubin or 'the captured cubin'} faulted on the {label}: {exc.message}",
                               "no map of a faulting run; check its indexing with `kerncap validate --sanitize`"
                               ) from None
        raise
    maps = [MismatchMap.from_dict(d) for d in got["maps"]]
    for m, w in zip(maps, wanted):
        m.notes = w["notes"] + m.notes
    return maps
