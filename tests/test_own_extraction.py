"""Issue 43: recompiling your own fresh extraction, and self-contained reproducers, with
real nvcc on the CPU. An app whose TU (src/k.cu) includes a header from ../include,
outside --source-dir (src/), compiled as compile_commands.json records it; extraction
copies that header into the reproducer (kerncap.recompile.selfcontained) and records
where the reproducer came from (kerncap.recompile.provenance)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kerncap.errors import KerncapError
from kerncap.recompile import provenance, recompile
from kerncap.recompile.selfcontained import finish_sources
from kerncap.reproducer.format import Capture
from kerncap.reproducer.pack import pack, unpack
from kerncap.sources import attach_sources
from kerncap.sources import cubin as cubinfo

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

KERNEL = "_Z8scale_byPfif"
HEADER = """#pragma once
__device__ __forceinline__ float times(float v, float a) { return v * a + 1.0f; }
"""
TU = """#include "scale.h"
__global__ void scale_by(float* y, int n, float a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = times(y[i], a);
}
"""


def make_app(root: Path, include: str = "-I../include") -> Path:
    """root/app/{include/scale.h, src/k.cu, build/k.o, build/compile_commands.json}, the
    header's directory given as `include`."""
    app = root / "app"
    for rel, text in (("include/scale.h", HEADER), ("src/k.cu", TU)):
        (app / rel).parent.mkdir(parents=True, exist_ok=True)
        (app / rel).write_text(text)
    build = app / "build"
    build.mkdir()
    command = ["nvcc", *include.format(app=app).split(), "-O3", "-std=c++17", "-arch=sm_90", "-c", "../src/k.cu", "-o", "k.o"]
    subprocess.run(command, cwd=build, check=True, capture_output=True)
    (build / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(build), "arguments": command, "file": "../src/k.cu", "output": "k.o"}]))
    return app


def write_capture(repro: Path, app: Path) -> None:
    """capture/: the kernel, its parameter layout, the GPU (sm_90) and its cubin."""
    cubin = repro.parent / "captured.cubin"
    subprocess.run(["nvcc", f"-I{app / 'include'}", "-O3", "-std=c++17", "-arch=sm_90", "-cubin", "-o", str(cubin),
                    str(app / "src" / "k.cu")], check=True, capture_output=True)
    data = cubin.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    (repro / "capture" / "cubins").mkdir(parents=True)
    (repro / "capture" / "cubins" / f"{sha}.cubin").write_bytes(data)
    elf = cubinfo.open_elf(data, "captured")
    params = [{"index": i, "offset": p.offset, "size": p.size, "value": "00" * p.size}
              for i, p in enumerate(cubinfo.param_layout(elf, KERNEL))]
    (repro / "capture" / "manifest.json").write_text(json.dumps({
        "format": "kerncap-capture", "format_version": 1, "complete": True, "chunk_size": 4194304, "hash": "xxh64",
        "provenance": {"synthetic": True, "gpu": {"name": "synthetic sm_90", "cc": [9, 0]}},
        "kernel": {"name": KERNEL, "demangled": KERNEL, "module": {"cubin": f"cubins/{sha}.cubin", "sha256": sha}},
        "launch": {"grid": [1, 1, 1], "block": [128, 1, 1], "shared_mem_bytes": 0},
        "params": params, "regions": [], "globals": []}))


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "kerncap" / "extracted"


@pytest.fixture
def extracted(tmp_path, state):
    """(app, make(copy_headers)): a reproducer as `kerncap extract --source-dir app/src` writes it."""
    app = make_app(tmp_path)

    def make(name: str, copy_headers: bool = True) -> Path:
        repro = tmp_path / name
        write_capture(repro, app)
        assert attach_sources(repro, Capture.open(repro), app / "src", app / "build")["kind"] == "cuda"
        if copy_headers:
            finish_sources(repro)
        else:  # the record alone: the -I outside --source-dir stays (ggml's mmvq.cu before issue 43)
            path = repro / "source" / "build.json"
            build = json.loads(path.read_text())
            build["origin"] = provenance.record(repro, build)
            path.write_text(json.dumps(build))
        return repro
    return app, make


def build_json(repro: Path) -> dict:
    return json.loads((repro / "source" / "build.json").read_text())


