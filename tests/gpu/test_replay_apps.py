"""Replay every capture: byte-exact validation, cubin variants, and timing against the
kernel's duration inside the original application."""

from __future__ import annotations

import re
import struct

import pytest
from kerncap.errors import KerncapError

from .apps import APPS, AppSpec, app_env

pytestmark = pytest.mark.gpu


def failing_regions(result) -> str:
    bad = [r for r in result.regions if r.mismatched_bytes or r.unexpected_write]
    return ", ".join(f"{r.kind} {r.id} {r.name}: {r.mismatched_bytes} bytes" for r in bad) or "(none listed)"


@pytest.mark.parametrize("app", sorted(APPS))
def test_validate_is_byte_exact(captures, app):
    from kerncap.replay.client import ReplayClient

    with ReplayClient(captures.get(app).reproducer) as rc:
        result = rc.validate()
    assert result.passed, f"{app}: replay differs from the captured post-state: {failing_regions(result)}"


# -- axpy_inplace variants (testapps/cuda/variants) ------------------------------------


def axpy_inputs(got):
    """(a, x, y_pre, y_post) of the captured axpy dispatch as numpy arrays."""
    np = pytest.importorskip("numpy")
    cap = got.capture
    a = struct.unpack("<f", next(p.value for p in cap.params if p.index == 0))[0]
    n = got.report["n"]

    def buffer(key, chunks):
        region = got.region_of(key)
        raw = cap.read_bytes(getattr(region, chunks), region.size)
        start = got.report[key] - region.base
        return np.frombuffer(raw, dtype=np.float32, count=n, offset=start)

    return a, buffer("x", "pre"), buffer("y", "pre"), buffer("y", "post")


def test_axpy_changed_constant_fails_on_y(captures, variant_cubins):
    from kerncap.replay.client import ReplayClient

    np = pytest.importorskip("numpy")
    got = captures.get("axpy_inplace")
    a, x, y_pre, y_post = axpy_inputs(got)
    # The app's inputs are small dyadic numbers: every product and sum is exact in
    # float32 (so fma == mul+add), and numpy predicts the variant's bytes exactly.
    assert np.array_equal(y_post, (np.float32(a) * x + y_pre).astype(np.float32))
    y_variant = (np.float32(a + 1.0) * x + y_pre).astype(np.float32)
    expected_mismatch = int(np.count_nonzero(y_variant.view(np.uint8) != y_post.view(np.uint8)))
    assert 0 < expected_mismatch <= got.report["n"] * 4

    with ReplayClient(got.reproducer) as rc:
        result = rc.validate(cubin=variant_cubins / "axpy_changed_constant.cubin")
    assert not result.passed
    bad = [r for r in result.regions if r.mismatched_bytes or r.unexpected_write]
    y_region = got.region_of("y")
    assert len(bad) == 1 and bad[0].id == y_region.id and bad[0].kind != "global", failing_regions(result)
    assert bad[0].mismatched_bytes == expected_mismatch


def test_axpy_out_of_bounds_is_reported_and_replay_recovers(captures, variant_cubins):
    from kerncap.replay.client import ReplayClient

    with ReplayClient(captures.get("axpy_inplace").reproducer) as rc:
        with pytest.raises(KerncapError) as err:
            rc.validate(cubin=variant_cubins / "axpy_oob.cubin")
        assert re.search(r"illegal address|CUDA_ERROR_ILLEGAL_ADDRESS", str(err.value), re.I), str(err.value)
        # A sticky CUDA error kills that context; the client must come back clean.
        result = rc.validate()
    assert result.passed, failing_regions(result)


def test_axpy_fast_variant_validates(captures, variant_cubins):
    from kerncap.replay.client import ReplayClient

    with ReplayClient(captures.get("axpy_inplace").reproducer) as rc:
        result = rc.validate(cubin=variant_cubins / "axpy_fast.cubin")
    assert result.passed, failing_regions(result)


# -- timing -----------------------------------------------------------------------------


def kernel_stat(profile, pattern: str):
    hits = [k for k in profile.kernels if pattern in k.name or pattern in (k.demangled or "")]
    assert hits, f"profile lists no kernel matching {pattern!r}: {[k.name for k in profile.kernels][:10]}"
    return max(hits, key=lambda k: k.total_ns)


@pytest.mark.parametrize("app", ["axpy_inplace", "torch_matmul"])
def test_replay_times_the_launch_the_app_ran(captures, testapps_build, tmp_path, app):
    """The replay times the launch the app's own profile shows (same kernel, grid and
    block), every iteration. How close the replayed duration comes to the app's average
    (goal: within 10 %) is bench/replay.py's `accuracy` figure, not an assertion here."""
    from kerncap.capture.profile import run_profile
    from kerncap.replay.client import ReplayClient

    spec: AppSpec = APPS[app]
    got = captures.get(app)
    profile = run_profile(spec.command(testapps_build), env=app_env(spec, tmp_path), timeout=spec.timeout)
    stat = kernel_stat(profile, spec.kernel)
    launch = got.capture.launch
    assert stat.name == got.capture.kernel["name"]
    assert (list(stat.grid), list(stat.block)) == (list(launch["grid"]), list(launch["block"])), (stat, launch)

    with ReplayClient(got.reproducer) as rc:
        timing = rc.replay(iterations=50, warmup=5)
    assert timing.iterations == 50 and len(timing.times_ms) == 50 and min(timing.times_ms) > 0, timing
    print(f"{app}: replay median {timing.median_ms * 1e6:.0f} ns vs {stat.avg_ns:.0f} ns in the app")

