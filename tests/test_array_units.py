"""CPU tests of the capture's CUDA array and texture/surface object code that needs no
driver (native/capture/array_tracker.cpp, native/common/cubin_texture_ops.cpp).

Builds native/capture/test/array_units_test.cpp with AddressSanitizer, runs it on cubins
nvcc compiles here from native/capture/test/tex_kernels.cu (sm_90 and sm_80), and checks
its facts: which kernels have texture or surface instructions (cross-checked with
nvdisasm where Triton's wheel ships one), the tracker fed the CUPTI params structs of the
array and object calls, and descriptors written to JSON that read back to the same float32
bits. Skipped without nvcc or a C++ compiler."""

from __future__ import annotations

import json
import math
import re
import shutil
import struct
from pathlib import Path

import native_build
import pytest
from test_cubin_elf import NATIVE, TEST_SRC, _cuda_home, _run

KERNELS = {"_Z7texreadyPfii": 1, "_Z7tabreadPKyPfi": 1, "_Z5surfwyii": 2, "_Z3lodyP6float4f": 1, "_Z5plainPfy": 0}


@pytest.fixture(scope="module")
def built():
    return native_build.result("array_units", _build_and_run)


def _build_and_run():
    """The unit test's facts and the cubins it read (cached: tests/native_build.py)."""
    cuda = _cuda_home()
    cxx = native_build.compiler()
    if cuda is None or cxx is None:
        pytest.skip("needs nvcc, cupti.h and a C++ compiler")
    cubins = {sm: native_build.cubin(str(cuda / "bin" / "nvcc"), [f"-arch=sm_{sm}"], TEST_SRC / "tex_kernels.cu")
              for sm in ("90", "80")}
    exe = native_build.executable("array_units_test", cxx, [
        "-std=c++17", "-g1", "-O1", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined",
        "-fno-sanitize-recover=undefined", f"-I{NATIVE / 'common'}", f"-I{NATIVE / 'capture'}", f"-I{cuda / 'include'}",
    ], [TEST_SRC / "array_units_test.cpp", NATIVE / "capture" / "array_tracker.cpp",
        NATIVE / "common" / "cubin_texture_ops.cpp", NATIVE / "common" / "cubin_elf.cpp"])
    r = _run([str(exe), str(cubins["90"]), str(cubins["80"])], env=native_build.env(ASAN_OPTIONS="detect_leaks=0"))
    assert r.returncode == 0, f"C++ checks failed:\n{r.stderr}\n{r.stdout}"
    return json.loads(r.stdout), cubins


def PREBUILD():  # conftest starts it when this file's tests are selected
    native_build.start("array_units", _build_and_run)


def f32(x: float) -> bytes:
    return struct.pack("<f", x)


def test_units_pass(built):
    facts, _ = built
    assert facts["failures"] == 0


@pytest.mark.parametrize("sm", ["90", "80"])
def test_texture_and_surface_instructions_are_found_per_kernel(built, sm):
    facts, _ = built
    got = facts[f"sm{sm}"]
    assert got["sm"] == int(sm)
    assert {k: got[k] for k in KERNELS} == KERNELS
    assert got["_Z7missingv"] == -1  # no code for it: unknown, not "none"


def test_the_scan_agrees_with_nvdisasm(built):
    """Every texture/surface mnemonic nvdisasm prints sits in a kernel the scan flags, and
    no kernel the scan calls plain has one."""
    _, cubins = built
    nvdisasm = shutil.which("nvdisasm")
    try:
        import triton

        nvdisasm = nvdisasm or str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm")
    except Exception:
        pass
    if not nvdisasm or not Path(nvdisasm).is_file():
        pytest.skip("no nvdisasm")
    for cubin in cubins.values():
        r = _run([nvdisasm, str(cubin)])
        assert r.returncode == 0, r.stderr
        current, seen = None, {}
        for line in r.stdout.splitlines():
            m = re.match(r"\s*\.text\.(\w+):", line)
            if m:
                current = m.group(1)
                seen[current] = 0
            elif current and re.search(r"\b(TEX|TLD|TLD4|TMML|TXD|TXQ)\b", line):
                seen[current] |= 1
            elif current and re.search(r"\b(SULD|SUST|SUATOM|SURED)\b", line):
                seen[current] |= 2
        assert {k: seen.get(k) for k in KERNELS} == KERNELS


def test_descriptors_round_trip_through_the_manifest_json(built):
    facts, _ = built
    tex = facts["texture"]
    assert tex["filter_mode"] == 1 and tex["flags"] == 2 and tex["address_mode"] == [1, 0, 0]
    assert f32(tex["mipmap_level_bias"]) == f32(0.1)  # float32 bits, not a rounded double
    assert f32(tex["border_color"][3]) == struct.pack("<f", struct.unpack("<f", f32(1 / 3))[0])
    assert facts["view"] == {"format": 2, "width": 16, "height": 8, "depth": 0, "first_mipmap_level": 0,
                             "last_mipmap_level": 0, "first_layer": 0, "last_layer": 0}
    assert facts["resource_linear"] == {"type": "linear", "address": 0x7f0000001000, "format": 0x20, "channels": 1,
                                        "size": 4096, "region": 4, "flags": 0}
    assert facts["resource_pitch"] == {"type": "pitch2d", "address": 0x7f0000002000, "format": 0x10, "channels": 2,
                                       "width": 300, "height": 7, "pitch": 1536, "region": 2, "flags": 0}
    assert facts["resource_array"] == {"type": "array", "array": 5, "flags": 0}
    *finite, nan, neg_inf = facts["floats"]
    wanted = [0.1, 1 / 3, -0.0, 3.4028235e38, 1e-45]
    assert [f32(v) for v in finite] == [f32(v) for v in wanted]
    assert math.copysign(1, finite[2]) < 0
    assert (nan, neg_inf) == ("nan", "-inf")


def test_the_tracker_report(built):
    facts, _ = built
    report = facts["report"]
    # after the mipmapped array went: arrays a and b's reuse; a texture over linear memory
    # (handle 1, reused), the one whose array was freed (2), and the surface (1)
    assert (report["arrays"], report["mipmapped_arrays"], report["textures"], report["surfaces"]) == (2, 0, 2, 1)
    assert [(f["kind"], f["handle"]) for f in report["freed_resources"]] == [("texture", 2)]
