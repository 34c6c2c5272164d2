"""Source discovery on a real CMake CUDA build (see test_sources_project.py): no mocked
nm, DWARF or compiler output."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from kerncap.cli import main
from kerncap.errors import KerncapError
from kerncap.sources import SourcesNotFound, attach_sources, discover
from kerncap.sources.grep import find_definitions
from test_sources_project import built_project  # noqa: F401  (session fixture)


class FakeCapture:
    """The parts of kerncap.reproducer.format.Capture that attach_sources reads."""

    def __init__(self, name: str, root: Path, cc=(9, 0), triton=None):
        self.kernel = {"name": name, "demangled": name}
        self.provenance = {"gpu": {"cc": list(cc)}}
        self.manifest = {"triton": triton}
        self.cubin_path = root / "no-such.cubin"


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def source_copy(built, tmp_path: Path) -> Path:
    """The fixture's sources without any build: no compile_commands.json, no objects."""
    dest = tmp_path / "tree"
    shutil.copytree(built.root, dest, ignore=shutil.ignore_patterns("build"))
    return dest


def test_template_instance_is_found_in_the_object_that_defines_it(built_project):
    for mangled, tu in (("_Z12scale_kernelIiEvPT_iS0_", "src/scale_int.cu"), ("_Z12scale_kernelIfEvPT_iS0_", "src/scale_float.cu")):
        found = discover(mangled, built_project.root)  # compile_commands.json found under build/
        report = found.report()
        assert report["translation_unit"] == tu
        assert report["method"] == "nm+compile_commands" and report["confidence"] == "exact"
        assert report["files"] == [tu, "include/kcfix/scale.cuh"]
        assert report["object"].endswith(f"{Path(tu).name}.o")
        assert "-lineinfo" in report["compile_command"]


def test_launch_bounds_kernel_by_demangled_name(built_project):
    found = discover("bounded_saxpy", built_project.root, built_project.build)
    assert found.kernel == "_Z13bounded_saxpyfPKfPfi"
    assert found.report()["translation_unit"] == "src/bounded.cu"


def test_include_chain_five_levels_deep(built_project):
    report = discover("kcfix::deep_kernel", built_project.root).report()
    assert report["files"] == ["src/deep.cu"] + [f"include/kcfix/deep/level{i}.cuh" for i in range(1, 6)]
    assert "include/kcfix/deep/level5.cuh" in report["line_table_files"]  # inlined code, from the line table


def test_ambiguous_name_lists_the_candidates(built_project):
    with pytest.raises(KerncapError) as err:
        discover("scale_kernel", built_project.root)
    assert "_Z12scale_kernelIfEvPT_iS0_" in err.value.message and "_Z12scale_kernelIiEvPT_iS0_" in err.value.message


def test_kernel_not_in_tree(built_project):
    with pytest.raises(SourcesNotFound) as err:
        discover("_Z11not_a_kernelPf", built_project.root)
    assert "not_a_kernel" in err.value.message and str(built_project.root) in err.value.message


def test_library_kernel_is_explained(built_project, tmp_path):
    cap = FakeCapture("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT", tmp_path)
    report = attach_sources(tmp_path / "repro", cap, built_project.root, None)
    assert report["kind"] == "none" and "cuBLAS" in report["reason"]
    assert attach_sources(tmp_path / "r2", FakeCapture("add_kernel", tmp_path, triton={"fn": "x"}), built_project.root, None)["kind"] == "none"


def test_wrong_directory(tmp_path):
    report = attach_sources(tmp_path / "repro", FakeCapture("_Z3fooPf", tmp_path), tmp_path / "nowhere", None)
    assert report == {"kind": "none", "reason": f"source directory {tmp_path / 'nowhere'} does not exist"}


def test_grep_fallback_without_compile_database(built_project, tmp_path):
    tree = source_copy(built_project, tmp_path)
    report = discover("_Z13bounded_saxpyfPKfPfi", tree).report()
    assert report["method"] == "grep" and report["confidence"] == "likely"
    assert report["translation_unit"] == "src/bounded.cu"
    assert report["compile_command"][0] == "nvcc"  # synthesized: the original flags are unknown


def test_grep_fallback_for_a_template_defined_in_a_header(built_project, tmp_path):
    report = discover("_Z12scale_kernelIiEvPT_iS0_", source_copy(built_project, tmp_path)).report()
    assert report["method"] == "grep" and report["confidence"] == "guess"
    assert report["translation_unit"] in ("src/scale_int.cu", "src/scale_float.cu")
    assert "include/kcfix/scale.cuh" in report["files"]


