"""Builds tests/fixtures/cmake_cuda_project with the machine's nvcc (CMake,
compile_commands.json, -lineinfo) into a copy cached by content, and checks what the
device-code readers see in those real objects. Other source/recompile tests import
`built_project` from here."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import native_build
import pytest

FIXTURE = Path(__file__).parent / "fixtures" / "cmake_cuda_project"
_BUILT: dict[str, "Built"] = {}


@dataclass(frozen=True)
class Built:
    root: Path  # the copied source tree
    build: Path  # its CMake build directory

    def obj(self, tu: str) -> Path:
        return self.build / "CMakeFiles" / "kcfix.dir" / "src" / f"{tu}.o"


def toolchain_or_skip() -> None:
    missing = [t for t in ("nvcc", "cmake") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {' and '.join(missing)} on PATH")


@pytest.fixture(scope="session")
def built_project() -> Built:
    """The copy and its build, cached by content (tests/native_build.py: the same fixture,
    nvcc, cmake and generator are the same build; issue 44: ~30 s of CPU a run, and once
    per pytest-xdist worker that runs one of the three files using it)."""
    toolchain_or_skip()
    if "project" not in _BUILT:
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        key = native_build._key(native_build.tool_id(shutil.which("nvcc")), native_build.tool_id(shutil.which("cmake")),
                                *generator, native_build.tree_digest(FIXTURE))
        root = native_build.tree("cmake_cuda_project", key, lambda base: _build(base / "proj", generator)) / "proj"
        _BUILT["project"] = Built(root, root / "build")
    return _BUILT["project"]


def _build(root: Path, generator: list[str]) -> None:
    shutil.copytree(FIXTURE, root)
    build = root / "build"
    for cmd in (["cmake", "-S", str(root), "-B", str(build), *generator], ["cmake", "--build", str(build), "-j", "2"]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"


def test_objects_define_each_kernel(built_project):
    from kerncap.sources import cubin
    from kerncap.sources.fatbin import device_images

    expect = {
        "scale_float.cu": "_Z12scale_kernelIfEvPT_iS0_",
        "scale_int.cu": "_Z12scale_kernelIiEvPT_iS0_",
        "bounded.cu": "_Z13bounded_saxpyfPKfPfi",
        "deep.cu": "_ZN5kcfix11deep_kernelEPfPKfi",
        "macro.cu": "macro_fill",
    }
    for tu, kernel in expect.items():
        images = device_images(built_project.obj(tu))
        assert [im.arch for im in images] == [90]
        elf = cubin.open_elf(images[0].data, tu)
        assert cubin.kernel_names(elf) == {kernel}
    bounded = cubin.open_elf(device_images(built_project.obj("bounded.cu"))[0].data, "bounded")
    layout = [(s.offset, s.size) for s in cubin.param_layout(bounded, "_Z13bounded_saxpyfPKfPfi")]
    assert layout == [(0, 4), (8, 8), (16, 8), (24, 4)]  # float, const float*, float*, int


def test_line_table_is_per_kernel_and_reaches_the_deep_header(built_project):
    from kerncap.sources import cubin
    from kerncap.sources.fatbin import device_images

    elf = cubin.open_elf(device_images(built_project.obj("deep.cu"))[0].data, "deep")
    files = cubin.line_table_files(elf, "_ZN5kcfix11deep_kernelEPfPKfi")
    assert any(f.endswith("src/deep.cu") for f in files)
    assert any(f.endswith("include/kcfix/deep/level5.cuh") for f in files)
    scale = cubin.open_elf(device_images(built_project.obj("scale_int.cu"))[0].data, "scale")
    assert [Path(f).name for f in cubin.line_table_files(scale, "_Z12scale_kernelIiEvPT_iS0_")] == ["scale.cuh"]


@pytest.mark.parametrize("mode", ["speed", "size"])  # speed: LZ4-style codec, size: zstd
def test_compressed_fatbin_entries_decode_to_the_plain_cubin(built_project, tmp_path, mode):
    from kerncap.sources.fatbin import device_images

    src = built_project.root / "src" / "bounded.cu"
    plain, packed = tmp_path / "plain.o", tmp_path / "packed.o"
    base = ["nvcc", "-c", "-arch=sm_90", str(src)]
    subprocess.run([*base, "-Xfatbin=-compress-mode=none", "-o", str(plain)], check=True)
    subprocess.run([*base, "-Xfatbin=-compress-all", f"-Xfatbin=-compress-mode={mode}", "-o", str(packed)], check=True)
    assert device_images(packed)[0].data == device_images(plain)[0].data


def test_every_fat_binary_of_a_linked_section_is_read(built_project, tmp_path):
    """A linked object, library or executable holds one fat binary per translation unit,
    one after another in its `.nv_fatbin` section: each one's cubin is found, in order.
    Mutation caught: the section read no further than its first fat binary."""
    from kerncap.sources import cubin
    from kerncap.sources.fatbin import device_images

    ld = shutil.which("ld")
    if ld is None:
        pytest.skip("needs ld on PATH")
    tus = ["bounded.cu", "deep.cu", "macro.cu"]
    linked = tmp_path / "linked.o"
    subprocess.run([ld, "-r", *(str(built_project.obj(tu)) for tu in tus), "-o", str(linked)], check=True)
    images = device_images(linked)
    assert [im.arch for im in images] == [90, 90, 90]
    assert [cubin.kernel_names(cubin.open_elf(im.data, "x")) for im in images] == [
        {"_Z13bounded_saxpyfPKfPfi"}, {"_ZN5kcfix11deep_kernelEPfPKfi"}, {"macro_fill"}]
    assert [im.data for im in images] == [device_images(built_project.obj(tu))[0].data for tu in tus]


def test_each_kernel_of_a_cubin_gets_only_its_own_line_table_files(tmp_path):
    """Two kernels of one translation unit, each in its own header: each kernel's files
    are those of its own code, the whole table has both. Mutation caught: every line
    sequence counted for whichever kernel was asked for."""
    from kerncap.sources import cubin

    toolchain_or_skip()
    body = "{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) x[i] %s;\n}\n"
    (tmp_path / "a.cuh").write_text("__global__ void kernel_a(float* x, int n)\n" + body % "*= 2.0f")
    (tmp_path / "b.cuh").write_text("__global__ void kernel_b(int* x, int n)\n" + body % "+= 3")
    (tmp_path / "two.cu").write_text('#include "a.cuh"\n#include "b.cuh"\n')
    out = tmp_path / "two.cubin"
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-lineinfo", str(tmp_path / "two.cu"), "-o", str(out)],
                   check=True, cwd=tmp_path)
    elf = cubin.open_elf(out.read_bytes(), "two.cubin")
    assert cubin.kernel_names(elf) == {"_Z8kernel_aPfi", "_Z8kernel_bPii"}
    names = lambda files: sorted(Path(f).name for f in files)  # noqa: E731
    assert names(cubin.line_table_files(elf, "_Z8kernel_aPfi")) == ["a.cuh"]
    assert names(cubin.line_table_files(elf, "_Z8kernel_bPii")) == ["b.cuh"]
    assert names(cubin.line_table_files(elf)) == ["a.cuh", "b.cuh"]
