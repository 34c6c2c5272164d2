"""Untrusted reproducers: `kerncap recompile` runs only the local toolkit's nvcc, with
recorded flags from an allow-list; anything that could run another program, read
options from a file or write outside the reproducer needs --trust. Real nvcc on the
CMake fixture build (test_sources_project.py)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_recompile import reproducer, write_capture  # noqa: F401  (fixtures)
from test_sources_project import built_project  # noqa: F401  (session fixture)

from kerncap.cli import main
from kerncap.errors import KerncapError
from kerncap.recompile import trust
from kerncap.recompile.cuda import recompile

DEMO_FLAGS = ["-forward-unknown-to-host-compiler", "-I/work/main/testapps/cuda", "-O3", "-DNDEBUG", "-std=c++17",
              "-lineinfo", "-Xcompiler=-Wall", "-Werror=all-warnings", "-x", "cu", "-Xcompiler", "-fPIC,-O2",
              "--expt-relaxed-constexpr", "-use_fast_math", "-Xptxas", "-v,--warn-on-spills", "-isystem",
              "/usr/include", "-ccbin=/usr/bin/g++", "--diag-suppress=177", "-Xcudafe", "--diag_suppress=20012",
              "-DFOO=\"a b\"", "-fopenmp", "-march=native", "-maxrregcount", "64", "-G", "-ftz=true"]


def test_flags_of_real_builds_pass(tmp_path):
    # /work/main/testapps/cuda: the app's in-tree include directory the reproducer holds a copy of
    places = trust.ReadPlaces(tmp_path, extra=[Path("/work/main/testapps/cuda")])
    assert trust.review(DEMO_FLAGS, tmp_path, places) == []


@pytest.mark.parametrize("flags, words", [
    (["-Xcompiler=-fplugin=/tmp/evil.so"], "-fplugin=/tmp/evil.so may load or run other programs"),
    (["-Xcompiler", "-B/tmp/bin"], "-B/tmp/bin"),
    (["-Xcompiler=-wrapper,/tmp/x"], "-wrapper"),
    (["-Xcompiler", "-Wp,-MD,/etc/x"], "-Wp,-MD,/etc/x"),
    (["-Wl,-rpath,/x"], "not an option kerncap knows"),
    (["-fuse-ld=/tmp/ld"], "not an option kerncap knows"),
    (["-fplugin=/tmp/p.so"], "not an option kerncap knows"),
    (["@opts.rsp"], "response file"),
    (["--options-file", "o.txt"], "reads further options from a file"),
    (["-odir", "/tmp"], "writes files outside the reproducer"),
    (["--keep-dir=/tmp/k"], "writes files outside the reproducer"),
    (["-keep"], "writes files outside the reproducer"),
    (["-ccbin", "g++"], "relative path"),
    (["-ccbin=/tmp/evil/g++"], "outside the system's directories"),
    (["-Xptxas", "-o,/tmp/x"], "ptxas option"),
    (["-Xcudafe", "--something_else"], "front-end options"),
    (["other.cu"], "an input other than the kernel's translation unit"),
])
def test_flags_outside_the_allow_list_are_named(tmp_path, flags, words):
    (tmp_path / "evil").mkdir()
    problems = trust.review(flags, tmp_path)
    assert len(problems) == 1 and words in problems[0], problems


def test_a_host_compiler_inside_the_reproducer_is_refused(tmp_path):
    (tmp_path / "source").mkdir()
    fake = tmp_path / "source" / "g++"
    fake.write_text("#!/bin/sh\n")
    assert "inside the reproducer" in trust.review([f"-ccbin={fake}"], tmp_path)[0]


def test_an_include_path_is_judged_by_where_its_links_lead(tmp_path):
    """A directory or header inside the reproducer that is a link out of it reads outside:
    named, as the same path given directly would be; a link that stays inside passes."""
    repro, outside = tmp_path / "repro", tmp_path / "elsewhere"
    (repro / "source").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.h").write_text("#error read\n")
    (repro / "source" / "inc").symlink_to(outside)
    (repro / "source" / "pre.h").symlink_to(outside / "secret.h")
    (repro / "source" / "here").symlink_to(repro / "source")
    for flags in (["-I", "source/inc"], ["-isystem=source/inc"], ["-include", "source/pre.h"],
                  ["-Xcompiler", "-Isource/inc"], [f"-I{repro}/source/inc"]):
        problems = trust.review(flags, repro, trust.ReadPlaces(repro))
        assert len(problems) == 1 and str(outside) in problems[0] and "outside the reproducer" in problems[0], \
            (flags, problems)
    assert trust.review(["-Isource/here", "-Isource"], repro, trust.ReadPlaces(repro)) == []


def test_a_directory_beside_the_reproducer_that_shares_its_name_is_outside(tmp_path, monkeypatch):
    """Inside means under the reproducer's directory, not a path that starts with its name:
    `repro-evil/` beside `repro/` is outside for the include review and for PATH."""
    repro, beside = tmp_path / "repro", tmp_path / "repro-evil"
    (repro / "source").mkdir(parents=True)
    (repro / "bin").mkdir()
    beside.mkdir()
    (beside / "secret.h").write_text("#error read\n")
    for flags in (["-I", "../repro-evil"], [f"-I{beside}"], ["-include", f"{beside}/secret.h"],
                  ["-Xcompiler", f"-isystem{beside}"]):
        problems = trust.review(flags, repro, trust.ReadPlaces(repro))
        assert len(problems) == 1 and str(beside) in problems[0] and "outside the reproducer" in problems[0], \
            (flags, problems)
    assert trust.review(["-Isource", f"-I{repro}"], repro, trust.ReadPlaces(repro)) == []
    monkeypatch.setenv("PATH", os.pathsep.join([str(repro / "bin"), str(beside), "/usr/bin"]))
    assert trust.search_path(repro).split(os.pathsep) == [str(beside), "/usr/bin"]


@pytest.fixture
def marker_nvcc(tmp_path):
    """A program named nvcc that leaves a marker when run: what a hostile reproducer records."""
    fake = tmp_path / "evil" / "nvcc"
    fake.parent.mkdir()
    marker = tmp_path / "ran"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    fake.chmod(0o755)
    return fake, marker


def test_recorded_compiler_is_never_run(reproducer, marker_nvcc, monkeypatch):  # noqa: F811
    monkeypatch.delenv("KERNCAP_NVCC", raising=False)
    fake, marker = marker_nvcc
    repro = reproducer("_Z13bounded_saxpyfPKfPfi")
    build = repro / "source" / "build.json"
    record = json.loads(build.read_text())
    record["compile_command"][0] = str(fake)
    build.write_text(json.dumps(record))
    result = recompile(repro)
    assert not marker.exists() and result.command[0] != str(fake)
    assert Path(result.command[0]).name == "nvcc" and result.cubin.is_file()


def _keeping(reproducer, tmp_path: Path) -> tuple[Path, Path]:
    """bounded_saxpy's reproducer with `-keep --keep-dir=<tmp>/keep` in its recorded command."""
    repro = reproducer("_Z13bounded_saxpyfPKfPfi")
    build = repro / "source" / "build.json"
    record = json.loads(build.read_text())
    keep = tmp_path / "keep"
    keep.mkdir()
    record["compile_command"][1:1] = ["-keep", f"--keep-dir={keep}"]
    build.write_text(json.dumps(record))
    return repro, keep


