"""Issue 47 (recompile, build, fuse): what a recompile lets the compiler read from a
reproducer someone else made, recorded parallel flags, and `kerncap build`'s reuse of a
cubin across processes. Real nvcc on copies of the bundled demo reproducer (its recorded
command has -Werror=all-warnings); the fusion cases on test_fusion_build's sequence.
SIGTERM and what a killed compile leaves: test_sigkill.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hostile import DEMO, env

from kerncap import api
from kerncap.cli import main
from kerncap.errors import KerncapError
from kerncap.recompile import inputs, trust
from kerncap.recompile.trust import UntrustedCommand

NVCC = shutil.which("nvcc") or (os.path.isfile("/usr/local/cuda/bin/nvcc") and "/usr/local/cuda/bin/nvcc")
pytestmark = pytest.mark.skipif(not NVCC, reason="needs the CUDA toolkit's nvcc")
SECRET = "KERNCAP_ISSUE47_SECRET"


@pytest.fixture
def demo(tmp_path) -> Path:
    repro = tmp_path / "demo"
    shutil.copytree(DEMO, repro, ignore=shutil.ignore_patterns("variants"))
    return repro


@pytest.fixture
def secret(tmp_path) -> Path:
    """A file outside the reproducer (what /etc/shadow stands for), valid C++ so that a
    trusted compile that includes it builds."""
    path = tmp_path / "outside" / "secret.h"
    path.parent.mkdir()
    path.write_text(f"// {SECRET}\n")
    return path


def include(repro: Path, line: str) -> None:
    tu = repro / "source" / "smooth" / "smooth.cu"
    tu.write_text(line + "\n" + tu.read_text())


def cubins(repro: Path) -> list[str]:
    return sorted(p.name for p in (repro / "variants").glob("*.cubin")) if (repro / "variants").is_dir() else []


# -- files outside the reproducer -------------------------------------------------------------------


@pytest.mark.parametrize("included", [True, False], ids=["included", "not-included"])
def test_a_source_linking_out_of_the_reproducer_is_refused_by_name(demo, secret, capsys, included):
    """Issue 47: source/common/evil.h -> /etc/shadow, included by the TU: recompile printed
    its first line in the compiler's error. Refused by name now, included or not."""
    link = demo / "source" / "common" / "evil.h"
    link.symlink_to(secret)
    if included:
        include(demo, '#include "../common/evil.h"')
    assert main(["recompile", str(demo)]) == 3
    out, err = capsys.readouterr()
    assert f"{link} is a symbolic link to {secret}, outside the reproducer" in err, err
    assert SECRET not in out + err and cubins(demo) == []


def test_a_link_into_a_sibling_sharing_the_reproducers_name_is_outside(tmp_path):
    """`repro-evil/` beside `repro/` is outside the reproducer, though its path begins with
    the reproducer's; `source2/` beside `source/` is outside `source/`. Mutation caught:
    inside tested as a string prefix (no `/` after the root)."""
    repro = tmp_path / "repro"
    (repro / "source").mkdir(parents=True)
    (repro / "source2").mkdir()
    (tmp_path / "repro-evil").mkdir()
    (tmp_path / "repro-evil" / "secret.h").write_text(f"// {SECRET}\n")
    link = repro / "source" / "evil.h"
    link.symlink_to(tmp_path / "repro-evil" / "secret.h")
    with pytest.raises(KerncapError, match="is a symbolic link to .*repro-evil/secret.h, outside the reproducer"):
        inputs.check_tree(repro / "source", repro)
    link.unlink()
    (repro / "source" / "ext").symlink_to(repro / "source2")
    with pytest.raises(KerncapError, match="is a symbolic link to the directory .*source2, outside"):
        inputs.check_tree(repro / "source", repro)
    (repro / "source" / "ext").unlink()
    (repro / "source" / "inner").mkdir()
    (repro / "source" / "ext").symlink_to(repro / "source" / "inner")  # a link within source/ is checked where it leads
    assert inputs.check_tree(repro / "source", repro) == []


