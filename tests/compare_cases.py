"""Planted values for the element-wise comparison (native/replay/compare_kernels.cu and
kerncap.core.dtypes.mismatches): NaN, +-inf, signed zeros, values inside and outside
atol and rtol, for float64, float32, float16, bfloat16 and int32. The expected mismatch
counts come from how the values were planted (the CATEGORIES table), not from the
predicate under test. Used on the CPU through tests/replay_sim.py and on the GPU through
the real compare kernel (tests/gpu/test_compare_gpu.py), the same way: a copy of an axpy
capture (the committed one here, the session's on the GPU) whose x region (read by the
kernel, never written) holds the planted "actual" values as its pre-state and the
"expected" ones as its post-state, so a replay leaves "actual" in place and compares
it with "expected".
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ATOL, RTOL = 0.01, 0.05
TOLERANCES = ((ATOL, RTOL), (0.0, 0.0))
FLOATS = ("float64", "float32", "float16", "bfloat16")
DTYPES = (*FLOATS, "int32")
NAN, INF = float("nan"), float("inf")

# (name, how many, actual, expected, mismatch at (ATOL, RTOL), mismatch at (0, 0))
CATEGORIES = [
    ("NaN vs a number", 5, NAN, 1.5, True, True),
    ("a number vs NaN", 3, 1.5, NAN, True, True),
    ("NaN vs NaN, other payload", 4, "nan", "nan+1", False, False),
    ("+inf vs a number", 6, INF, 1.5, True, True),
    ("a number vs -inf", 2, 1.5, -INF, True, True),
    ("+inf vs +inf", 3, INF, INF, False, False),
    ("+inf vs -inf", 2, INF, -INF, True, True),
    ("within rtol, not atol (100 vs 102)", 7, 102.0, 100.0, False, True),
    # rtol is of the expected value: 0.0625 > 0.01 + 0.05 * 1, though <= 0.01 + 0.05 * 1.0625
    ("within rtol of the actual value only (1.0625 vs 1)", 4, 1.0625, 1.0, True, True),
    ("beyond both (2.0 vs 1.5)", 9, 2.0, 1.5, True, True),
    ("within atol at zero (0.005 vs 0)", 2, 0.005, 0.0, False, True),
    ("beyond atol at zero (0.02 vs 0)", 1, 0.02, 0.0, True, True),
    ("-0 vs +0", 2, -0.0, 0.0, False, False),
]
INT_DIFFERENCES = 7  # int32: planted unequal values, mismatches whatever the tolerance

ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int32": 4}
_BITS = {"float64": np.uint64, "float32": np.uint32, "float16": np.uint16, "bfloat16": np.uint16, "int32": np.uint32}


@dataclass
class Planted:
    dtype: str
    actual: bytes
    expected: bytes
    mismatches: dict[tuple[float, float], int]  # (atol, rtol) -> expected element mismatches

    @property
    def differing_bytes(self) -> int:
        return int(np.count_nonzero(np.frombuffer(self.actual, np.uint8) != np.frombuffer(self.expected, np.uint8)))


def _bits(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":  # the upper half of a float32 (every planted value is exact in bf16)
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return values.astype({"float64": np.float64, "float32": np.float32, "float16": np.float16}[dtype]).view(_BITS[dtype])


def plant(dtype: str, nbytes: int) -> Planted:
    """`nbytes` of `dtype` elements: a filler both sides share (1 + k/128, exact in every
    float type), then the CATEGORIES at indices 16, 19, 22, ..."""
    n = nbytes // ITEMSIZE[dtype]
    if dtype == "int32":
        e = (np.arange(n, dtype=np.int64) % 1000).astype(np.int32)
        a = e.copy()
        a[16:16 + 3 * INT_DIFFERENCES:3] += 1
        return Planted(dtype, a.tobytes(), e.tobytes(), {t: INT_DIFFERENCES for t in TOLERANCES})
    filler = 1.0 + (np.arange(n) % 97) / 128.0
    a, e = _bits(filler, dtype), _bits(filler, dtype)
    nan_bits = int(_bits(np.array([NAN]), dtype)[0])
    at = 16
    counts = {t: 0 for t in TOLERANCES}
    for _name, count, actual, expected, bad, bad_exactly in CATEGORIES:
        for _ in range(count):
            for side, value in ((a, actual), (e, expected)):
                if value == "nan":
                    side[at] = nan_bits
                elif value == "nan+1":
                    side[at] = nan_bits | 1  # a quiet NaN with another payload
                else:
                    side[at] = _bits(np.array([value]), dtype)[0]
            at += 3
        counts[(ATOL, RTOL)] += count * bad
        counts[(0.0, 0.0)] += count * bad_exactly
    assert at < n, f"{nbytes} bytes hold too few {dtype} elements for the planted cases"
    return Planted(dtype, a.tobytes(), e.tobytes(), counts)


def planted_reproducer(source: Path, dest: Path, dtype: str, region: int = 0) -> tuple[Path, Planted]:
    """A copy of the axpy reproducer `source` whose `region` (x: the kernel only reads
    it) holds planted values in its first chunk: its pre-state (what replay leaves
    there) is the actual side, its post-state the expected side."""
    from kerncap.reproducer.store import chunk_hash

    shutil.copytree(source, dest)
    path = dest / "capture" / "manifest.json"
    manifest = json.loads(path.read_text())
    x = next(r for r in manifest["regions"] if r["id"] == region)
    size = min(x["size"], manifest["chunk_size"])
    planted = plant(dtype, size)
    hashes = []
    for side in (planted.actual, planted.expected):
        data = side + bytes(size - len(side))  # whole chunk: any bytes past the last element equal on both sides
        h = chunk_hash(data)
        (dest / "capture" / "blobs" / f"{h}.bin").write_bytes(data)
        hashes.append(h)
    x["pre"] = [hashes[0], *x["pre"][1:]]
    x["post"] = [hashes[1], *x["post"][1:]]
    x["written"] = True  # its post-state differs from its pre-state now
    path.write_text(json.dumps(manifest, indent=1))
    return dest, planted
