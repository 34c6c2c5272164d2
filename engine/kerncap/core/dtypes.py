"""Element types for tolerance validation: names, sizes, and decoding on the host of
the few elements around a mismatch (the comparison itself runs on the GPU)."""

from __future__ import annotations

import math
import struct

from kerncap.errors import KerncapError

# canonical name -> (struct format, bytes, floating point)
DTYPES: dict[str, tuple[str, int, bool]] = {
    "float64": ("<d", 8, True),
    "float32": ("<f", 4, True),
    "float16": ("<e", 2, True),
    "bfloat16": ("", 2, True),  # decoded by hand: the top half of a float32
    "int32": ("<i", 4, False),
    "int8": ("<b", 1, False),
    "uint8": ("<B", 1, False),
}

ALIASES = {
    "f64": "float64", "fp64": "float64", "double": "float64",
    "f32": "float32", "fp32": "float32", "float": "float32",
    "f16": "float16", "fp16": "float16", "half": "float16",
    "bf16": "bfloat16",
    "i32": "int32", "int": "int32",
    "i8": "int8", "u8": "uint8", "bool": "uint8",
}


def normalize(name: str) -> str:
    """Canonical dtype name for "float32", "fp16", "torch.bfloat16", "*fp32" (Triton) ..."""
    key = name.strip().lower().removeprefix("torch.").lstrip("*")
    key = ALIASES.get(key, key)
    if key not in DTYPES:
        raise KerncapError(
            f"unsupported dtype {name!r} for tolerance validation",
            f"use one of {', '.join(DTYPES)}",
        )
    return key


def itemsize(dtype: str) -> int:
    return DTYPES[dtype][1]


def is_float(dtype: str) -> bool:
    return DTYPES[dtype][2]


def decode(dtype: str, raw: bytes) -> list[float | int]:
    """The whole elements in `raw` as Python numbers."""
    fmt, size, _ = DTYPES[dtype]
    n = len(raw) // size
    if dtype == "bfloat16":
        return [struct.unpack("<f", b"\0\0" + raw[i * 2 : i * 2 + 2])[0] for i in range(n)]
    return [struct.unpack_from(fmt, raw, i * size)[0] for i in range(n)]


def mismatches(dtype: str, actual: float | int, expected: float | int, atol: float, rtol: float) -> bool:
    """The GPU kernel's predicate: |a - e| > atol + rtol * |e|; NaN equals NaN, an
    infinity equals only itself, integers compare exactly."""
    if not is_float(dtype):
        return actual != expected
    if math.isnan(actual) or math.isnan(expected):
        return not (math.isnan(actual) and math.isnan(expected))
    if actual == expected:
        return False
    if math.isinf(actual) or math.isinf(expected):  # unequal infinities: no tolerance covers them
        return True
    return not (abs(actual - expected) <= atol + rtol * abs(expected))