def test_a_directory_link_out_and_a_link_inside_the_reproducer(demo, secret, capsys):
    (demo / "source" / "ext").symlink_to(secret.parent)
    assert main(["recompile", str(demo)]) == 3
    assert "source/ext is a symbolic link to" in capsys.readouterr().err
    (demo / "source" / "ext").unlink()
    # a link to a file of the reproducer itself reads nothing outside it: it builds
    (demo / "source" / "common" / "alias.hpp").symlink_to(demo / "source" / "common" / "testapp.hpp")
    include(demo, '#include "../common/alias.hpp"')
    assert main(["recompile", str(demo)]) == 0


def test_the_workbench_build_and_mcp_refuse_the_same_link(demo, secret):
    """The workbench's `b`, `kerncap build` and MCP's build tool call Session.build; MCP's
    recompile tool api.recompile: each refuses before the compiler runs."""
    (demo / "source" / "common" / "evil.h").symlink_to(secret)
    include(demo, '#include "../common/evil.h"')
    with api.open_session(demo, compile_worker=False) as s:
        with pytest.raises(KerncapError, match="is a symbolic link to .*outside the reproducer") as err:
            s.build(api.BuildRequest())
    assert SECRET not in str(err.value) and cubins(demo) == []
    mcp = pytest.importorskip("mcp")
    import anyio

    from kerncap.frontends.mcp_server import build_server

    async def go():
        async with mcp.Client(build_server([demo.parent])) as c:
            return [await c.call_tool(tool, {"reproducer": demo.name}) for tool in ("recompile", "build")]
    for result in anyio.run(go):
        text = result.content[0].text
        assert result.is_error and "outside the reproducer" in text and SECRET not in text, text


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_fifo_or_socket_in_source_is_refused_at_once(demo, monkeypatch, kind):
    """Issue 47: recompile hung for ever on a FIFO in source/ (the compiler waits on it)."""
    path = demo / "source" / "common" / "pipe.h"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        sock = socket.socket(socket.AF_UNIX)
        monkeypatch.chdir(path.parent)  # a short relative name: AF_UNIX paths are limited to 108 bytes
        sock.bind(path.name)
        sock.close()  # the socket file stays
    include(demo, '#include "../common/pipe.h"')
    done = subprocess.run([sys.executable, "-m", "kerncap", "recompile", str(demo)], capture_output=True, text=True,
                          env=env(), timeout=60)
    assert done.returncode == 3, done.stderr
    words = "is a FIFO (named pipe), not a regular file" if kind == "fifo" else "is a socket, not a regular file"
    assert f"{path} {words}" in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("line", [
    '#include "{secret}"',
    '  %: include <{secret}>',
    '# /* hidden */ include "{secret}"',
    '#inc\\\nlude "{secret}"',
    '#include "{escape}"',
    '#define SECRET_FILE "{secret}"\n#include SECRET_FILE',
], ids=["absolute", "digraph", "comment", "splice", "escaping", "computed"])
def test_an_include_outside_the_reproducer_needs_trust(demo, secret, capsys, line):
    """Issue 47: `#include "/etc/shadow"` in a source: the compiler printed the file. Refused
    like a recorded `-include /etc/shadow` (exit 3, --trust to run it)."""
    escape = "../" * len(demo.parts) + str(secret).lstrip("/")
    include(demo, line.format(secret=secret, escape=escape))
    assert main(["recompile", str(demo)]) == 3
    out, err = capsys.readouterr()
    assert "include files kerncap cannot confine to the reproducer" in err and "smooth.cu:" in err, err
    assert ("a computed #include" in err) if "SECRET_FILE" in line else (f"includes the file {secret}" in err), err
    assert SECRET not in out + err and "--trust" in err and cubins(demo) == []
    assert main(["recompile", str(demo), "--trust"]) == 0  # read, and trusted
    assert cubins(demo) == ["1.cubin"]


def test_includes_that_stay_inside_pass_the_scan(tmp_path):
    src = tmp_path / "r" / "source"
    (src / "a").mkdir(parents=True)
    (src / "a" / "k.cu").write_text('#include "../b.h"\n#include <cuda_fp16.h>\n#include "/usr/include/stdio.h"\n'
                                    "// #include \"/etc/shadow\"\n/* #include \"/etc/passwd\" */\n")
    (src / "b.h").write_text("")
    files = inputs.check_tree(src, tmp_path / "r")
    assert inputs.include_problems(files, trust.ReadPlaces(tmp_path / "r")) == []


