"""The element-wise comparison's semantics on planted values (tests/compare_cases.py):
NaN equals NaN whatever its payload, an infinity equals only itself, a finite value
never matches an infinite one (no rtol covers it), |a - e| <= atol + rtol * |e| else,
-0 equals +0, integers compare exactly; for float64, float32, float16, bfloat16 and
int32, with exact counts from how the values were planted. Here through the engine's
predicate (kerncap.core.dtypes.mismatches) and the replay stand-in that uses it
(tests/replay_sim.py); tests/gpu/test_compare_gpu.py runs the same cases through the
real compare kernel on the H200."""

from __future__ import annotations

import math

import numpy as np
import pytest

import compare_cases as cc
import replay_sim as sim
from kerncap.core import dtypes as dt


@pytest.mark.parametrize("dtype", cc.DTYPES)
@pytest.mark.parametrize("tol", cc.TOLERANCES, ids=["atol-rtol", "zero"])
def test_planted_mismatches_are_counted_exactly(dtype, tol):
    p = cc.plant(dtype, 16384)
    atol, rtol = tol
    out = sim.compare(p.actual, p.expected, sim.Spec(dtype=dtype, atol=atol, rtol=rtol))
    assert out["mismatched_elements"] == p.mismatches[tol], (dtype, tol)
    assert out["mismatched_bytes"] == p.differing_bytes
    assert out["first_element"] == 16  # the first planted case mismatches at either tolerance


@pytest.mark.parametrize("name,count,actual,expected,bad,bad_exactly", cc.CATEGORIES, ids=[c[0] for c in cc.CATEGORIES])
def test_the_engine_predicate_per_category(name, count, actual, expected, bad, bad_exactly):
    as_float = {"nan": math.nan, "nan+1": math.nan}
    a, e = as_float.get(actual, actual), as_float.get(expected, expected)
    assert dt.mismatches("float32", a, e, cc.ATOL, cc.RTOL) is bad
    assert dt.mismatches("float32", a, e, 0.0, 0.0) is bad_exactly


@pytest.mark.parametrize("dtype", cc.FLOATS)
@pytest.mark.parametrize("tol", cc.TOLERANCES, ids=["atol-rtol", "zero"])
def test_the_mismatch_maps_predicate_counts_the_planted_cases(dtype, tol):
    """kerncap.core.dtypes.mismatch_mask (the mismatch report's, on numpy arrays) gives the
    planted counts too, on the values as decoded for the report."""
    p = cc.plant(dtype, 16384)
    a, e = (dt.as_float64(dtype, np.frombuffer(side, dt.numpy_dtype(dtype))) for side in (p.actual, p.expected))
    assert int(dt.mismatch_mask(dtype, a, e, *tol).sum()) == p.mismatches[tol], (dtype, tol)


def test_a_finite_value_against_an_infinite_one_is_a_mismatch_in_the_stand_in():
    """The stand-in once counted it within rtol (rtol * inf admits anything finite)."""
    p = cc.plant("float32", 16384)
    out = sim.compare(p.actual, p.expected, sim.Spec(dtype="float32", atol=0.0, rtol=1.0))
    infinite = sum(c[1] for c in cc.CATEGORIES if isinstance(c[3], float) and math.isinf(c[3])
                   and not (isinstance(c[2], float) and c[2] == c[3]))
    assert infinite == 4 and out["mismatched_elements"] >= infinite + 5 + 3 + 6  # NaNs and +inf vs 1.5 too


def test_tail_bytes_past_the_last_element_compare_exactly():
    p = cc.plant("float32", 16384)
    actual, expected = p.actual + b"\x01\x02\x03", p.expected + b"\x01\x09\x09"  # 2 of 3 tail bytes differ
    out = sim.compare(actual, expected, sim.Spec(dtype="float32", atol=cc.ATOL, rtol=cc.RTOL))
    assert out["mismatched_elements"] == p.mismatches[(cc.ATOL, cc.RTOL)] + 2


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # the stand-in axpy on planted NaNs
@pytest.mark.parametrize("dtype", cc.DTYPES)
def test_validate_of_a_planted_reproducer_counts_them(dtype, tmp_path, monkeypatch):
    """The whole path the GPU test takes (client, server, NativeSession, the result),
    with the stand-in core: region 0's count for each tolerance, and byte-exact."""
    sim.axpy_reproducer(tmp_path / "sim", monkeypatch, {"captured": sim.axpy})
    repro, p = cc.planted_reproducer(sim.AXPY, tmp_path / "planted", dtype)
    with sim.InProcessClient(repro) as rc:
        for (atol, rtol), want in p.mismatches.items():
            v = rc.validate(atol=atol, rtol=rtol, dtype="float32", dtypes={0: dtype})
            x = next(r for r in v.regions if r.kind == "region" and r.id == 0)
            assert (x.dtype, x.mismatched_elements) == (dtype, want), (atol, rtol)
        exact = next(r for r in rc.validate().regions if r.kind == "region" and r.id == 0)
        assert exact.mismatched_bytes == p.differing_bytes and not exact.passed
