"""Kernel-only recompile against the real CMake fixture build (test_sources_project.py):
real nvcc, real cubins, layouts read from .nv.info."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kerncap.cli import main
from kerncap.errors import KerncapError
from kerncap.recompile.cuda import device_flags, recompile
from kerncap.sources import attach_sources, cubin
from test_sources_project import built_project  # noqa: F401  (session fixture)

LAYOUTS = {
    "_Z13bounded_saxpyfPKfPfi": [(0, 4), (8, 8), (16, 8), (24, 4)],
    "_ZN5kcfix11deep_kernelEPfPKfi": [(0, 8), (8, 8), (16, 4)],
    "macro_fill": [(0, 8), (8, 4), (12, 4)],
}


def write_capture(repro: Path, kernel: str) -> None:
    """A format-1 manifest with the kernel, its parameter layout and the GPU (sm_90); no regions."""
    cap = repro / "capture"
    cap.mkdir(parents=True)
    params = [{"index": i, "offset": o, "size": s, "value": "00" * s} for i, (o, s) in enumerate(LAYOUTS[kernel])]
    (cap / "manifest.json").write_text(json.dumps({
        "format": "kerncap-capture", "format_version": 1, "complete": True, "chunk_size": 4194304, "hash": "xxh64",
        "provenance": {"synthetic": True, "gpu": {"name": "synthetic sm_90", "cc": [9, 0]}},
        "kernel": {"name": kernel, "demangled": kernel, "module": {"cubin": "cubins/none.cubin"}},
        "launch": {"grid": [1, 1, 1], "block": [128, 1, 1], "shared_mem_bytes": 0},
        "params": params, "regions": [], "globals": [],
    }))


@pytest.fixture
def reproducer(built_project, tmp_path):
    def make(kernel: str) -> Path:
        repro = tmp_path / kernel
        write_capture(repro, kernel)
        from kerncap.reproducer.format import Capture

        report = attach_sources(repro, Capture.open(repro), built_project.root, built_project.build)
        assert report["kind"] == "cuda", report
        return repro
    return make


def defined_layout(path: Path, kernel: str):
    elf = cubin.open_elf(path.read_bytes(), str(path))
    assert kernel in cubin.kernel_names(elf)
    return [(s.offset, s.size) for s in cubin.param_layout(elf, kernel)]


def test_unmodified_source_recompiles_to_the_same_kernel(reproducer):
    repro = reproducer("_Z13bounded_saxpyfPKfPfi")
    first = recompile(repro)
    assert first.cubin == repro / "variants" / "1.cubin"
    assert defined_layout(first.cubin, "_Z13bounded_saxpyfPKfPfi") == LAYOUTS["_Z13bounded_saxpyfPKfPfi"]
    assert "-arch=sm_90" in first.command and "-cubin" in first.command and "-c" not in first.command
    assert first.command[1] == f"-I{repro / 'source' / 'include'}"  # edited headers shadow the originals
    assert recompile(repro).cubin.name == "2.cubin"


def test_edited_header_copy_is_the_one_compiled(reproducer):
    repro = reproducer("_ZN5kcfix11deep_kernelEPfPKfi")
    header = repro / "source" / "include" / "kcfix" / "deep" / "level5.cuh"
    header.write_text(header.read_text().replace("v * v - 0.5f", "v * v - 0.5f +"))
    with pytest.raises(KerncapError) as err:
        recompile(repro)
    assert str(header) in err.value.message  # the copy, not the original tree
    assert not list((repro / "variants").glob("*.cubin"))


def edit(repro: Path, rel: str, old: str, new: str) -> None:
    path = repro / "source" / rel
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_renamed_kernel_is_reported(reproducer):
    repro = reproducer("_Z13bounded_saxpyfPKfPfi")
    edit(repro, "src/bounded.cu", "void bounded_saxpy(", "void bounded_saxpy_v2(")
    with pytest.raises(KerncapError, match=r"no longer defines _Z13bounded_saxpyfPKfPfi: did the signature change\?"):
        recompile(repro)


def test_changed_signature_is_reported(reproducer):
    repro = reproducer("_Z13bounded_saxpyfPKfPfi")
    edit(repro, "src/bounded.cu", "float a,", "double a,")
    with pytest.raises(KerncapError, match="did the signature change") as err:
        recompile(repro)
    assert "_Z13bounded_saxpydPKfPfi" in err.value.message  # what it defines now


def test_changed_parameter_layout_of_extern_c_kernel_is_reported(reproducer):
    repro = reproducer("macro_fill")
    edit(repro, "src/macro.cu", "int value, int n", "long long value, int n")
    with pytest.raises(KerncapError, match=r"parameters of macro_fill .* no longer match the capture") as err:
        recompile(repro)
    assert "[(0, 8), (8, 4), (12, 4)]" in err.value.message and "[(0, 8), (8, 8), (16, 4)]" in err.value.message


def test_compiler_errors_are_shown_verbatim(reproducer, capsys):
    repro = reproducer("_Z13bounded_saxpyfPKfPfi")
    edit(repro, "src/bounded.cu", "y[i] = a * x[i] + y[i];", "y[i] = a * x[i] + y[i]")
    assert main(["recompile", str(repro)]) == 3
    err = capsys.readouterr().err
    assert "nvcc failed to compile" in err and 'error: expected a ";"' in err and "bounded.cu(" in err


def test_a_compilers_warnings_are_printed_without_verbose(tmp_path):
    """`kerncap recompile` prints what the compiler said whenever it said something (a
    warning about the edited source must not need --verbose), and nothing more for a quiet
    build. Mutation caught: the compiler's output printed only with --verbose."""
    from kerncap.reproducer.variants import RecompileResult

    warned = RecompileResult(cubin=tmp_path / "variants" / "1.cubin", seconds=0.5, command=["nvcc", "-c", "k.cu"],
                             log="k.cu(3): warning #177-D: variable \"t\" was declared but never referenced\n")
    text = warned.text()
    assert "warning #177-D" in text.splitlines()[1] and text.splitlines()[0] == "$ nvcc -c k.cu"
    quiet = RecompileResult(cubin=tmp_path / "variants" / "1.cubin", seconds=0.5, command=["nvcc"], log="  \n")
    assert quiet.text().splitlines() == ["$ nvcc", f"{tmp_path / 'variants' / '1.cubin'}  (0.50 s)"]