def test_a_fused_kernel_including_a_file_outside_is_refused(tmp_path, monkeypatch, secret):
    """Issue 47: MCP fuse_build with `#include "/etc/shadow"` in the fused source printed the
    file's first line in nvcc's error. A fusion has no --trust: refused."""
    from test_fusion_build import fused_body, without_the_copy
    from test_sequences import _pipeline_with_entries

    repro = without_the_copy(_pipeline_with_entries(tmp_path, monkeypatch))
    source = api.fuse_skeleton(repro, 0, 1, "pair")
    body = fused_body(repro, "pair")
    for line in (f'#include "{secret}"', '#include "' + "../" * 40 + str(secret).lstrip("/") + '"'):
        api.fuse_edit(repro, "pair", source=line + "\n" + body)
        with pytest.raises(KerncapError, match=r"fused\.cu includes files outside the reproducer") as err:
            api.fuse_build(repro, "pair")
        assert f"includes the file {secret}" in err.value.message and SECRET not in err.value.message
    source.write_text(body)
    assert api.fuse_build(repro, "pair").is_file()  # the same fusion without it builds


# -- recorded parallel and diagnostic flags -----------------------------------------------------------

PARALLEL = ["--threads", "0", "-t", "2", "--threads=4", "-split-compile", "0", "-jobserver", "-v", "-err-no",
            "-Wno-deprecated-gpu-targets", "-res-usage"]


def test_recorded_parallel_flags_build_reduced_and_full(demo):
    """Issue 47: a recorded `--threads 0` (CMake projects pass it) broke every recompile with
    gcc's "cannot specify '-o' ... multiple files": nvcc's dry run then lists each step with
    shell redirections. `-jobserver` outside make made ptxas warn, fatal under -Werror."""
    path = demo / "source" / "build.json"
    build = json.loads(path.read_text())
    build["compile_command"][1:1] = PARALLEL
    path.write_text(json.dumps(build))
    reduced = api.recompile(demo)
    assert reduced.mode == "reduced" and not reduced.notes, reduced.notes
    assert "--threads" in reduced.command and "-jobserver" not in reduced.command
    assert api.recompile(demo, mode="full").mode == "full"
    assert trust.review(PARALLEL, demo) == []


# -- kerncap build reuses its cubin across processes ---------------------------------------------------


def test_kerncap_build_reuses_an_unchanged_sources_cubin_across_processes(demo, tmp_path, monkeypatch, capsys):
    """Issue 47: without a GPU, every `kerncap build` compiled a new variants/N.cubin (the
    workbench's in-memory record is per process). A record in the user's cache, checked
    against the cubin's size and SHA-256, makes the next build reuse it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = main(["build", str(demo)])
    assert cubins(demo) == ["1.cubin"]
    capsys.readouterr()
    assert main(["build", str(demo)]) == first
    out = capsys.readouterr().out
    assert cubins(demo) == ["1.cubin"], out  # nothing compiled
    if first != 3:
        return  # a GPU here: the first build was recorded, the second one "unchanged"
    assert "source/ is unchanged since 1.cubin was compiled: replaying it" in out and "recompiling" not in out
    assert not list(demo.rglob("*.built*")) and list((tmp_path / "cache" / "kerncap" / "builds").iterdir())
    assert main(["build", str(demo), "--full"]) == 3  # another mode: compiled
    assert cubins(demo) == ["1.cubin", "2.cubin"]
    (demo / "variants" / "1.cubin").write_bytes((demo / "variants" / "1.cubin").read_bytes() + b"\0")
    assert main(["build", str(demo)]) == 3  # 1.cubin is not what was compiled any more: compiled again
    assert cubins(demo) == ["1.cubin", "2.cubin", "3.cubin"]
    capsys.readouterr()
    include(demo, "// an edit")
    main(["build", str(demo)])
    assert cubins(demo)[-1] == "4.cubin" and "recompiling" in capsys.readouterr().out
