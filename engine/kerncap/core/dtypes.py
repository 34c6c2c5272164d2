"""The one table of element types: names and aliases, sizes, decoding on the host.

Tolerance validation compares on the GPU (native/replay/compare.cpp knows the types
marked `compare`); the workbench's memory view decodes any of them for display."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from kerncap.errors import KerncapError


@dataclass(frozen=True)
class Dtype:
    name: str
    code: str        # struct code ('' for bfloat16: decoded by hand, the top half of a float32)
    size: int
    is_float: bool
    compare: bool    # the GPU comparison of `kerncap validate --atol/--rtol` supports it


_TABLE = [  # display order (the workbench cycles through it)
    Dtype("float32", "f", 4, True, True),
    Dtype("float16", "e", 2, True, True),
    Dtype("bfloat16", "", 2, True, True),
    Dtype("float64", "d", 8, True, True),
    Dtype("int32", "i", 4, False, True),
    Dtype("uint32", "I", 4, False, False),
    Dtype("int64", "q", 8, False, False),
    Dtype("int8", "b", 1, False, True),
    Dtype("uint8", "B", 1, False, True),
]
TABLE: dict[str, Dtype] = {d.name: d for d in _TABLE}
# The element types tolerance validation accepts, as the CLI lists them.
COMPARABLE: tuple[str, ...] = ("float64", "float32", "float16", "bfloat16", "int32", "int8", "uint8")
assert set(COMPARABLE) == {d.name for d in _TABLE if d.compare}

ALIASES = {
    "f64": "float64", "fp64": "float64", "double": "float64",
    "f32": "float32", "fp32": "float32", "float": "float32",
    "f16": "float16", "fp16": "float16", "half": "float16",
    "bf16": "bfloat16",
    "i32": "int32", "int": "int32", "u32": "uint32",
    "i64": "int64", "long": "int64",
    "i8": "int8", "u8": "uint8", "bool": "uint8",
}


def normalize(name: str) -> str:
    """Canonical name of a dtype tolerance validation accepts, for "float32", "fp16",
    "torch.bfloat16", "*fp32" (Triton) ..."""
    key = name.strip().lower().removeprefix("torch.").lstrip("*")
    key = ALIASES.get(key, key)
    if key not in COMPARABLE:
        raise KerncapError(
            f"unsupported dtype {name!r} for tolerance validation",
            f"use one of {', '.join(COMPARABLE)}",
        )
    return key


def itemsize(dtype: str) -> int:
    return TABLE[dtype].size


def is_float(dtype: str) -> bool:
    return TABLE[dtype].is_float


def decode(dtype: str, raw: bytes) -> list[float | int]:
    """The whole elements in `raw` as Python numbers (a partial last element is dropped)."""
    d = TABLE[dtype]
    n = len(raw) // d.size
    if dtype == "bfloat16":
        return [struct.unpack("<f", b"\0\0" + raw[i * 2 : i * 2 + 2])[0] for i in range(n)]
    return list(struct.unpack(f"<{n}{d.code}", raw[: n * d.size]))


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


# -- numpy views of captured bytes (kerncap dump, the mismatch report) -----------------------

# numpy has no bfloat16: its bits travel as uint16 and the sidecar says so.
_NUMPY = {"float32": "<f4", "float16": "<f2", "bfloat16": "<u2", "float64": "<f8", "int32": "<i4",
          "uint32": "<u4", "int64": "<i8", "int8": "i1", "uint8": "u1"}


def lookup(name: str) -> str | None:
    """Canonical name of any dtype of the table ("fp16", "torch.int64", "*i32" ...), or None."""
    key = name.strip().lower().removeprefix("torch.").lstrip("*")
    key = ALIASES.get(key, key)
    return key if key in TABLE else None


def numpy_dtype(dtype: str):
    """The numpy dtype that holds `dtype`'s bytes unchanged (bfloat16: uint16)."""
    import numpy as np

    return np.dtype(_NUMPY[dtype])


def as_float64(dtype: str, raw):
    """A numpy array of `dtype` elements (or their bits, for bfloat16) as float64."""
    import numpy as np

    if dtype == "bfloat16":
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return raw.astype(np.float64)


def mismatch_mask(dtype: str, actual, expected, atol: float, rtol: float):
    """`mismatches` for numpy arrays of float64 (the GPU kernel's predicate, element-wise)."""
    import numpy as np

    a, e = actual, expected
    if not is_float(dtype):
        return a != e
    with np.errstate(invalid="ignore", over="ignore"):
        an, en = np.isnan(a), np.isnan(e)
        unequal = (a != e) & ~an & ~en
        inf = np.isinf(a) | np.isinf(e)
        within = np.abs(a - e) <= atol + rtol * np.abs(e)
        return (an != en) | (unequal & (inf | ~within))
