"""What the memory-region map shows: one row per region or module global, and typed
pre/post/difference values of the first few KB. Pure logic, no Textual."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kerncap.core import dtypes as dt

PREVIEW_BYTES = 4096

# the element types the value view offers, in the order `t` cycles through them
DTYPES = tuple(dt.TABLE)


@dataclass(frozen=True)
class MapRow:
    key: str          # "r<id>", "h<id>" (host region), "g<name>" or "a<id>" (a CUDA array)
    label: str        # "region 3" / "host region 0" / "__constant__ scale" / "array 0 (64x32 float)"
    base: int
    size: int
    kind: str
    by_argument: bool
    written: bool
    zero: bool

    @property
    def on_map(self) -> bool:
        """Drawn on the address map: regions and host regions (globals live in the module)."""
        return self.key[0] in "rh"

    @property
    def host(self) -> bool:
        return self.key.startswith("h")

    @property
    def flags(self) -> str:
        """A: an argument points into it, W: the kernel changed it (post differs from pre),
        =: it did not, 0: all zero."""
        return (
            ("A" if self.by_argument else "·")
            + ("W" if self.written else "=")
            + ("0" if self.zero else "·")
        )


def map_rows(capture, params=None) -> list[MapRow]:
    """Regions and host regions by address, then module globals, then CUDA arrays (they
    live where the driver puts them, outside the captured address range). `params`: the
    arguments whose pointers mark regions (default the captured launch's; a sequence's
    selected launch's)."""
    referenced = {p.region for p in (capture.params if params is None else params) if p.region is not None}
    host_referenced = {hp.get("host_region") for p in capture.manifest.get("params", [])
                       for hp in p.get("host_pointers") or []}
    rows = [
        MapRow(
            key=f"r{r.id}", label=f"region {r.id}", base=r.base, size=r.size, kind=f"{r.kind}/{r.api}",
            by_argument=r.id in referenced, written=r.written, zero=r.zero_fraction >= 1.0,
        )
        for r in capture.regions
    ]
    rows += [
        MapRow(
            key=f"h{h.id}", label=f"host region {h.id}", base=h.base, size=h.size,
            kind=f"host/{h.api}" + ("" if h.snapshotted else " (not snapshotted)"),
            by_argument=h.id in host_referenced, written=h.written, zero=h.snapshotted and h.zero_fraction >= 1.0,
        )
        for h in capture.host_regions
    ]
    rows.sort(key=lambda r: r.base)
    rows += [
        MapRow(
            key=f"g{g.name}", label=g.name, base=g.address, size=g.size, kind=g.section or "global",
            by_argument=False, written=g.written, zero=all(h is None for h in g.pre),
        )
        for g in capture.globals
    ]
    rows += [
        MapRow(
            key=f"a{a.id}", label=f"array {a.id} ({a.dims})", base=0, size=a.size,
            kind="cuda array" + (" (surface)" if a.surface else "") + ("" if a.captured else f", not captured: {a.why}"),
            by_argument=a.id in _arrays_by_argument(capture), written=a.written, zero=all(h is None for h in a.pre),
        )
        for a in capture.arrays
    ]
    return rows


def _arrays_by_argument(capture) -> set[int]:
    """Arrays a texture or surface object whose handle is an argument reaches."""
    levels = {m.id: m.level_arrays for m in capture.mipmapped_arrays}
    out: set[int] = set()
    for o in capture.texture_objects:
        if o.params:
            r = o.resource
            out.update([r["array"]] if "array" in r else levels.get(r.get("mipmapped_array"), []))
    return out


def preview_bytes(capture, key: str, limit: int = PREVIEW_BYTES) -> tuple[bytes, bytes]:
    """(pre, post) of the first `limit` bytes of a region or global; reads one chunk only."""
    if key.startswith("r"):
        item = next(r for r in capture.regions if r.id == int(key[1:]))
    elif key.startswith("a"):
        item = next(a for a in capture.arrays if a.id == int(key[1:]))
    elif key.startswith("h"):
        item = next(h for h in capture.host_regions if h.id == int(key[1:]))
        if not item.snapshotted:
            return b"", b""
    else:
        item = next(g for g in capture.globals if g.name == key[1:])
    length = capture.chunk_length(item.size, 0) if item.size else 0
    if not length:
        return b"", b""
    pre = capture.read_chunk(item.pre[0], length)[:limit]
    post = capture.read_chunk(item.post[0], length)[:limit]
    return pre, post


@dataclass(frozen=True)
class ValueRow:
    index: int
    offset: int
    pre: float | int
    post: float | int
    changed: bool

    @property
    def diff(self) -> float | int | None:
        if not self.changed:
            return 0
        if isinstance(self.pre, float) and (math.isnan(self.pre) or math.isnan(self.post)):
            return None
        return self.post - self.pre


def value_rows(pre: bytes, post: bytes, dtype: str) -> list[ValueRow]:
    """Element-wise rows; `changed` compares the raw bytes (byte-exact, so NaN payloads and -0.0 count)."""
    size = dt.itemsize(dtype)
    a, b = dt.decode(dtype, pre), dt.decode(dtype, post)
    return [
        ValueRow(i, i * size, x, y, pre[i * size:(i + 1) * size] != post[i * size:(i + 1) * size])
        for i, (x, y) in enumerate(zip(a, b))
    ]


def format_value(v: float | int | None) -> str:
    if v is None:
        return "nan"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)