def test_missing_compiler(reproducer, monkeypatch, tmp_path):
    repro = reproducer("_Z13bounded_saxpyfPKfPfi")
    build_json = repro / "source" / "build.json"
    build = json.loads(build_json.read_text())
    build["compile_command"][0] = "nvcc"  # e.g. a database written with a bare compiler name
    build_json.write_text(json.dumps(build))
    monkeypatch.delenv("KERNCAP_NVCC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr("kerncap.recompile.trust.DEFAULT_NVCC", str(tmp_path / "no-toolkit" / "nvcc"))
    with pytest.raises(KerncapError, match="nvcc not found") as err:
        recompile(repro)
    assert "PATH" in err.value.hint


def test_without_sources(tmp_path):
    write_capture(tmp_path / "r", "macro_fill")
    with pytest.raises(KerncapError, match="no editable CUDA source"):
        recompile(tmp_path / "r")


def test_triton_reproducers_go_to_the_triton_path(tmp_path, monkeypatch):
    import kerncap.recompile as dispatch

    (tmp_path / "reproducer.json").write_text(json.dumps({"sources": {"kind": "triton"}}))
    monkeypatch.setattr(dispatch.triton, "recompile", lambda d: ("triton", d))
    assert dispatch.recompile(tmp_path) == ("triton", tmp_path.resolve())


def test_config_is_refused_for_cuda_reproducers(tmp_path):
    import kerncap.recompile as dispatch

    with pytest.raises(KerncapError, match="--config applies to Triton"):
        dispatch.recompile(tmp_path, "num_warps=4")


def test_device_flags_drop_host_and_output_flags():
    argv = ["nvcc", "-DX=1", "-Iinc", "--generate-code=arch=compute_90,code=[compute_90,sm_90]", "-gencode", "arch=compute_80,code=sm_80",
            "-lineinfo", "-MD", "-MT", "a.o", "-MF", "a.d", "-x", "cu", "-rdc=true", "-c", "/t/a.cu", "-o", "a.o", "-Xcompiler=-fPIC", "-lcublas"]
    assert device_flags(argv, Path("/t/a.cu"), Path("/t/build")) == ["-DX=1", "-Iinc", "-lineinfo", "-x", "cu", "-Xcompiler=-fPIC"]


def test_the_arch_is_the_captured_gpus_with_the_suffix_the_apps_build_used():
    """-arch=sm_XX of the captured GPU, keeping an arch-specific (`a`) or family-specific
    (`f`) target the app's build compiled for, spelled as sm_ or compute_; a suffix of
    another GPU's arch is not taken; without the GPU's compute capability, build.json's arch."""
    from types import SimpleNamespace as NS

    from kerncap.recompile.cuda import arch_flag

    def on(major: int, minor: int):
        return NS(provenance={"gpu": {"name": "synthetic", "cc": [major, minor]}})

    assert arch_flag({}, on(9, 0), ["nvcc", "-O3", "-c", "k.cu"]) == "sm_90"
    assert arch_flag({}, on(9, 0), ["nvcc", "-gencode", "arch=compute_90a,code=sm_90a"]) == "sm_90a"
    assert arch_flag({}, on(9, 0), ["nvcc", "-arch=compute_90a"]) == "sm_90a"
    assert arch_flag({}, on(10, 0), ["nvcc", "--generate-code=arch=compute_100f,code=[sm_100f]"]) == "sm_100f"
    assert arch_flag({}, on(10, 0), ["nvcc", "-arch=compute_100f"]) == "sm_100f"
    assert arch_flag({}, on(9, 0), ["nvcc", "-gencode", "arch=compute_100a,code=sm_100a", "-arch=sm_90"]) == "sm_90"
    assert arch_flag({"arch": "sm_86"}, NS(provenance={}), ["nvcc"]) == "sm_86"
    with pytest.raises(KerncapError, match="does not record the GPU's compute capability"):
        arch_flag({}, NS(provenance={"gpu": {}}), ["nvcc"])


def test_missing_host_compiler_is_dropped(tmp_path):
    from kerncap.recompile.cuda import device_flags

    tu = tmp_path / "k.cu"
    argv = ["nvcc", "-ccbin=/no/such/g++", "-O3", "-ccbin", "/no/such/g++", "--compiler-bindir=/usr/bin", "-c", str(tu)]
    flags = device_flags(argv, tu, tmp_path)
    assert "-ccbin=/no/such/g++" not in flags and "/no/such/g++" not in flags
    assert "-O3" in flags and "--compiler-bindir=/usr/bin" in flags