def test_grep_follows_kernel_macros(built_project):
    [hit] = find_definitions(built_project.root, "macro_fill")
    assert hit.file.name == "macro.cu" and hit.via_macro == "KCFIX_KERNEL"


def test_grep_ignores_comments_and_declarations(tmp_path):
    (tmp_path / "k.cu").write_text(
        "// __global__ void ghost(int* p) {}\n"
        "__global__ void decl_only(int* p);\n"
        "template <int N>\n__global__ void\n__launch_bounds__(128)\nreal_one(float* __restrict__ p) { }\n"
    )
    assert find_definitions(tmp_path, "ghost") == [] and find_definitions(tmp_path, "decl_only") == []
    assert [h.line for h in find_definitions(tmp_path, "real_one")] == [4]


def test_objects_without_compile_database_use_the_line_table(built_project, tmp_path):
    tree = source_copy(built_project, tmp_path)  # a Makefile-style build: objects, no database
    (tree / "obj").mkdir()
    subprocess.run(["nvcc", "-c", "-lineinfo", "-arch=sm_90", "-Iinclude", "src/deep.cu", "-o", "obj/deep.o"], cwd=tree, check=True)
    report = discover("_ZN5kcfix11deep_kernelEPfPKfi", tree, tree / "obj").report()
    assert report["method"] == "dwarf" and report["confidence"] == "likely"
    assert report["translation_unit"] == "src/deep.cu"
    assert "include/kcfix/deep/level5.cuh" in report["files"]


def test_attach_copies_sources_and_leaves_the_tree_alone(built_project, tmp_path):
    before = tree_digest(built_project.root)
    repro = tmp_path / "repro"
    report = attach_sources(repro, FakeCapture("_ZN5kcfix11deep_kernelEPfPKfi", tmp_path), built_project.root, built_project.build)
    assert tree_digest(built_project.root) == before
    assert report["kind"] == "cuda" and report["translation_unit"] == "src/deep.cu"
    for rel in report["files"]:
        assert (repro / "source" / rel).read_bytes() == (built_project.root / rel).read_bytes()
    build = json.loads((repro / "source" / "build.json").read_text())
    assert build["tu"] == "src/deep.cu" and build["arch"] == "sm_90" and build["include_dirs"] == ["include"]
    assert build["cwd"] == str(built_project.build) and build["method"] == "nm+compile_commands"
    assert build["compile_command"] == report["compile_command"]
    with pytest.raises(KerncapError, match="already holds sources"):
        attach_sources(repro, FakeCapture("_ZN5kcfix11deep_kernelEPfPKfi", tmp_path), built_project.root, None)


def test_the_recorded_arch_is_the_capturing_gpus_major_and_minor(built_project, tmp_path):
    """build.json's arch (what a recompile targets) is the captured GPU's compute
    capability, minor version included (an sm_86 GPU is never recorded as sm_80, nor
    sm_121 as sm_120); the note on objects built for another arch names it too."""
    for cc, arch in (((8, 6), "sm_86"), ((12, 1), "sm_121"), ((9, 0), "sm_90")):
        repro = tmp_path / arch
        report = attach_sources(repro, FakeCapture("_ZN5kcfix11deep_kernelEPfPKfi", tmp_path, cc=cc),
                                built_project.root, built_project.build)
        build = json.loads((repro / "source" / "build.json").read_text())
        assert build["arch"] == arch
        other = [n for n in report["notes"] if "the capture ran on" in n]
        assert other == ([] if arch == "sm_90" else [f"the objects hold device code for sm_90, the capture ran on {arch}"])


