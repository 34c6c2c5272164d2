"""CUDA arrays and texture/surface objects in a capture (docs/capture-format.md, "Arrays
and texture objects"): the typed records `Capture` gives, the array formats kerncap
copies, and the checks the schema cannot make (a size that fits the descriptor, objects
naming arrays and regions that exist).

An array's payload is its contents packed row after row (width x element bytes, then
rows, then slices or layers), as native/capture/array_capture.cpp writes it and
native/replay/arrays.cpp copies it back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kerncap.errors import CaptureFormatError

# CUarray_format -> (name, bytes per channel, channels it must have (0: any of 1, 2, 4), dtype
# for tolerance validation (None: byte-exact only)). Mirrors native/common/array_format.hpp.
FORMATS: dict[int, tuple[str, int, int, str | None]] = {
    0x01: ("uint8", 1, 0, "uint8"), 0x02: ("uint16", 2, 0, None), 0x03: ("uint32", 4, 0, None),
    0x08: ("int8", 1, 0, "int8"), 0x09: ("int16", 2, 0, None), 0x0A: ("int32", 4, 0, "int32"),
    0x10: ("half", 2, 0, "float16"), 0x20: ("float", 4, 0, "float32"),
    0xC0: ("unorm8", 1, 1, "uint8"), 0xC1: ("unorm8", 1, 2, "uint8"), 0xC2: ("unorm8", 1, 4, "uint8"),
    0xC3: ("unorm16", 2, 1, None), 0xC4: ("unorm16", 2, 2, None), 0xC5: ("unorm16", 2, 4, None),
    0xC6: ("snorm8", 1, 1, "int8"), 0xC7: ("snorm8", 1, 2, "int8"), 0xC8: ("snorm8", 1, 4, "int8"),
    0xC9: ("snorm16", 2, 1, None), 0xCA: ("snorm16", 2, 2, None), 0xCB: ("snorm16", 2, 4, None),
}
LAYERED, SURFACE_LDST, CUBEMAP = 0x01, 0x02, 0x04
OLDER_CAPTURE = ("CUDA arrays and texture/surface objects: this kerncap did not record them, so a kernel that "
                 "samples textures or writes surfaces replays without them; extract again with this kerncap")


def element_bytes(fmt: int, channels: int) -> int:
    """Bytes of one element; 0 for a format kerncap does not copy."""
    entry = FORMATS.get(fmt)
    if entry is None or channels not in (1, 2, 4) or (entry[2] and entry[2] != channels):
        return 0
    return entry[1] * channels


def packed_bytes(fmt: int, channels: int, width: int, height: int, depth: int) -> int:
    return width * element_bytes(fmt, channels) * max(height, 1) * max(depth, 1)


def format_text(fmt: int, channels: int) -> str:
    name = FORMATS.get(fmt, (f"format {fmt:#x}",))[0]
    return name + (f"x{channels}" if channels > 1 else "")


@dataclass(frozen=True)
class ArrayDescriptor:
    """CUDA_ARRAY3D_DESCRIPTOR as the driver reported it (sizes in elements, 0 = unused)."""
    id: int
    handle: int         # the app's handle (informational)
    format: int
    channels: int
    width: int
    height: int
    depth: int
    flags: int


@dataclass(frozen=True)
class CudaArray(ArrayDescriptor):
    api: str
    size: int           # packed bytes of the payload (0 when not captured)
    surface: bool       # a surface object reaches it: the kernel may write it
    mipmap: int | None  # a level of that mipmapped array
    level: int
    captured: bool
    why: str            # why its contents were not captured
    written: bool
    zero_fraction: float
    pre: list[str | None]
    post: list[str | None]

    @property
    def label(self) -> str:
        return f"array {self.id}"

    @property
    def dims(self) -> str:
        """'1024x768 float', '64x64x6 halfx4 (layered)'."""
        d = "x".join(str(v) for v in (self.width, self.height, self.depth) if v) or "0"
        kinds = [k for bit, k in ((LAYERED, "layered"), (CUBEMAP, "cubemap"), (SURFACE_LDST, "surface")) if self.flags & bit]
        level = f", level {self.level} of mipmapped array {self.mipmap}" if self.mipmap is not None else ""
        return f"{d} {format_text(self.format, self.channels)}" + (f" ({', '.join(kinds)})" if kinds else "") + level

    @property
    def dtype(self) -> str | None:
        """The element type tolerance validation compares it as, when there is one."""
        entry = FORMATS.get(self.format)
        return entry[3] if entry else None


@dataclass(frozen=True)
class MipmappedArray(ArrayDescriptor):
    levels: int
    level_arrays: list[int]


@dataclass(frozen=True)
class TextureObject:
    id: int
    kind: str                     # texture | surface
    handle: int                   # the app's handle value
    resource: dict[str, Any]
    texture: dict[str, Any] | None
    view: dict[str, Any] | None
    params: list[int]             # parameters holding its handle
    restorable: bool
    why: str
    found_in: list[str] = field(default_factory=list)  # handle tables in device memory

    @property
    def label(self) -> str:
        return f"{self.kind} object {self.id} (handle {self.handle})"

    @property
    def resource_text(self) -> str:
        r = self.resource
        kind = r.get("type")
        if kind == "array":
            return f"array {r.get('array', '?')}"
        if kind == "mipmapped_array":
            return f"mipmapped array {r.get('mipmapped_array', '?')}"
        if kind in ("linear", "pitch2d"):
            where = f"region {r['region']}" if r.get("region") is not None else "no region"
            shape = (f"{r.get('size', 0)} bytes" if kind == "linear"
                     else f"{r.get('width')}x{r.get('height')}, pitch {r.get('pitch')}")
            return f"{kind} {format_text(r.get('format', 0), r.get('channels', 1))} {shape} at {r.get('address', 0):#x} ({where})"
        return str(kind)


def replayed_arrays(arrays: list[CudaArray], mipmaps: list[MipmappedArray]) -> tuple[list[CudaArray], list[MipmappedArray]]:
    """The arrays and mipmapped arrays a replay recreates, in its order: captured arrays,
    and mipmapped arrays whose every level was captured (a level of another one is left
    out with it). The replay server and the tools that number its items agree on this."""
    captured = {a.id for a in arrays if a.captured}
    kept = [m for m in mipmaps if m.level_arrays and all(k in captured for k in m.level_arrays)]
    ids = {m.id for m in kept}
    return [a for a in arrays if a.captured and (a.mipmap is None or a.mipmap in ids)], kept


def parse(m: dict[str, Any]) -> tuple[list[CudaArray], list[MipmappedArray], list[TextureObject]]:
    """The typed records of a manifest already checked against its schema."""
    arrays = [
        CudaArray(
            id=a["id"], handle=a.get("handle", 0), api=a.get("api", "?"), format=a["format"], channels=a["channels"],
            width=a["width"], height=a["height"], depth=a["depth"], flags=a["flags"], size=a["size"],
            surface=bool(a.get("surface")), mipmap=(a.get("mipmap") or {}).get("id"),
            level=(a.get("mipmap") or {}).get("level", 0), captured=a["captured"], why=a.get("why", ""),
            written=bool(a.get("written")), zero_fraction=float(a.get("zero_fraction", 0.0)),
            pre=list(a["pre"]), post=list(a["post"]),
        )
        for a in m.get("arrays", [])
    ]
    mipmaps = [
        MipmappedArray(id=x["id"], handle=x.get("handle", 0), format=x["format"], channels=x["channels"],
                       width=x["width"], height=x["height"], depth=x["depth"], flags=x["flags"], levels=x["levels"],
                       level_arrays=list(x.get("level_arrays", [])))
        for x in m.get("mipmapped_arrays", [])
    ]
    objects = [
        TextureObject(id=o["id"], kind=o["kind"], handle=o["handle"], resource=dict(o["resource"]),
                      texture=o.get("texture"), view=o.get("view"), params=list(o.get("params", [])),
                      restorable=o["restorable"], why=o.get("why", ""), found_in=list(o.get("found_in", [])))
        for o in m.get("texture_objects", [])
    ]
    return arrays, mipmaps, objects


def check_layout(where, chunk_count, arrays: list[CudaArray], mipmaps: list[MipmappedArray],
                 objects: list[TextureObject], regions: dict[int, Any], params: list[Any]) -> None:
    """What the schema cannot say: each array's size is what its descriptor makes and its
    chunks fit it; every id an object, an array or a parameter names exists; linear and
    pitched resources lie inside their region. `where`: the manifest's path."""
    hint = "the capture is damaged; extract again"

    def bad(field_: str, what: str) -> CaptureFormatError:
        return CaptureFormatError(f"{where}: field {field_} {what}", hint)

    for kind, items in (("arrays", arrays), ("mipmapped_arrays", mipmaps), ("texture_objects", objects)):
        if len({x.id for x in items}) != len(items):
            raise bad(kind, "lists an id twice")
    array_ids, mipmap_ids, object_ids = {a.id for a in arrays}, {x.id for x in mipmaps}, {o.id for o in objects}
    for i, a in enumerate(arrays):
        f = f"arrays[{i}]"
        if a.captured:
            want = packed_bytes(a.format, a.channels, a.width, a.height, a.depth)
            if want == 0 and a.format in FORMATS:
                raise bad(f"{f}.channels", f"{a.channels} does not fit format {FORMATS[a.format][0]} ({a.format:#x})")
            if want == 0:
                raise bad(f"{f}.format", f"{a.format:#x} with {a.channels} channel(s) is not a format kerncap captures")
            if a.size != want:
                raise bad(f"{f}.size", f"is {a.size} bytes; a {a.dims} array holds {want}")
        n = chunk_count(a.size) if a.captured else 0
        if len(a.pre) != n or len(a.post) != n:
            raise bad(f"{f}.pre/post", f"list {len(a.pre)}/{len(a.post)} chunks, expected {n} for {a.size} bytes")
        if a.mipmap is not None and a.mipmap not in mipmap_ids:
            raise bad(f"{f}.mipmap.id", f"names mipmapped array {a.mipmap}, which the manifest does not list")
    for i, x in enumerate(mipmaps):
        for k in x.level_arrays:
            if k not in array_ids:
                raise bad(f"mipmapped_arrays[{i}].level_arrays", f"names array {k}, which the manifest does not list")
    for i, o in enumerate(objects):
        f = f"texture_objects[{i}].resource"
        r = o.resource
        kind = r.get("type")
        if kind == "array" and "array" in r and r["array"] not in array_ids:
            raise bad(f"{f}.array", f"names array {r['array']}, which the manifest does not list")
        if kind == "mipmapped_array" and "mipmapped_array" in r and r["mipmapped_array"] not in mipmap_ids:
            raise bad(f"{f}.mipmapped_array", f"names mipmapped array {r['mipmapped_array']}, which the manifest does not list")
        if o.restorable and kind in ("array", "mipmapped_array") and kind not in r:
            raise bad(f, f"is a restorable {kind} resource that names no {kind.replace('_', ' ')}")
        if o.kind == "surface" and o.restorable and kind != "array":
            raise bad(f"{f}.type", f"is {kind}; a surface object's resource is an array")
        if kind in ("linear", "pitch2d") and o.restorable:
            for key in ("address", "format", "channels") + (("size",) if kind == "linear" else ("width", "height", "pitch")):
                if key not in r:
                    raise bad(f"{f}.{key}", "is missing")
            region = regions.get(r.get("region")) if r.get("region") is not None else None
            if region is None:
                raise bad(f"{f}.region", f"names region {r.get('region')}, which the manifest does not list")
            size = r["size"] if kind == "linear" else r["pitch"] * r["height"]
            if not (region.base <= r["address"] and r["address"] + size <= region.end):
                raise bad(f"{f}.address", f"{r['address']:#x} + {size} bytes lies outside region {region.id}")
        if kind == "unknown" and o.restorable:
            raise bad(f"{f}.type", "is unknown, yet the object is marked restorable")
        for p in o.params:
            if p not in {q.index for q in params}:
                raise bad(f"texture_objects[{i}].params", f"names parameter {p}, which the manifest does not list")
    for p in params:
        if p.handle_object is not None:
            if p.handle_object not in object_ids:
                raise bad(f"params[{p.index}].handle.object",
                          f"names texture object {p.handle_object}, which the manifest does not list")
            if p.size != 8:
                raise bad(f"params[{p.index}].handle", f"is on a {p.size}-byte parameter; a handle takes 8 bytes")
