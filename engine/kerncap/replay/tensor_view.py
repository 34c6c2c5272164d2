"""What kerncap knows about the layout of one captured item (a region, an argument, a
module global): its element type, a tensor shape and strides, and the 2-D view the
mismatch heatmap draws. Used by `kerncap dump`, the mismatch report and the workbench.

Sources, strongest first: the user (`--dtype`, `--shape`); a Triton / Inductor
reproducer's tensor arguments (source/triton.json: dtype, shape, strides, data_ptr); the
kernel's demangled C++ parameter types (kerncap.replay.region_types); a manifest
parameter's dtype hint. Nothing known: raw bytes (uint8), said so.

Element indices count from the item's first byte (element i holds bytes
[i*itemsize, (i+1)*itemsize)), the indices `validate` reports.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from kerncap.core import dtypes as dt
from kerncap.core.units import human_bytes
from kerncap.errors import KerncapError, UsageError
from kerncap.replay.region_types import classify_cxx_type, cxx_parameter_types, triton_tensor_args
from kerncap.reproducer.arrays import replayed_arrays
from kerncap.reproducer.format import Capture, Region

RAW = "raw bytes"  # the source text of a layout nothing is known about
MAX_DIMS = 8


@dataclass(frozen=True)
class Item:
    """One region, module global or CUDA array, as the replay server numbers them (`index`)."""
    kind: str              # "region" | "global" | "array"
    id: int | None         # region or array id
    name: str              # "region 3", "global scale", "array 0"
    size: int
    base: int
    written: bool
    index: int             # position among the replayed items (regions, then globals, of size > 0)
    pre: tuple = ()
    post: tuple = ()

    @property
    def key(self) -> str:  # file name stem of a dump
        if self.kind in ("region", "array"):
            return f"{self.kind}{self.id}"
        return "global_" + re.sub(r"[^A-Za-z0-9_.-]", "_", self.name[7:])


@dataclass(frozen=True)
class Layout:
    dtype: str | None              # None: raw bytes
    shape: tuple[int, ...]         # of the tensor, in elements
    strides: tuple[int, ...]       # in elements
    offset: int = 0                # bytes from the item's start to the tensor's first element
    source: str = RAW              # where it comes from, for reports
    notes: tuple[str, ...] = ()

    @property
    def itemsize(self) -> int:
        return dt.itemsize(self.dtype) if self.dtype else 1

    @property
    def type_name(self) -> str:
        return self.dtype or "uint8 (raw bytes)"

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "shape": list(self.shape), "strides": list(self.strides), "offset": self.offset,
                "source": self.source, "notes": list(self.notes)}


@dataclass(frozen=True)
class View:
    """The 2-D picture of an item: `rows` × `cols` elements from element `start`, rows
    `row_stride` elements apart. `shape`/`strides` give tensor coordinates (the view's
    rows collapse the leading dimensions)."""
    start: int
    rows: int
    cols: int
    row_stride: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    source: str
    wrapped: bool = False  # a 1-D tensor (or raw bytes) folded into rows

    def coords(self, index: int) -> tuple[int, int] | None:
        """(row, col) of an item element index, or None outside the view."""
        k = index - self.start
        if k < 0:
            return None
        r, c = divmod(k, self.row_stride)
        return (r, c) if r < self.rows and c < self.cols else None

    def tensor_coords(self, index: int) -> tuple[int, ...] | None:
        rc = self.coords(index)
        if rc is None:
            return None
        if self.wrapped or len(self.shape) <= 1:
            return (rc[0] * self.cols + rc[1],) if not self.wrapped or len(self.shape) == 1 else rc
        out, rest = [], rc[0]
        for n in reversed(self.shape[:-1]):
            rest, i = divmod(rest, n)
            out.append(i)
        return (*reversed(out), rc[1])

    def window(self, r0: int, r1: int, c0: int, c1: int) -> "View":
        """The part rows [r0, r1) × cols [c0, c1) (zooming in)."""
        r0, c0 = max(0, r0), max(0, c0)
        r1, c1 = min(self.rows, max(r1, r0 + 1)), min(self.cols, max(c1, c0 + 1))
        return replace(self, start=self.start + r0 * self.row_stride + c0, rows=r1 - r0, cols=c1 - c0)

    def to_dict(self) -> dict:
        return {"start": self.start, "rows": self.rows, "cols": self.cols, "row_stride": self.row_stride,
                "shape": list(self.shape), "strides": list(self.strides), "source": self.source,
                "wrapped": self.wrapped}

    @classmethod
    def from_dict(cls, d: dict) -> "View":
        return cls(int(d["start"]), int(d["rows"]), int(d["cols"]), int(d["row_stride"]), tuple(d["shape"]),
                   tuple(d["strides"]), d["source"], bool(d.get("wrapped")))


# -- items ---------------------------------------------------------------------------------


def replay_items(capture: Capture) -> list[Item]:
    """Every item in the replay server's order (kerncap.replay.native_session)."""
    out = []
    for r in capture.regions:
        if r.size > 0:
            out.append(Item("region", r.id, f"region {r.id}", r.size, r.base, r.written, len(out), tuple(r.pre),
                            tuple(r.post)))
    for g in capture.globals:
        if g.size > 0:
            out.append(Item("global", None, f"global {g.name}", g.size, 0, g.written, len(out), tuple(g.pre),
                            tuple(g.post)))
    for a in replayed_arrays(capture.arrays, capture.mipmapped_arrays)[0]:
        out.append(Item("array", a.id, f"array {a.id}", a.size, 0, a.written, len(out), tuple(a.pre), tuple(a.post)))
    return out