def test_cli_json(built_project, capsys):
    assert main(["sources", "deep_kernel", "--source-dir", str(built_project.root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"translation_unit", "files", "compile_command", "method", "confidence"} <= out.keys()
    assert main(["sources", "scale", "--source-dir", str(built_project.root)]) == 3
    assert "ambiguous" in capsys.readouterr().err


def test_several_objects_define_the_kernel_the_captured_cubins_object_wins():
    """Two objects define the kernel (a template instantiated in two TUs, say): the one
    whose device code is the captured cubin is chosen, "exact", and a note says why.
    Mutation caught: taking the first object whatever the captured cubin holds."""
    from types import SimpleNamespace

    from kerncap.sources.discover import _Candidate, _pick

    a = _Candidate(SimpleNamespace(arch=90, source="a.o", data=b"cubin of a"), None)
    b = _Candidate(SimpleNamespace(arch=90, source="b.o", data=b"cubin of b"), None)
    notes: list[str] = []
    chosen, confidence = _pick([a, b], "_Z1kv", 90, b"cubin of b", notes)
    assert (chosen, confidence) == (b, "exact")
    assert notes == ["2 objects define _Z1kv; the captured cubin matches b.o"]
    notes = []
    assert _pick([a, b], "_Z1kv", 90, None, notes) == (a, "likely") and "took the first" in notes[0]


def test_include_dirs_read_every_spelling_cmake_and_nvcc_write(tmp_path):
    """CMake writes a CUDA target's system headers as nvcc's `-isystem=/dir` (ggml's build
    does): that names /dir, as `-isystem /dir` and `-isystem/dir` do, not `<cwd>/=/dir`."""
    from kerncap.sources.compdb import CompileEntry

    argv = ["nvcc", "-I/a/inc", "-I", "rel", "-isystem=/usr/local/cuda-13.0/include", "-isystem", "/b",
            "-isystem/c", "--include-path=/d", "-iquote", "q", "-c", "k.cu"]
    entry = CompileEntry(file=tmp_path / "k.cu", directory=tmp_path, argv=argv, output=None)
    assert entry.include_dirs() == [Path("/a/inc"), tmp_path / "rel", Path("/usr/local/cuda-13.0/include"),
                                    Path("/b"), Path("/c"), Path("/d"), tmp_path / "q"]


def _one_cubin_tree(root: Path) -> tuple[Path, Path]:
    """A tree whose compile_commands.json (under build/) compiles src/axpy.cu to
    build/axpy.cubin: the committed H200 capture's cubin, which defines the kernel (no
    nvcc needed). (the .cu, the cubin)."""
    capture = Path(__file__).parent / "fixtures" / "captures" / "axpy_small" / "capture" / "cubins"
    (root / "src").mkdir(parents=True)
    (root / "build").mkdir()
    cubin = root / "build" / "axpy.cubin"
    shutil.copyfile(next(capture.iterdir()), cubin)
    tu = root / "src" / "axpy.cu"
    tu.write_text("__global__ void axpy_inplace(float a, const float* x, float* y, int n) {\n"
                  "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] += a * x[i];\n}\n")
    (root / "build" / "compile_commands.json").write_text(json.dumps([{
        "directory": str(root / "build"), "file": "../src/axpy.cu",
        "arguments": ["nvcc", "-arch=sm_90", "-cubin", "-c", "../src/axpy.cu", "-o", "axpy.cubin"]}]))
    return tu, cubin


def test_a_translation_unit_edited_after_its_build_is_only_likely(tmp_path):
    """The object that defines the kernel is older than its translation unit: the tree
    changed since the build, so the object no longer proves which source it came from.
    The discovery says so and is "likely", not "exact". Mutation caught: the check of
    the two files' times skipped."""
    import os

    tu, cubin = _one_cubin_tree(tmp_path)
    os.utime(tu, (1_600_000_000, 1_600_000_000))
    os.utime(cubin, (1_600_000_100, 1_600_000_100))
    fresh = discover("_Z12axpy_inplacefPKfPfi", tmp_path).report()
    assert (fresh["translation_unit"], fresh["method"], fresh["confidence"]) == ("src/axpy.cu", "nm+compile_commands",
                                                                                 "exact")
    assert fresh["notes"] == []
    os.utime(tu, (1_600_000_200, 1_600_000_200))
    edited = discover("_Z12axpy_inplacefPKfPfi", tmp_path).report()
    assert (edited["translation_unit"], edited["confidence"]) == ("src/axpy.cu", "likely")
    assert edited["notes"] == [f"{tu.resolve()} is newer than its object {cubin}: the tree changed since the build"]


def test_grep_follows_a_kernel_macro_that_names_its_kernel_after_a_later_parameter(tmp_path):
    """A kernel macro whose first parameter is not the kernel's name
    (`KC_KERNEL(bounds, name)`): the definition is found by the argument in the name's
    place, never by the one in the first. Mutation caught: the macro's naming parameter
    taken to be its first."""
    (tmp_path / "k.cu").write_text(
        "#define KC_KERNEL(bounds, name) __global__ void __launch_bounds__(bounds) name\n"
        "KC_KERNEL(256, scale_f)(float* p) { p[0] = 1; }\n"
        "KC_KERNEL(128, scale_h)(short* p) { p[0] = 1; }\n")
    hits = find_definitions(tmp_path, "scale_h")
    assert [(h.file.name, h.line, h.via_macro) for h in hits] == [("k.cu", 3, "KC_KERNEL")]
    assert find_definitions(tmp_path, "256") == [] and find_definitions(tmp_path, "128") == []


def test_grep_skips_a_build_tree_inside_the_source_tree(tmp_path):
    """A CMake build directory inside --source-dir (any name: one holding CMakeCache.txt)
    holds generated copies of the sources; the grep reads the sources only, so the kernel
    is not made ambiguous by its copy. A directory without CMakeCache.txt is read.
    Mutation caught: build trees searched too (the kernel found twice, the copy first)."""
    kernel = "__global__ void scale_k(float* p) { p[0] = 1; }\n"
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "k.cu").write_text(kernel)
    for build in ("out", "gen"):
        (tmp_path / build / "copies").mkdir(parents=True)
        (tmp_path / build / "copies" / "k.cu").write_text(kernel)
    (tmp_path / "out" / "CMakeCache.txt").write_text("CMAKE_CUDA_COMPILER:FILEPATH=/usr/local/cuda/bin/nvcc\n")
    hits = find_definitions(tmp_path, "scale_k")
    assert [str(h.file.relative_to(tmp_path)) for h in hits] == ["gen/copies/k.cu", "src/k.cu"]


def test_without_a_demangler_a_namespaced_kernel_is_found_by_its_own_name(tmp_path, monkeypatch):
    """No c++filt on PATH: the base name of a mangled nested name is read from the
    mangling itself, and it is the kernel's (the innermost name), not its namespace's, so
    the grep finds `kcfix::inner::deep_kernel`. Mutation caught: the first source name of
    the mangling taken (the namespace)."""
    from kerncap.sources.names import base_name

    src = tmp_path / "src"
    src.mkdir()
    (src / "deep.cu").write_text("namespace kcfix { namespace inner {\n"
                                 "__global__ void deep_kernel(float* p) { p[0] = 1; }\n} }\n")
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))  # neither c++filt nor cu++filt
    assert base_name("_ZN5kcfix5inner11deep_kernelEPf") == "deep_kernel"
    assert base_name("_Z12scale_kernelIfEvPT_iS0_") == "scale_kernel"  # not nested: its one name
    report = discover("_ZN5kcfix5inner11deep_kernelEPf", tmp_path).report()
    assert (report["translation_unit"], report["method"]) == ("src/deep.cu", "grep")