@needs_nvcc
def test_outside_header_is_copied_and_the_unpacked_reproducer_recompiles_the_same(extracted, tmp_path):
    app, make = extracted
    repro = make("repro")
    build = build_json(repro)
    copy = repro / "source" / "outside" / "0-include" / "scale.h"
    assert copy.read_text() == HEADER
    assert "-I../include" not in build["compile_command"]
    assert build["include_dirs"][0] == "outside/0-include"
    assert build["outside_include_dirs"] == {"outside/0-include": str(app / "include")}
    in_place = recompile(repro)  # no --trust
    assert in_place.mode == "reduced"
    result = pack(repro, tmp_path / "repro.kcap")
    assert not result.left_out, result.left_out
    elsewhere = tmp_path / "elsewhere" / "unpacked"
    elsewhere.parent.mkdir()
    unpack(result.path, elsewhere)
    assert provenance.verify(elsewhere, build_json(elsewhere)) is not None  # unpacked: not the extraction
    (app / "include" / "scale.h").write_text(HEADER.replace("1.0f", "2.0f"))  # the original is not what is read
    again = recompile(elsewhere)  # no --trust, and nothing outside the unpacked copy is read
    assert again.cubin.read_bytes() == in_place.cubin.read_bytes()
    shutil.rmtree(app)  # the app is gone: the unpacked copy still recompiles
    assert recompile(elsewhere).cubin.read_bytes() == in_place.cubin.read_bytes()


@needs_nvcc
def test_an_absolute_include_directory_through_dot_dot_is_copied_too(tmp_path, state):
    """CMake writes ggml's include directory as `-I<src>/../include`, so nvcc -M names its
    headers `<src>/../include/ggml.h`. On the H200 that header was left outside (the
    directory matched no normalized -I) and the recompile still read ggml's tree."""
    app = make_app(tmp_path, "-I{app}/src/../include -I {app}/src")
    repro = tmp_path / "repro"
    write_capture(repro, app)
    attach_sources(repro, Capture.open(repro), app / "src", app / "build")
    finish_sources(repro)
    build = build_json(repro)
    assert (repro / "source" / "outside" / "0-include" / "scale.h").read_text() == HEADER
    assert [a for a in build["compile_command"] if str(app) in a] == [f"{app}/src"]  # in-tree: copied by attach
    assert build["outside_include_dirs"] == {"outside/0-include": str(app / "include")}
    # The recompile names neither: the in-tree directory's copy stands alone (ggml's
    # -I<src>/ggml-cuda/.. was still on the H200's command line after the copy).
    result = recompile(repro)
    assert not [a for a in result.command if str(app) in a], result.command


@needs_nvcc
def test_the_local_toolkits_own_headers_stay_out_of_the_reproducer(tmp_path, state, monkeypatch):
    """A CUDA toolkit installed outside the system's directories (here tmp/toolkit, its nvcc
    force-including its own header as the toolkit reads its include/): its headers are the
    recompiling machine's, never copied nor reported as outside --source-dir; only the
    app's scale.h is. Mutation caught: the toolkit's directory left out of those skipped."""
    app = make_app(tmp_path)
    toolkit = tmp_path / "toolkit"
    (toolkit / "include").mkdir(parents=True)
    (toolkit / "include" / "kc_toolkit.h").write_text("#pragma once\n")
    (toolkit / "bin").mkdir()
    nvcc = toolkit / "bin" / "nvcc"
    real = os.path.realpath(shutil.which("nvcc"))
    nvcc.write_text(f'#!/bin/sh\nexec "{real}" -include "{toolkit}/include/kc_toolkit.h" "$@"\n')
    nvcc.chmod(0o755)
    monkeypatch.setenv("KERNCAP_NVCC", str(nvcc))
    repro = tmp_path / "repro"
    write_capture(repro, app)
    attach_sources(repro, Capture.open(repro), app / "src", app / "build")
    result = finish_sources(repro)
    assert result["outside_headers"] == 1, result
    assert not [n for n in result["notes"] if "kc_toolkit.h" in n], result["notes"]
    copied = sorted(p.name for p in (repro / "source" / "outside").rglob("*") if p.is_file())
    assert copied == ["scale.h"]


@needs_nvcc
def test_own_extraction_recompiles_with_its_include_directories(extracted):
    _, make = extracted
    repro = make("own", copy_headers=False)
    assert any(a == "-I../include" for a in build_json(repro)["compile_command"])
    assert recompile(repro).mode == "reduced"  # no --trust: this user extracted it here


def refused(repro: Path) -> None:
    with pytest.raises(KerncapError) as err:
        recompile(repro)
    assert "-I../include: searches headers in" in err.value.message and "outside the reproducer" in err.value.message
    assert "--trust" in err.value.hint


