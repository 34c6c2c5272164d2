"""A SYNTHETIC capture holding CUDA arrays and texture/surface objects, for the CPU tests
of what reads them (format, schema, info, prune, pack, store, the memory map, the replay
specs, fuzzing). It is the real H200 capture tests/fixtures/captures/axpy_small with the
records the interposer writes for arrays and objects added by hand (docs/capture-format.md,
"Arrays and texture objects"): a 64x32 float array bound to a texture and a surface
(the kernel wrote it), a mipmapped uint8x4 array with two levels, a texture over region
0 as pitched memory, and one whose array was freed. The GPU suite makes real ones
(tests/gpu/test_textures.py)."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import xxhash

AXPY = Path(__file__).resolve().parent / "fixtures" / "captures" / "axpy_small"
TEXTURE_PARAM_OFFSETS = (32, 40)  # parameters 4 (texture object 0) and 5 (surface object 1)


def _blobs() -> dict[str, bytes]:
    """The array payloads by name: a 64x32 float image before and after a surface write,
    and two mip levels of uint8x4."""
    datas = [struct.pack("<2048f", *[(i % 64) * 0.25 + (i // 64) for i in range(2048)]),
             struct.pack("<2048f", *[float(i) for i in range(2048)]),
             bytes((i * 7) & 0xFF for i in range(16 * 16 * 4)),
             bytes((i * 3 + 1) & 0xFF for i in range(8 * 8 * 4))]
    return {xxhash.xxh64_hexdigest(d): d for d in datas}


def _array(i: int, fmt: int, channels: int, w: int, h: int, elem: int, pre: str, post: str, **extra) -> dict:
    return {"id": i, "handle": 0x55550000 + 0x100 * i, "api": "cuArray3DCreate_v2", "format": fmt,
            "format_name": {0x20: "float", 0x01: "uint8"}[fmt], "channels": channels, "width": w, "height": h,
            "depth": 0, "flags": 2 if i == 0 else 0, "size": w * h * elem, "surface": i == 0, "captured": True,
            "written": pre != post, "zero_fraction": 0.0, "pre": [pre], "post": [post], **extra}


TEXTURE = {"address_mode": [1, 1, 1], "filter_mode": 1, "flags": 2, "max_anisotropy": 0, "mipmap_filter_mode": 0,
           "mipmap_level_bias": 0.100000001, "min_mipmap_level_clamp": 0, "max_mipmap_level_clamp": 0,
           "border_color": [0, 0, 0, 1]}


def texture_manifest() -> dict:
    """The synthetic manifest (its array payloads are _blobs())."""
    m = json.loads((AXPY / "capture" / "manifest.json").read_text())
    a0, a0_post, l0, l1 = _blobs()
    m["arrays"] = [
        _array(0, 0x20, 1, 64, 32, 4, a0, a0_post),
        _array(1, 0x01, 4, 16, 16, 4, l0, l0, api="cuMipmappedArrayGetLevel", mipmap={"id": 0, "level": 0}),
        _array(2, 0x01, 4, 8, 8, 4, l1, l1, api="cuMipmappedArrayGetLevel", mipmap={"id": 0, "level": 1}),
    ]
    m["mipmapped_arrays"] = [{"id": 0, "handle": 0x55560000, "format": 1, "format_name": "uint8", "channels": 4,
                              "width": 16, "height": 16, "depth": 0, "flags": 0, "levels": 2, "level_arrays": [1, 2]}]
    region0 = m["regions"][0]
    m["texture_objects"] = [
        {"id": 0, "kind": "texture", "handle": 1, "resource": {"type": "array", "array": 0, "flags": 0},
         "texture": TEXTURE, "params": [4], "restorable": True},
        {"id": 1, "kind": "surface", "handle": 2, "resource": {"type": "array", "array": 0, "flags": 0},
         "params": [5], "restorable": True},
        {"id": 2, "kind": "texture", "handle": 3, "resource": {"type": "mipmapped_array", "mipmapped_array": 0,
                                                                "flags": 0},
         "texture": TEXTURE, "view": {"format": 3, "width": 16, "height": 16, "depth": 0, "first_mipmap_level": 0,
                                      "last_mipmap_level": 1, "first_layer": 0, "last_layer": 0},
         "params": [], "restorable": True},
        {"id": 3, "kind": "texture", "handle": 4,
         "resource": {"type": "pitch2d", "address": region0["base"], "format": 0x20, "channels": 1, "width": 1000,
                      "height": 4, "pitch": 4096, "region": 0, "flags": 0},
         "texture": TEXTURE, "params": [], "restorable": True},
        {"id": 4, "kind": "texture", "handle": 5, "resource": {"type": "array", "flags": 0}, "texture": TEXTURE,
         "params": [], "restorable": False,
         "why": "its CUDA array 0x55559900 was destroyed (cuArrayDestroy) before the dispatch"},
    ]
    m["texture_instructions"] = "texture and surface"
    m["closure"] = {"words_checked": 3, "unresolved": []}  # checked, as a capture of this kerncap is
    buffer = bytes.fromhex(m["param_buffer"])
    buffer += struct.pack("<QQ", 1, 2)
    m["param_buffer"] = buffer.hex()
    for index, (offset, handle, obj, kind) in enumerate(zip(TEXTURE_PARAM_OFFSETS, (1, 2), (0, 1),
                                                           ("texture", "surface")), start=4):
        m["params"].append({"index": index, "offset": offset, "size": 8, "value": struct.pack("<Q", handle).hex(),
                            "handle": {"object": obj, "kind": kind, "match": "signature"}})
    return m


def make_texture_capture(dst: Path) -> Path:
    """The synthetic reproducer at `dst` (returned)."""
    shutil.copytree(AXPY, dst)
    cap = dst / "capture"
    for h, data in _blobs().items():
        (cap / "blobs" / f"{h}.bin").write_bytes(data)
    (cap / "manifest.json").write_text(json.dumps(texture_manifest(), indent=1))
    return dst
