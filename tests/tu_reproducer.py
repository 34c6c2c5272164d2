"""A reproducer around one kernel of a CUDA file, as `kerncap extract --source-dir`
writes it, without a GPU: the "captured" cubin is nvcc's cubin of the original file at
its original path (the cubin a CMake build embeds is the same bytes), so the module id
nvcc derives from the path differs from the reproducer copy's, as on a real capture.
Used by tests/test_recompile_reduced.py and bench/recompile.py."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from pathlib import Path

from kerncap.sources import cubin as cubinfo

REPO = Path(__file__).resolve().parents[1]
CUDA = REPO / "testapps" / "cuda"
DEMO = REPO / "kerncap_tui" / "demo" / "reproducer"
# testapps/CMakeLists.txt's flags, as compile_commands.json records them
CMAKE_FLAGS = ["-forward-unknown-to-host-compiler", "-O3", "-DNDEBUG", "-std=c++17",
               "--generate-code=arch=compute_90,code=[compute_90,sm_90]", "-lineinfo", "-Xcompiler=-Wall",
               "-Werror=all-warnings", "-x", "cu"]
# mul_mat_vec_q<qtype::q5_0, 3, true> of testapps/cuda/big_tu/qmatvec.cu
BIG_KERNEL = "_ZN3qmv13mul_mat_vec_qILNS_5qtypeE2ELi3ELb1EEEvPKvS3_PfNS_11fusion_argsEiiii"
# cuda_parallel_launch_local_memory<ParallelFor<Smooth3, RangePolicy>> of functor_thrust.cu
FUNCTOR_KERNEL = "_ZN10minikokkos4impl33cuda_parallel_launch_local_memoryINS0_11ParallelForI7Smooth3NS_11RangePolicyEEEEEvT_"
# ei::scale_n<__half, 4> of testapps/cuda/explicit_inst (declared __launch_bounds__(256) in a
# header, instantiated explicitly in the TU, issue 43)
EXPLICIT_KERNEL = "_ZN2ei7scale_nI6__halfLi4EEEvPKT_PS2_i"
EXPLICIT_FILES = ["explicit_inst/explicit_inst.cu", "explicit_inst/scale_bounds.cuh", "common/testapp.hpp"]
BIG_FILES = ["big_tu/qmatvec.cu", "common/testapp.hpp"]
FUNCTOR_FILES = ["functor_thrust/functor_thrust.cu", "common/testapp.hpp"]


def captured_cubin(tree: Path, tu: str, extra: list[str], out: Path) -> tuple[bytes, float]:
    start = time.perf_counter()
    subprocess.run(["nvcc", f"-I{tree}", "-O3", "-DNDEBUG", "-std=c++17", "-arch=sm_90", "-lineinfo", *extra,
                    "-cubin", "-o", str(out), str(tree / tu)], check=True, capture_output=True, text=True)
    return out.read_bytes(), time.perf_counter() - start


CHUNK_SIZE = 4194304


def make_reproducer(root: Path, tree: Path, tu: str, files: list[str], kernel, extra: list[str] = ()) -> tuple[Path, bytes, float]:
    """A reproducer of `kernel` (a name, or a function picking one from the cubin's
    kernels) from `tree/tu` as extract writes one: capture/ with the captured cubin, its
    parameter layout and module globals; source/ with copies and build.json (the CMake
    compile command of the original file)."""
    root.mkdir(parents=True, exist_ok=True)
    data, seconds = captured_cubin(tree, tu, list(extra), root / "captured.cubin")
    elf = cubinfo.open_elf(data, "captured")
    if callable(kernel):
        kernel = kernel(cubinfo.kernel_names(elf))
    sha = hashlib.sha256(data).hexdigest()
    repro = root / "reproducer"
    cap = repro / "capture"
    (cap / "cubins").mkdir(parents=True)
    (cap / "cubins" / f"{sha}.cubin").write_bytes(data)
    globs = []
    for s in elf.get_section_by_name(".symtab").iter_symbols():
        if s["st_info"]["type"] == "STT_OBJECT" and isinstance(s["st_shndx"], int):
            section = elf.get_section(s["st_shndx"]).name
            if section.startswith(".nv.global") or (section.startswith(".nv.constant") and section != ".nv.constant0"):
                chunks = [None] * -(-s["st_size"] // CHUNK_SIZE)  # all-zero chunks, one per 4 MiB
                globs.append({"name": s.name, "section": section, "size": s["st_size"], "address": 0,
                              "written": False, "pre": chunks, "post": list(chunks)})
    params = [{"index": i, "offset": p.offset, "size": p.size, "value": "00" * p.size}
              for i, p in enumerate(cubinfo.param_layout(elf, kernel))]
    (cap / "manifest.json").write_text(json.dumps({
        "format": "kerncap-capture", "format_version": 1, "complete": True, "chunk_size": CHUNK_SIZE, "hash": "xxh64",
        "provenance": {"synthetic": True, "gpu": {"name": "synthetic sm_90", "cc": [9, 0]}},
        "kernel": {"name": kernel, "demangled": kernel, "module": {"cubin": f"cubins/{sha}.cubin", "sha256": sha}},
        "launch": {"grid": [1, 1, 1], "block": [128, 1, 1], "shared_mem_bytes": 0},
        "params": params, "regions": [], "globals": globs,
    }))
    source = repro / "source"
    for f in files:
        (source / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tree / f, source / f)
    (root / "build").mkdir()
    (source / "build.json").write_text(json.dumps({
        "kernel": kernel,
        "compile_command": ["nvcc", *CMAKE_FLAGS[:1], f"-I{tree}", *CMAKE_FLAGS[1:], *extra, "-c", str(tree / tu),
                            "-o", "obj.o"],
        "compile_command_origin": "compile_commands.json", "cwd": str(root / "build"), "source_root": str(tree),
        "arch": "sm_90", "tu": tu, "include_dirs": ["."], "method": "nm+compile_commands", "confidence": "exact",
        "files": files, "notes": []}))
    return repro, data, seconds


def kernel_text(data: bytes, kernel: str) -> bytes:
    return cubinfo.open_elf(data, "cubin").get_section_by_name(f".text.{kernel}").data()