@needs_nvcc
def test_a_copy_an_edit_a_lost_record_or_another_user_is_refused_as_before(extracted, tmp_path, state, monkeypatch):
    _, make = extracted
    repro = make("own", copy_headers=False)
    copy = tmp_path / "copy"
    shutil.copytree(repro, copy, symlinks=True)  # same token, another directory
    refused(copy)
    assert "a copy or an unpacked pack" in provenance.verify(copy, build_json(copy))
    assert recompile(copy, trust=True).mode == "reduced"

    path = repro / "source" / "build.json"
    original = path.read_text()
    build = json.loads(original)
    build["compile_command"].insert(1, "-DEXTRA=1")  # the recorded compile changed since the extraction
    path.write_text(json.dumps(build))
    refused(repro)
    path.write_text(original)
    assert provenance.verify(repro, build_json(repro)) is None

    monkeypatch.setattr(os, "getuid", lambda: 4242)  # someone else reading my reproducer
    assert "is not yours" in provenance.verify(repro, build_json(repro))
    refused(repro)
    monkeypatch.undo()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))

    build = json.loads(original)
    build["origin"]["token"] = "0" * 32  # a token this user's state directory never issued
    path.write_text(json.dumps(build))
    assert "does not know it" in provenance.verify(repro, build_json(repro))
    refused(repro)
    path.write_text(original)
    for entry in state.iterdir():
        entry.unlink()  # the state directory lost the record
    refused(repro)


@needs_nvcc
def test_an_edit_to_any_field_the_extraction_vouches_for_ends_the_vouching(extracted):
    """The extraction's record vouches for the recorded compile as a whole: the kernel,
    the command, its directory, the source root, the translation unit and the include
    directories the reproducer holds copies of (which decide what the recompile shadows).
    An edit to any one of them since the extraction makes the reproducer anyone's again:
    its outside -I needs --trust. Mutation caught: include_dirs left out of the digest (an
    edited list still vouched for)."""
    _, make = extracted
    repro = make("own")
    original = build_json(repro)
    assert provenance.verify(repro, original) is None and original["include_dirs"]
    edits = {"kernel": "other_kernel", "compile_command": [*original["compile_command"], "-DEXTRA=1"],
             "cwd": original["cwd"] + "/..", "source_root": original["source_root"] + "/..", "tu": "other.cu",
             "include_dirs": [*original["include_dirs"], "outside/9-more"]}
    for field_name, value in edits.items():
        build = {**original, field_name: value}
        assert provenance.verify(repro, build) == "its recorded compile was edited since the extraction", field_name
    path = repro / "source" / "build.json"
    path.write_text(json.dumps({**original, "include_dirs": original["include_dirs"][1:]}))
    assert provenance.verify(repro, build_json(repro)) is not None


def test_a_state_directory_or_record_others_can_write_vouches_for_nothing(tmp_path, state):
    """The state directory is what makes a reproducer the user's own: where its group or
    anyone else can write (kerncap/, extracted/ or the token's file), another user could
    plant a record, so it vouches for nothing. Mutation caught: only others' write bit
    looked at (a group-writable state directory still vouched). Engine bug found beside
    it: under umask 002, record() made kerncap/ 0775 with mkdir(parents=True), so no
    extraction of that user was ever vouched for; both directories are made 0700 now."""
    repro = tmp_path / "own"
    (repro / "source").mkdir(parents=True)
    build = {"kernel": "scale_by", "compile_command": ["nvcc", "-c", "k.cu"], "cwd": str(tmp_path),
             "source_root": str(tmp_path), "tu": "k.cu", "include_dirs": [str(tmp_path / "include")]}
    old = os.umask(0o002)  # a user-private group's default
    try:
        build["origin"] = provenance.record(repro, build)
    finally:
        os.umask(old)
    (repro / "source" / "build.json").write_text(json.dumps(build))
    assert provenance.verify(repro, build) is None
    entry = state / f"{build['origin']['token']}.json"
    for path in (state.parent, state, entry):
        mode = path.stat().st_mode & 0o777
        assert not mode & 0o022, (path, oct(mode))
        for bit in (0o020, 0o002):  # its group's write, anyone's
            path.chmod(mode | bit)
            assert provenance.verify(repro, build) == f"{path} is not a private file or directory of yours"
        path.chmod(mode)
    assert provenance.verify(repro, build) is None
    # a state directory an earlier kerncap left 0775: the next record tightens it
    state.parent.chmod(0o775)
    build["origin"] = provenance.record(repro, build)
    assert state.parent.stat().st_mode & 0o777 == 0o700 and provenance.verify(repro, build) is None