def select_items(capture: Capture, names: list[str]) -> list[tuple[Item, str | None]]:
    """Items named `3`, `region:3`, `arg:1` (an argument: the region it points into,
    and its typed layout) or `global:NAME`; none: every written region and global.
    Returns (item, argument) pairs: the argument that named it, for its layout."""
    items = replay_items(capture)
    if not names:
        written = [(i, None) for i in items if i.written]
        if not written:
            raise KerncapError(f"{capture.root}: the captured kernel wrote no region or global",
                               "name the items to dump: REGION, arg:N or global:NAME (`kerncap info DIR` lists them)")
        return written
    regions = {i.id: i for i in items if i.kind == "region"}
    out = []
    for name in names:
        kind, sep, what = name.partition(":")
        if not sep:
            kind, what = "region", name
        kind = kind.strip().lower()
        if kind == "region" and what.strip().isdigit() and int(what) in regions:
            out.append((regions[int(what)], None))
        elif kind in ("arg", "argument"):
            out.append(_argument_item(capture, regions, what.strip()))
        elif kind == "global" and (g := next((i for i in items if i.kind == "global" and i.name == f"global {what}"),
                                             None)):
            out.append((g, None))
        elif kind == "array" and (a := next((i for i in items if i.kind == "array" and str(i.id) == what.strip()),
                                            None)):
            out.append((a, None))
        else:
            listing = ", ".join(str(i) for i in sorted(regions)[:12]) + (" …" if len(regions) > 12 else "")
            globals_ = ", ".join(i.name[7:] for i in items if i.kind == "global")[:200]
            raise UsageError(f"{name!r} names no item of {capture.root}",
                             f"give a region id ({listing}), arg:N (0…{len(capture.params) - 1})"
                             + (f" or global:NAME ({globals_})" if globals_ else ""))
    return out


def _argument_item(capture: Capture, regions: dict[int, Item], what: str) -> tuple[Item, str]:
    for p in capture.params:
        if str(p.index) == what and p.region is not None and p.region in regions:
            return regions[p.region], f"arg:{p.index}"
    for arg in _triton_args(capture):
        if arg.get("name") == what and (r := capture.region_of(int(arg["data_ptr"]))) and r.id in regions:
            return regions[r.id], f"arg:{what}"
    pointers = [str(p.index) for p in capture.params if p.region is not None]
    raise UsageError(f"argument {what!r} of {capture.kernel.get('name', '?')} points into no captured region",
                     f"pointer arguments: {', '.join(pointers) or 'none'}")


# -- layouts -------------------------------------------------------------------------------


def _triton_args(capture: Capture) -> list[dict]:
    return triton_tensor_args(capture.reproducer_dir)


