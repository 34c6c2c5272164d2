"""Replay of bad inputs on the GPU: every failure names the thing and the next step,
and never replays at other addresses or from damaged payloads."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from kerncap.errors import CaptureFormatError, KerncapError

pytestmark = pytest.mark.gpu

GRANULARITY = 2 << 20  # H200


@pytest.fixture
def vector_copy(vector_capture, tmp_path) -> Path:
    """A private copy of the axpy reproducer that a test may damage."""
    dst = tmp_path / "reproducer"
    shutil.copytree(vector_capture, dst)
    return dst


def capture_of(reproducer: Path):
    from kerncap.reproducer.format import Capture

    return Capture.open(reproducer)


def largest_pre_blob(reproducer: Path) -> Path:
    cap = capture_of(reproducer)
    return max((cap.blob_path(h) for h in cap.iter_blobs()), key=lambda p: p.stat().st_size)


def nvcc_cubin(tmp_path: Path, source: str, arch: str) -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("needs nvcc")
    src, out = tmp_path / "variant.cu", tmp_path / f"variant_{arch}.cubin"
    src.write_text(source)
    subprocess.run([nvcc, "-cubin", f"-arch={arch}", str(src), "-o", str(out)], check=True)
    return out


def test_span_that_cannot_be_reserved_is_named(vector_capture):
    from kerncap.replay.client import ReplayClient
    from kerncap.replay.plan import plan_address_space

    span = plan_address_space(capture_of(vector_capture).regions, GRANULARITY).spans[0]
    block = {"op": "_debug_block_host", "base": span.base, "size": span.size}
    with pytest.raises(KerncapError) as err:
        ReplayClient(vector_capture, before_open=[block]).start()
    msg = err.value.message
    assert f"cannot reserve span {span.label}" in msg and f"{span.base:#x}" in msg, msg
    assert "placed it at" in msg and "host mapping" in msg, msg
    assert err.value.hint


def test_corrupt_blob_is_refused(vector_copy):
    from kerncap.replay.client import ReplayClient

    blob = largest_pre_blob(vector_copy)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(CaptureFormatError) as err:
        ReplayClient(vector_copy).start()
    assert str(blob.name) in err.value.message and "does not match its hash" in err.value.message
    assert "region" in err.value.message and "extract" in err.value.hint


def test_truncated_blob_is_refused(vector_copy):
    from kerncap.replay.client import ReplayClient

    blob = largest_pre_blob(vector_copy)
    blob.write_bytes(blob.read_bytes()[:1000])
    with pytest.raises(CaptureFormatError, match=r"holds 1000 bytes, expected \d+ \(truncated\?\)"):
        ReplayClient(vector_copy).start()


def test_missing_blob_is_refused(vector_copy):
    from kerncap.replay.client import ReplayClient

    blob = largest_pre_blob(vector_copy)
    blob.unlink()
    with pytest.raises(CaptureFormatError, match="is missing"):
        ReplayClient(vector_copy).start()


def test_newer_format_is_refused(vector_copy):
    from kerncap.replay.client import ReplayClient

    manifest = vector_copy / "capture" / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["format_version"] = 99
    manifest.write_text(json.dumps(doc))
    with pytest.raises(CaptureFormatError, match="format version 99") as err:
        ReplayClient(vector_copy).start()
    assert "upgrade" in err.value.hint


def test_foreign_arch_cubin_names_both_architectures(vector_capture, tmp_path):
    from kerncap.replay.client import ReplayClient

    cubin = nvcc_cubin(tmp_path, 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n', "sm_80")
    with ReplayClient(vector_capture) as rc:
        with pytest.raises(KerncapError) as err:
            rc.replay(cubin=cubin, iterations=1, warmup=0)
        assert "sm_80" in err.value.message and "sm_90" in err.value.message, err.value.message
        assert rc.alive and rc.validate().passed  # the session survives a variant that does not load


def test_parameter_layout_mismatch_is_refused(vector_capture, tmp_path):
    from kerncap.replay.client import ReplayClient

    name = capture_of(vector_capture).kernel["name"]
    # extern "C" keeps the captured (mangled) symbol name while the parameters change.
    source = f'extern "C" __global__ void {name}(int only_one) {{ }}\n'
    cubin = nvcc_cubin(tmp_path, source, "sm_90")
    with ReplayClient(vector_capture) as rc:
        with pytest.raises(KerncapError) as err:
            rc.validate(cubin=cubin)
        assert f"parameters of {name} differ from the capture" in err.value.message, err.value.message
        assert rc.replay(iterations=2, warmup=0).iterations == 2


def test_variant_without_the_kernel_is_refused(vector_capture, tmp_path):
    from kerncap.replay.client import ReplayClient

    cubin = nvcc_cubin(tmp_path, 'extern "C" __global__ void other(float* x) { x[0] = 1.0f; }\n', "sm_90")
    name = capture_of(vector_capture).kernel["name"]
    with ReplayClient(vector_capture) as rc:
        with pytest.raises(KerncapError, match=f"variant {cubin} has no kernel {name}"):
            rc.load_variant(cubin)


def test_tolerance_mode_and_resident_reuse(vector_capture):
    """float32 tolerance on the captured cubin passes with zero error; the second
    request reuses the resident state (no second open). Counted from after the first
    request: opening may take more than one server when a fresh process finds the captured
    addresses taken (AddressUnavailable, retried), as it did once beside six other shards."""
    from kerncap.replay.client import ReplayClient

    with ReplayClient(vector_capture) as rc:
        v = rc.validate(atol=0.0, rtol=0.0, dtype="float32")
        opened = rc.starts
        assert v.passed and v.mode == "tolerance"
        written = [r for r in v.regions if r.kind == "region" and r.dtype == "float32"]
        assert written and all(r.mismatched_elements == 0 and r.max_abs_err == 0.0 for r in written)
        t = rc.replay(iterations=5, warmup=1, flush_l2=True)
        assert t.iterations == 5 and t.min_ms > 0 and rc.starts == opened
