"""Result objects, statistics, mismatch decoding, dtypes and cubin architecture."""

import json
import math
import shutil
import struct
import subprocess

import pytest
from kerncap.core import dtypes as dt
from kerncap.errors import KerncapError
from kerncap.replay.cubin import cubin_arch, describe_arch_mismatch
from kerncap.replay.results import (
    RegionCheck,
    ReplayResult,
    ValidationResult,
    first_mismatches,
    format_replay,
    format_validation,
    percentile,
)


def test_percentile_matches_linear_interpolation():
    v = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(v, 50) == 3.0
    assert percentile(v, 10) == pytest.approx(1.4)
    assert percentile(v, 90) == pytest.approx(4.6)
    assert percentile([7.0], 90) == 7.0


def test_replay_result_statistics_and_roundtrip():
    times = [1.0, 1.1, 0.9, 1.0, 5.0, 1.0, 1.05, 0.95, 1.0, 1.0]
    r = ReplayResult.from_times(times, warmup=3, flush_l2=True, cubin="/v.cubin", notes=["n"])
    assert r.iterations == 10 and r.min_ms == 0.9 and r.max_ms == 5.0 and r.median_ms == 1.0
    assert r.spread_pct == pytest.approx((percentile(times, 90) - percentile(times, 10)) / 1.0 * 100)
    assert ReplayResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    text = format_replay(r)
    assert "median 1.000 ms" in text and "/v.cubin" in text and "L2 flushed" in text and "note: n" in text


def test_replay_text_abbreviates_long_series():
    r = ReplayResult.from_times([0.01] * 100, warmup=0, flush_l2=False, cubin=None)
    text = format_replay(r)
    assert "median 10.00 us" in text and "68 more" in text and "captured cubin" in text


def check(**kw):
    base = dict(kind="region", id=3, name="region 3", base=0x7F0000200000, size=4096, dtype=None,
                mismatched_bytes=0, mismatched_elements=None, max_abs_err=None, max_rel_err=None,
                first_mismatches=[], unexpected_write=False)
    base.update(kw)
    return RegionCheck(**base)


def test_validation_roundtrip_keeps_infinities_as_strict_json():
    c = check(dtype="float32", mismatched_bytes=8, mismatched_elements=2, max_abs_err=math.inf, max_rel_err=math.inf,
              first_mismatches=[(16, 0.0, math.inf), (20, math.nan, 1.0)])
    v = ValidationResult(passed=False, mode="tolerance", regions=[c], atol=1e-3, rtol=0.0)
    text = json.dumps(v.to_dict(), allow_nan=False)  # strict JSON
    back = ValidationResult.from_dict(json.loads(text))
    assert back.regions[0].max_abs_err == math.inf and back.regions[0].first_mismatches[0] == (16, 0.0, math.inf)
    assert math.isnan(back.regions[0].first_mismatches[1][1])
    assert back.to_dict()["regions"][0]["passed"] is False


def test_passed_depends_on_mode():
    assert check().passed
    assert not check(mismatched_bytes=1).passed
    assert check(dtype="float16", mismatched_bytes=10, mismatched_elements=0).passed  # within tolerance


def test_first_mismatches_bytes():
    exp = bytes([1, 2, 3, 4, 5])
    act = bytes([9, 2, 3, 7, 5])
    assert first_mismatches(100, exp, act, None, 0, 0) == [(100, 1, 9), (103, 4, 7)]


def test_first_mismatches_elements_follow_the_gpu_predicate():
    exp = struct.pack("<4f", 1.0, 2.0, float("nan"), 4.0)
    act = struct.pack("<4f", 1.0005, 2.5, float("nan"), 4.0)
    got = first_mismatches(64, exp, act, "float32", 1e-3, 0.0)
    assert got == [(68, 2.0, 2.5)]  # 1.0005 within atol, NaN == NaN


def test_first_mismatches_partial_tail_element():
    exp, act = b"\x00\x01\x02", b"\x00\x01\x09"  # less than one float32: the tail
    assert first_mismatches(8, exp, act, "float32", 0, 0) == [(10, 2, 9)]


def test_format_validation_lists_failures_and_unexpected_writes():
    v = ValidationResult(
        passed=False, mode="exact",
        regions=[check(), check(id=4, name="region 4", mismatched_bytes=3, first_mismatches=[(0, 1, 2)]),
                 check(kind="global", id=None, name="scale", size=4, mismatched_bytes=1, unexpected_write=True)],
    )
    text = format_validation(v)
    assert "FAIL (2 of 3 differ)" in text and "byte-exact" in text
    assert "3 bytes differ" in text and "+0x0: expected 0x01 got 0x02" in text
    assert "unexpected write" in text and "scale" in text


@pytest.mark.parametrize("name,canon", [("fp16", "float16"), ("torch.bfloat16", "bfloat16"), ("*fp32", "float32"),
                                        ("double", "float64"), ("u8", "uint8"), ("INT32", "int32")])
def test_dtype_normalize(name, canon):
    assert dt.normalize(name) == canon


def test_dtype_unknown_names_the_choices():
    with pytest.raises(KerncapError) as err:
        dt.normalize("complex64")
    assert "complex64" in err.value.message and "bfloat16" in err.value.hint


def test_dtype_decode_half_and_bfloat16():
    assert dt.decode("float16", struct.pack("<e", 1.5)) == [1.5]
    assert dt.decode("bfloat16", struct.pack("<f", -2.0)[2:]) == [-2.0]
    assert dt.decode("int8", b"\xff\x01") == [-1, 1]


def test_dtype_predicate():
    assert not dt.mismatches("float32", math.inf, math.inf, 0, 0)
    assert dt.mismatches("float32", math.inf, -math.inf, 1e30, 1.0)
    assert dt.mismatches("float32", math.nan, 1.0, 1e30, 1.0)
    assert not dt.mismatches("float32", 1.1, 1.0, 0.0, 0.11)
    assert dt.mismatches("int32", 2, 1, 10.0, 10.0)  # integers exact


def elf_header(abi_version: int, flags: int) -> bytes:
    ident = b"\x7fELF" + bytes([2, 1, 1, 0x41, abi_version]) + bytes(7)
    return ident + bytes(48 - 16) + struct.pack("<I", flags) + bytes(16)


def test_cubin_arch_from_header():
    assert cubin_arch(elf_header(8, 0x6005A04)) == 90  # CUDA 13 (ABI 8): SM in bits 8..15
    assert cubin_arch(elf_header(7, 0x500550)) == 80  # older ABI: SM in bits 0..7
    assert cubin_arch(b"\x50\xedU\xba" + bytes(60)) is None  # a fatbin
    msg = describe_arch_mismatch("/v.cubin", elf_header(8, 0x6005004), (9, 0))
    assert msg == "cubin /v.cubin is built for sm_80; this GPU is sm_90 (compute capability 9.0)"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("sm", [80, 90])
def test_cubin_arch_of_nvcc_output(tmp_path, sm):
    src = tmp_path / "k.cu"
    src.write_text('extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n')
    out = tmp_path / "k.cubin"
    subprocess.run(["nvcc", "-cubin", f"-arch=sm_{sm}", str(src), "-o", str(out)], check=True)
    assert cubin_arch(out.read_bytes()) == sm