def _triton_layout(capture: Capture, item: Item, name: str | None) -> Layout | None:
    region = next((r for r in capture.regions if r.id == item.id), None)
    if region is None:
        return None
    found = []
    for arg in _triton_args(capture):
        start = int(arg["data_ptr"])
        if not region.contains(start) or (name is not None and arg.get("name") != name):
            continue
        dtype = dt.lookup(str(arg.get("dtype", "")))
        shape = tuple(int(n) for n in arg.get("shape") or [])
        strides = tuple(int(s) for s in arg.get("strides") or [])
        extent = 0 if any(n == 0 for n in shape) else (sum((n - 1) * s for n, s in zip(shape, strides)) + 1)
        found.append((extent * int(arg.get("element_size", 1)), arg, dtype, shape, strides, start - region.base))
    if not found:
        return None
    found.sort(key=lambda f: -f[0])
    nbytes, arg, dtype, shape, strides, offset = found[0]
    others = [f"{f[1].get('name')} ({f[1].get('dtype')})" for f in found[1:]]
    notes = (f"region {item.id} also holds tensors {', '.join(others)}; arg:NAME picks one",) if others else ()
    src = f"Triton tensor {arg.get('name')} ({arg.get('dtype')}, shape {'×'.join(map(str, shape)) or 'scalar'})"
    if dtype is None:
        return Layout(None, (item.size,), (1,), 0, f"{RAW}: {src} has a dtype kerncap does not decode", notes)
    return Layout(dtype, shape or (1,), strides or (1,), offset, src, notes)


