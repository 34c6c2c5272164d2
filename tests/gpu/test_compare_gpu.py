"""The GPU compare kernel's tolerance semantics (native/replay/compare_kernels.cu) on
planted values (tests/compare_cases.py): NaN vs a number, NaN vs NaN of another
payload, +-inf against numbers and each other, values within rtol but not atol, within
and beyond atol at zero, -0 vs +0, in float64, float32, float16, bfloat16 and int32,
at atol/rtol (0.01, 0.05) and at zero tolerance, with the exact counts the planting
gives. The x region of the session's axpy capture holds them (pre-state = actual,
post-state = expected; the kernel only reads x). The CPU suite runs the same cases
through the engine's predicate (tests/test_compare_semantics.py).

Run on the GPU machine: bash tests/gpu/run.sh tests/gpu/test_compare_gpu.py
"""

from __future__ import annotations

import pytest

import compare_cases as cc

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", cc.DTYPES)
def test_compare_kernel_counts_planted_values_exactly(captures, tmp_path, dtype):
    from kerncap.replay.client import ReplayClient

    got = captures.get("axpy_inplace")
    x = got.region_of("x").id
    repro, planted = cc.planted_reproducer(got.reproducer, tmp_path / "planted", dtype, region=x)
    with ReplayClient(repro) as rc:
        seen = {}
        for (atol, rtol), want in planted.mismatches.items():
            v = rc.validate(atol=atol, rtol=rtol, dtype="float32", dtypes={x: dtype})
            check = next(r for r in v.regions if r.kind == "region" and r.id == x)
            seen[(atol, rtol)] = (check.dtype, check.mismatched_elements)
            print(f"{dtype} atol={atol} rtol={rtol}: {check.mismatched_elements} mismatches (planted {want}); "
                  f"max abs {check.max_abs_err}, max rel {check.max_rel_err}")
        assert seen == {t: (dtype, n) for t, n in planted.mismatches.items()}
        exact = next(r for r in rc.validate().regions if r.kind == "region" and r.id == x)
        assert exact.mismatched_bytes == planted.differing_bytes and not exact.passed