def test_hostile_flags_need_trust_and_nothing_is_written(reproducer, capsys, tmp_path):  # noqa: F811
    repro, keep = _keeping(reproducer, tmp_path)
    assert main(["recompile", str(repro)]) == 3
    err = capsys.readouterr().err
    assert "flags outside kerncap's allow-list" in err and f"--keep-dir={keep}" in err and "-keep:" in err
    assert "--trust" in err and "command: " in err
    assert not (repro / "variants").exists() and not any(keep.iterdir())
    # The user read them and trusts the reproducer: the command runs, and is shown.
    assert main(["recompile", str(repro), "--trust"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("$ ") and f"--keep-dir={keep}" in out and "variants/1.cubin" in out
    assert any(keep.iterdir())  # nvcc kept its intermediate files where the flag said


def test_nvcc_run_as_one_step_still_checks_the_kernel_it_built(reproducer, tmp_path):  # noqa: F811
    """Trusted flags that say where nvcc keeps its files make kerncap run nvcc as one step,
    as recorded; its cubin is checked like a stepwise one's: an edit that changes the
    kernel's signature is refused and leaves no variant. Mutation caught: the one-step
    compile's cubin accepted unchecked (a variant the replay would launch with the
    captured argument bytes)."""
    repro, keep = _keeping(reproducer, tmp_path)
    tu = next((repro / "source").rglob("bounded.cu"))
    tu.write_text(tu.read_text().replace("float a,", "double a,"))
    with pytest.raises(KerncapError, match="no longer defines _Z13bounded_saxpyfPKfPfi: did the signature change"):
        recompile(repro, trust=True)
    assert any(keep.iterdir())  # nvcc ran as one step: it kept its files where the flag said
    assert not list(repro.glob("variants/*.cubin"))


def test_api_and_json(reproducer, capsys):  # noqa: F811
    repro = reproducer("_Z13bounded_saxpyfPKfPfi")
    build = repro / "source" / "build.json"
    record = json.loads(build.read_text())
    record["compile_command"].insert(1, "-Xcompiler=-fplugin=/nonexistent/p.so")
    build.write_text(json.dumps(record))
    assert main(["recompile", str(repro), "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)["error"]
    assert doc["type"] == "UntrustedCommand" and "-fplugin" in doc["message"]


def test_local_nvcc_prefers_the_toolkit(tmp_path, monkeypatch, marker_nvcc):
    fake, _ = marker_nvcc
    monkeypatch.delenv("KERNCAP_NVCC", raising=False)
    real = shutil.which("nvcc")
    if real is None:
        pytest.skip("no nvcc on PATH")
    assert trust.local_nvcc(str(fake)) == real
    assert trust.local_nvcc(real) == real
    monkeypatch.setenv("KERNCAP_NVCC", str(fake))  # the user's own choice is honoured
    assert trust.local_nvcc("/somewhere/nvcc") == str(fake)
    os.environ.pop("KERNCAP_NVCC")
    with pytest.raises(Exception, match="drives nvcc"):
        trust.local_nvcc("/bin/sh")


def test_of_several_local_toolkits_the_one_the_app_was_built_with_is_chosen(tmp_path, monkeypatch):
    """Two toolkits here (CUDA_HOME's first, another on PATH): the recorded nvcc picks the
    local one it names, also through a link to it; a recorded nvcc that is none of them
    (another machine's) gets the first local one, never itself."""
    toolkits = {}
    for name in ("cuda-12.4", "cuda-12.8"):
        nvcc = tmp_path / name / "bin" / "nvcc"
        nvcc.parent.mkdir(parents=True)
        nvcc.write_text("#!/bin/sh\nexit 0\n")
        nvcc.chmod(0o755)
        toolkits[name] = str(nvcc)
    (tmp_path / "cuda").symlink_to(tmp_path / "cuda-12.8")
    for var in ("KERNCAP_NVCC", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda-12.4"))
    monkeypatch.setenv("PATH", f"{tmp_path / 'cuda-12.8' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    assert trust.local_nvcc(toolkits["cuda-12.8"]) == toolkits["cuda-12.8"]
    assert trust.local_nvcc(str(tmp_path / "cuda" / "bin" / "nvcc")) == toolkits["cuda-12.8"]
    assert trust.local_nvcc(toolkits["cuda-12.4"]) == toolkits["cuda-12.4"]
    assert trust.local_nvcc("/other/machine/cuda-12.8/bin/nvcc") == toolkits["cuda-12.4"]
    assert trust.local_nvcc("nvcc") == toolkits["cuda-12.4"]


@pytest.mark.parametrize("step", ["ptxas", "cicc"])
def test_compile_steps_outside_the_local_toolkit_need_trust(reproducer, monkeypatch, tmp_path, step):  # noqa: F811
    """kerncap runs nvcc's steps itself (issue 18): a step whose program is not the local
    toolkit's (here ptxas, or cicc, swapped for a script, as a PATH set by a hostile
    environment could) is refused before anything runs, naming it (also as review_steps
    says it); --trust runs it."""
    from kerncap.recompile.devcompile import phases
    from kerncap.recompile.devcompile.build import CompileFailed

    repro = reproducer("_Z13bounded_saxpyfPKfPfi")
    marker = tmp_path / "ran"
    fake = tmp_path / step
    fake.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    fake.chmod(0o755)
    real_plan = phases.plan

    def hostile_plan(*args, **kwargs):
        p = real_plan(*args, **kwargs)
        getattr(p, step).argv[0] = str(fake)
        return p

    monkeypatch.setattr(phases, "plan", hostile_plan)
    with pytest.raises(trust.UntrustedCommand, match=rf"{step} .*{step}: not part of the CUDA toolkit"):
        recompile(repro)
    assert not marker.exists() and not any((repro / "variants").glob("*.cubin"))
    with pytest.raises(CompileFailed):  # trusted: it runs (and this stand-in fails the build)
        recompile(repro, trust=True)
    assert marker.exists()
    toolkit = tmp_path / "cuda"
    problems = trust.review_steps(str(toolkit / "bin" / "nvcc"), {step: str(fake)}, repro)
    assert len(problems) == 1 and problems[0].startswith(f"{step} {fake}: not part of the CUDA toolkit"), problems
    local = toolkit / ("nvvm/bin/cicc" if step == "cicc" else "bin/ptxas")
    assert trust.review_steps(str(toolkit / "bin" / "nvcc"), {step: str(local)}, repro) == []