def _cxx_layout(capture: Capture, item: Item, argument: str | None) -> Layout | None:
    types = cxx_parameter_types(capture.kernel.get("demangled"))
    if types is None or len(types) != len(capture.params):
        return None
    for p, text in zip(capture.params, types):
        if p.region != item.id or p.region_offset is None or (argument and argument != f"arg:{p.index}"):
            continue
        depth, _role, dtype = classify_cxx_type(text)
        if depth != 1:
            continue
        src = f"argument {p.index} `{text}`"
        if dtype is None:
            return Layout(None, (item.size,), (1,), 0, f"{RAW}: {src} is not an element type kerncap decodes")
        n = (item.size - p.region_offset) // dt.itemsize(dtype)
        return Layout(dtype, (n,), (1,), p.region_offset, src)
    for raw in capture.manifest.get("params", []):
        hint = raw.get("dtype") if (raw.get("pointer") or {}).get("region") == item.id else None
        if hint and (d := dt.lookup(hint)):
            off = raw["pointer"].get("offset", 0)
            return Layout(d, ((item.size - off) // dt.itemsize(d),), (1,), off, f"parameter {raw.get('index')} dtype hint")
    return None


def _array_layout(capture: Capture, item: Item) -> Layout | None:
    """A CUDA array's contents as the replay holds them: packed rows of texels, each row
    width x channels elements of the array's format (slices or layers outermost)."""
    a = next((x for x in capture.arrays if x.id == item.id), None)
    if a is None:
        return None
    dims = tuple(n for n in (a.depth, a.height) if n) + (a.width * a.channels,)
    strides = tuple(math.prod(dims[k + 1:]) for k in range(len(dims)))
    if a.dtype is None:
        return Layout(None, (item.size,), (1,), 0, f"{RAW}: array {a.id} is {a.dims}, a format kerncap does not decode")
    return Layout(a.dtype, dims, strides, 0, f"CUDA array {a.id} ({a.dims})")


def item_layout(capture: Capture, item: Item, *, argument: str | None = None, dtype: str | None = None,
                shape: tuple[int, ...] | None = None) -> Layout:
    """The item's layout from what kerncap knows, overridden by the user's `dtype`
    (any name of kerncap.core.dtypes) and `shape` (checked: it must divide the item)."""
    known = _array_layout(capture, item) if item.kind == "array" else None
    if item.kind == "region":
        name = argument[4:] if argument and not argument[4:].isdigit() else None
        known = _triton_layout(capture, item, name) or _cxx_layout(capture, item, argument if not name else None)
    if dtype is not None:
        canon = dt.lookup(dtype)
        if canon is None:
            raise UsageError(f"unknown dtype {dtype!r}", f"use one of {', '.join(dt.TABLE)}")
        offset = known.offset if known and known.offset % dt.itemsize(canon) == 0 else 0
        known = Layout(canon, ((item.size - offset) // dt.itemsize(canon),), (1,), offset, f"--dtype {canon}")
    if known is None:
        known = Layout(None, (item.size,), (1,), 0, f"{RAW}: no dtype known for {item.name} "
                                                    "(no Triton tensor, no typed C++ pointer argument)")
    if shape is not None:
        known = with_shape(known, item, shape)
    return known


def parse_shape(text: str) -> tuple[int, ...]:
    """"1024,1024", "64x1024", "-1,256" (-1: the rest) -> a tuple (UsageError otherwise)."""
    parts = [p for p in re.split(r"[,x×\s]+", text.strip()) if p]
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if not dims or len(dims) > MAX_DIMS or any(d == 0 or d < -1 for d in dims) or dims.count(-1) > 1:
        raise UsageError(f"--shape {text!r} is not a shape", "give positive sizes, e.g. 1024,1024 or -1,256")
    return dims


def with_shape(layout: Layout, item: Item, shape: tuple[int, ...]) -> Layout:
    """`layout` with a user's row-major shape over the item's whole elements from its
    offset; a shape that does not divide them is refused, naming both."""
    size = layout.itemsize
    n = (item.size - layout.offset) // size
    known = math.prod(d for d in shape if d != -1)
    dims = tuple(n // known if d == -1 else d for d in shape) if known and n % known == 0 else shape
    total = math.prod(dims)
    if -1 in dims or total != n or total == 0:
        text = "×".join(str(d) for d in shape)
        raise UsageError(
            f"shape {text} does not fit {item.name}: it holds {n:,} {layout.type_name} elements "
            f"({human_bytes(item.size)}{f' from +{layout.offset:#x}' if layout.offset else ''}), "
            f"{'and ' + f'{n:,} is not a multiple of {known:,}' if -1 in shape else f'the shape has {total:,}'}",
            f"give dimensions whose product is {n:,}, or -1 for one of them (e.g. -1,{shape[-1]})")
    strides = tuple(math.prod(dims[i + 1:]) for i in range(len(dims)))
    return Layout(layout.dtype, dims, strides, layout.offset, f"{layout.source}; --shape {'×'.join(map(str, dims))}",
                  layout.notes)


def view_of(layout: Layout, item: Item) -> View:
    """The 2-D view of a layout: a tensor's rows are its leading dimensions collapsed
    (when their strides allow), a 1-D one (or raw bytes) is folded at a power of two."""
    size = layout.itemsize
    n_elems = item.size // size
    start = layout.offset // size if layout.offset % size == 0 else 0
    shape, strides = layout.shape, layout.strides
    if len(shape) >= 2 and strides[-1] == 1 and all(strides[i] == strides[i + 1] * shape[i + 1]
                                                    for i in range(len(shape) - 2)):
        return View(start, math.prod(shape[:-1]), shape[-1], strides[-2], shape, strides, layout.source)
    n = min(math.prod(shape) if shape else n_elems, n_elems - start)
    cols = fold_width(n)
    note = layout.source if len(shape) <= 1 else f"{layout.source} (strides {strides}: drawn folded)"
    return View(start, max(1, -(-n // cols)), cols, cols, shape, strides, note, wrapped=True)


def fold_width(n: int) -> int:
    """Columns to fold n elements into a roughly square picture: a power of two near √n
    that divides n when one does."""
    if n <= 1:
        return 1
    w = 1 << max(0, round(math.log2(math.sqrt(n))))
    for cand in (w, w * 2, w // 2, w * 4, w // 4):
        if cand >= 1 and n % cand == 0:
            return cand
    return w


def describe(layout: Layout) -> str:
    shape = "×".join(map(str, layout.shape))
    return f"{layout.type_name}[{shape}] from {layout.source}" + (f" at +{layout.offset:#x}" if layout.offset else "")


def region_by_id(capture: Capture, rid: int) -> Region | None:
    return next((r for r in capture.regions if r.id == rid), None)
