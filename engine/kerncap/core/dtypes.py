"""The one table of element types: names and aliases, sizes, value ranges, the C++
spellings that denote them, numpy's names, decoding on the host.

Tolerance validation compares on the GPU (native/replay/compare.cpp knows the types
marked `compare`) and perturbed validation fills on it (native/replay/fill.cpp, the same
types); tests/test_dtypes.py checks both native tables against this one. The workbench's
memory view decodes any of them for display."""

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
    compare: bool    # the GPU comparison (and fill) of validation supports it
    lo: float        # the most negative finite value
    hi: float        # the largest finite value
    numpy: str = ""  # numpy's name ('' for bfloat16: numpy has none)
    cxx: tuple[str, ...] = ()  # C++ spellings of a kernel parameter's element type (typed_spans)


_TABLE = [  # display order (the workbench cycles through it)
    Dtype("float32", "f", 4, True, True, -3.4028234663852886e38, 3.4028234663852886e38, "float32", ("float",)),
    Dtype("float16", "e", 2, True, True, -65504.0, 65504.0, "float16", ("__half", "half", "__nv_half")),
    Dtype("bfloat16", "", 2, True, True, -3.3895313892515355e38, 3.3895313892515355e38, "",
          ("__nv_bfloat16", "nv_bfloat16")),
    Dtype("float64", "d", 8, True, True, -1.7976931348623157e308, 1.7976931348623157e308, "float64", ("double",)),
    Dtype("int32", "i", 4, False, True, -2147483648, 2147483647, "int32", ("int", "int32_t")),
    Dtype("uint32", "I", 4, False, False, 0, 4294967295, "uint32"),
    Dtype("int64", "q", 8, False, False, -(1 << 63), (1 << 63) - 1, "int64"),
    Dtype("int8", "b", 1, False, True, -128, 127, "int8", ("signed char", "char", "int8_t")),
    Dtype("uint8", "B", 1, False, True, 0, 255, "uint8", ("unsigned char", "bool", "uint8_t")),
]
TABLE: dict[str, Dtype] = {d.name: d for d in _TABLE}
# The element types tolerance validation accepts, as the CLI lists them.
COMPARABLE: tuple[str, ...] = ("float64", "float32", "float16", "bfloat16", "int32", "int8", "uint8")
assert set(COMPARABLE) == {d.name for d in _TABLE if d.compare}

# C++ integer spellings that name no type validation can compare or fill: their spans
# are integers (never perturbed) of no known dtype.
CXX_OTHER_INTEGERS = ("unsigned int", "short", "unsigned short", "long", "unsigned long", "long long",
                      "unsigned long long", "int64_t", "uint32_t", "uint64_t", "size_t")
# C++ spelling -> (role, dtype): "float" or "integer", and the comparable dtype or None.
CXX_TYPES: dict[str, tuple[str, str | None]] = {
    **{c: ("float" if d.is_float else "integer", d.name) for d in _TABLE if d.compare for c in d.cxx},
    **{c: ("integer", None) for c in CXX_OTHER_INTEGERS},
}
assert all(not d.cxx or d.compare for d in _TABLE)

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


def value_range(dtype: str) -> tuple[float, float]:
    """The finite values of `dtype`: (most negative, largest)."""
    d = TABLE[dtype]
    return d.lo, d.hi


def numpy_type(dtype: str):
    """numpy's type for `dtype` (bfloat16 has none: decode it by hand)."""
    import numpy as np

    name = TABLE[dtype].numpy
    if not name:
        raise KerncapError(f"numpy has no {dtype}", "decode it from the top halves of float32 values")
    return np.dtype(name).type


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