def test_a_compile_database_one_level_below_a_build_directory_is_found(tmp_path):
    """A multi-config CMake build (Visual Studio's or Ninja Multi-Config's layout) writes
    build/Release/compile_commands.json: discovery finds it there and compiles as it
    records, not by grepping the objects. Mutation caught: the search of build*/'s
    subdirectories dropped."""
    from kerncap.sources.compdb import find_compdb

    import os

    tu, _ = _one_cubin_tree(tmp_path)
    os.utime(tu, (1_600_000_000, 1_600_000_000))  # built after its last edit
    release = tmp_path / "build" / "Release"
    release.mkdir()
    (tmp_path / "build" / "axpy.cubin").rename(release / "axpy.cubin")
    doc = json.loads((tmp_path / "build" / "compile_commands.json").read_text())
    doc[0].update(directory=str(release), file="../../src/axpy.cu")
    doc[0]["arguments"][4] = "../../src/axpy.cu"
    (tmp_path / "build" / "compile_commands.json").unlink()
    (release / "compile_commands.json").write_text(json.dumps(doc))
    assert find_compdb(tmp_path, None) == release / "compile_commands.json"
    report = discover("_Z12axpy_inplacefPKfPfi", tmp_path).report()
    assert (report["translation_unit"], report["method"], report["confidence"]) == ("src/axpy.cu",
                                                                                    "nm+compile_commands", "exact")
    (tmp_path / "build" / "compile_commands.json").write_text("[]")  # build/'s own comes first
    assert find_compdb(tmp_path, None) == tmp_path / "build" / "compile_commands.json"
