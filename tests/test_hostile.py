"""Issue 26's hostile inputs, one regression test each: what a reproducer from a stranger
could do to kerncap before, and what kerncap does now. docs/testing.md ("Hostile
reproducers") lists every case with what it prints; test_adversarial.py generates
variations of each class."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import xxhash
from hostile import AXPY, DEMO, env, kerncap, listing, read_pack, synthetic_reproducer, write_pack
from unprivileged import run_unprivileged, shared_tmp

from kerncap import api
from kerncap.cli import main
from kerncap.errors import KerncapError, UsageError
from kerncap.recompile import trust
from kerncap.reproducer.store import compress

NVCC = shutil.which("nvcc") or (os.path.isfile("/usr/local/cuda/bin/nvcc") and "/usr/local/cuda/bin/nvcc")
needs_nvcc = pytest.mark.skipif(not NVCC, reason="needs the CUDA toolkit's nvcc")


def marker_script(path: Path, marker: Path) -> Path:
    """A program that leaves `marker` when run: what a hostile reproducer ships."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def demo(tmp_path) -> Path:
    """A copy of the bundled demo reproducer (real H200 capture, CUDA C++ source, build.json)."""
    repro = tmp_path / "demo"
    shutil.copytree(DEMO, repro, ignore=shutil.ignore_patterns("variants"))
    return repro


def edit_build(repro: Path, **changes) -> dict:
    path = repro / "source" / "build.json"
    build = json.loads(path.read_text())
    build.update(changes)
    path.write_text(json.dumps(build))
    return build


# -- 1. code runs without --trust ---------------------------------------------------------------


@needs_nvcc
def test_a_recorded_nvcc_inside_the_reproducer_never_runs_even_root_owned_under_a_system_prefix(
        demo, tmp_path, monkeypatch):
    """Issue: unpacked as root under /opt, build.json naming <repro>/tools/nvcc ran that
    script with -dryrun before the review. The reproducer's own directory is declared a
    system prefix here (as /opt is), and the script is root-owned when the suite runs as root."""
    monkeypatch.setattr(trust, "SYSTEM_PREFIXES", (*trust.SYSTEM_PREFIXES, str(tmp_path) + "/"))
    monkeypatch.delenv("KERNCAP_NVCC", raising=False)
    marker = tmp_path / "ran"
    fake = marker_script(demo / "tools" / "nvcc", marker)
    build = json.loads((demo / "source" / "build.json").read_text())
    edit_build(demo, compile_command=[str(fake), *build["compile_command"][1:]])
    result = api.recompile(demo)
    assert not marker.exists() and os.path.realpath(result.command[0]) != str(fake)
    assert result.cubin.is_file()


@needs_nvcc
def test_dot_on_path_and_a_recorded_cwd_inside_the_reproducer_pick_no_host_compiler(demo, tmp_path, monkeypatch):
    """Issue: with "." in PATH, the recorded cwd decided which g++ ran (nvcc's dry run runs
    the host compiler to learn its version). PATH's relative entries are ignored now."""
    monkeypatch.delenv("KERNCAP_NVCC", raising=False)
    marker = tmp_path / "ran"
    for name in ("gcc", "g++", "cc", "c++"):
        marker_script(demo / "source" / name, marker)
    edit_build(demo, cwd=str(demo / "source"))
    monkeypatch.setenv("PATH", os.pathsep.join([".", "", os.environ["PATH"]]))
    monkeypatch.chdir(demo / "source")
    api.recompile(demo)
    assert not marker.exists()
    monkeypatch.setenv("PATH", os.pathsep.join([str(demo / "source"), os.environ["PATH"]]))  # absolute, inside
    api.recompile(demo)
    assert not marker.exists()


@pytest.mark.parametrize("flag, words", [
    (["-include", "/etc/passwd"], "includes the file /etc/passwd"),
    (["--pre-include=/etc/passwd"], "includes the file /etc/passwd"),
    (["-Xptxas=--options-file=/tmp/o"], "ptxas option(s) --options-file=/tmp/o"),
    (["-Xptxas=--output-file=/tmp/o"], "ptxas option(s) --output-file=/tmp/o"),
    (["-Xptxas", "-v,--fdevice-time-trace=/tmp/t"], "--fdevice-time-trace=/tmp/t"),
    (["-I/etc"], "searches headers in /etc"),
    (["-isystem", "/root"], "searches headers in /root"),
    (["-Xcompiler=-I/etc"], "searches headers in /etc"),
    (["-Xcompiler", "-imacros,/etc/passwd"], "-imacros"),
    (["--sysroot=/etc"], "searches headers in /etc"),
    (["-Xcompiler=-fdeps-file=x.json"], "-fdeps-file=x.json"),
])
def test_flags_reading_or_writing_outside_need_trust(tmp_path, flag, words):
    """Issue: `-include /etc/passwd` passed the review (and the compiler printed the file);
    -Xptxas=--options-file= and --output-file= passed too."""
    problems = trust.review(flag, tmp_path)
    assert len(problems) == 1 and words in problems[0], problems


@needs_nvcc
def test_include_of_etc_passwd_is_refused_before_anything_runs(demo, capsys):
    build = json.loads((demo / "source" / "build.json").read_text())
    edit_build(demo, compile_command=[build["compile_command"][0], "-include", "/etc/passwd",
                                      *build["compile_command"][1:]])
    assert main(["recompile", str(demo)]) == 3
    err = capsys.readouterr().err
    assert "-include /etc/passwd: includes the file /etc/passwd" in err and "--trust" in err
    assert "root:" not in err and not (demo / "variants").exists()


def test_list_configs_of_a_cuda_reproducer_says_what_it_is(demo, tmp_path, capsys):
    """Issue 47: `recompile --list-configs` of a CUDA reproducer said "extract again with
    kerncap >= 0.1"; it is a usage error (2) naming the kind and what applies instead."""
    assert main(["recompile", str(demo), "--list-configs"]) == 2
    err = capsys.readouterr().err
    assert "is a CUDA C++ reproducer, not a Triton one" in err and f"kerncap recompile {demo}" in err, err
    assert ">= 0.1" not in err and "extract" not in err


def test_a_fifo_build_json_is_named_not_missing(demo, capsys):
    """Issue 47: a FIFO at source/build.json was reported missing."""
    (demo / "source" / "build.json").unlink()
    os.mkfifo(demo / "source" / "build.json")
    assert main(["recompile", str(demo)]) == 3
    err = capsys.readouterr().err
    assert "source/build.json is not a regular file" in err and "missing" not in err, err


# -- 2. privilege escalation --------------------------------------------------------------------


def test_unpack_restores_no_set_id_sticky_or_writable_bits(tmp_path):
    """Issue: an index entry with mode 0o4755 unpacked as root gave -rwsr-xr-x root."""
    packed = api.pack(AXPY, tmp_path / "a.kcap").path
    index, frames = read_pack(packed)
    modes = {"reproducer.json": 0o4755, "capture/interposer.log": 0o6777, "capture": 0o1777, "capture/cubins": 0o2777}
    for e in index["entries"]:
        e["mode"] = modes.get(e["path"], e["mode"])
    evil = write_pack(tmp_path / "evil.kcap", index, frames)
    out = api.unpack(evil, tmp_path / "out").path
    for path, asked in modes.items():
        mode = stat.S_IMODE((out / path).lstat().st_mode)
        assert mode & 0o7022 == 0, (path, oct(asked), oct(mode))
    assert stat.S_IMODE((out / "reproducer.json").stat().st_mode) == 0o755
    api.open_capture(out).verify()


# -- 3. decompression bomb ----------------------------------------------------------------------


def bomb(tmp_path: Path, size: int) -> Path:
    """The real axpy pack plus one declared all-zero blob of `size` bytes (hash correct
    for 64 KiB; the pack is refused before any hash is looked at)."""
    packed = api.pack(AXPY, tmp_path / "a.kcap").path
    index, frames = read_pack(packed)
    zeros = bytes(64 << 10)
    h = xxhash.xxh64_hexdigest(zeros)
    index["blobs"].append({"hash": h, "size": size})
    return write_pack(tmp_path / "bomb.kcap", index, [*frames, (f"blobs/{h}", compress(zeros))])


def test_a_small_pack_declaring_gigabytes_is_refused_before_anything_is_written(tmp_path, capsys):
    """Issue: a 147 KiB pack declaring a 4 GiB zero blob unpacked (19 s, 4.2 GB of memory)."""
    evil = bomb(tmp_path, 4 << 30)
    assert main(["unpack", str(evil), "-o", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err
    assert "is refused: it declares 4.0 GiB from" in err and "--max-ratio" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.kcap", "bomb.kcap"]


def test_a_chunk_no_manifest_uses_is_refused_even_when_small(tmp_path, capsys):
    evil = bomb(tmp_path, 64 << 10)
    assert main(["unpack", str(evil), "-o", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err
    assert "which its manifest capture/manifest.json does not use" in err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob("*.partial-*"))


def test_a_large_entry_is_streamed_not_held_in_memory(tmp_path):
    """Issue: a 30 GiB entry (or any entry under a memory limit) ended in a MemoryError
    traceback: the whole payload was decompressed in memory. A 192 MiB file entry unpacks
    here in a process limited to 160 MiB more address space than it starts with."""
    src = tmp_path / "src"
    shutil.copytree(AXPY, src)
    (src / "history").mkdir()
    with open(src / "history" / "big.bin", "wb") as f:
        f.truncate(192 << 20)
    packed = api.pack(src, tmp_path / "big.kcap")
    assert packed.packed < 1 << 20
    shutil.rmtree(src)
    code = (
        "import resource, sys\n"
        "from kerncap.reproducer.pack import Limits, unpack\n"
        "from kerncap.reproducer import format\n"  # everything imported before the limit
        "import zstandard, xxhash\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_AS)\n"
        "base = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()\n"
        "resource.setrlimit(resource.RLIMIT_AS, (base + (160 << 20), hard))\n"
        "unpack(sys.argv[1], sys.argv[2], limits=Limits(max_ratio=1e6))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(packed.path), str(tmp_path / "out")],
                          capture_output=True, text=True, env=env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "out" / "history" / "big.bin").stat().st_size == 192 << 20


def test_limits_are_configurable(tmp_path):
    evil = bomb(tmp_path, 4 << 30)
    with pytest.raises(KerncapError, match="more than the 1.0 GiB kerncap unpacks"):
        api.unpack(evil, tmp_path / "out", limits=api.UnpackLimits(max_bytes=1 << 30))
    # past the limits, the manifest still decides: the 4 GiB blob is used by nothing
    with pytest.raises(KerncapError, match="does not use"):
        api.unpack(evil, tmp_path / "out", limits=api.UnpackLimits(max_ratio=1e9))
    assert main(["unpack", str(evil), "--max-bytes", "12Q"]) == 2  # not a size: usage


# -- also found: terminal escapes ---------------------------------------------------------------

ESCAPES = "\x1b[31mred\x1b]0;TITLE\x07\x9b2J\u202eevil"


def test_terminal_escapes_from_manifest_strings_are_escaped(tmp_path, capsys):
    """Issue: a demangled name holding ESC[31m…ESC]0;TITLE BEL reached the terminal raw
    from info and list."""
    repro = tmp_path / "ws" / "reproducers" / "esc"
    shutil.copytree(AXPY, repro)
    path = repro / "capture" / "manifest.json"
    m = json.loads(path.read_text())
    m["kernel"]["demangled"] = f"axpy{ESCAPES}"
    m["provenance"]["command"] = ["./app", ESCAPES]
    m["warnings"] = [ESCAPES]
    path.write_text(json.dumps(m))
    for argv in (["info", str(repro)], ["list", "--workspace", str(tmp_path / "ws")], ["info", str(repro / "x")]):
        main(argv)
        out, err = capsys.readouterr()
        for text in (out, err):
            assert not any(c in text for c in "\x1b\x07\x9b\u202e"), repr(text)
        assert "\\x1b[31mred" in out + err or argv[-1].endswith("x")
    assert main(["info", str(repro), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kernel"]["demangled"] == f"axpy{ESCAPES}"  # JSON is data


# -- also found: links inside a reproducer ------------------------------------------------------


@needs_nvcc
def test_recompile_refuses_a_variants_link_out_of_the_reproducer(demo, tmp_path):
    """Issue: a symlinked variants/ redirected recompile's writes outside the reproducer."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (demo / "variants").symlink_to(outside)
    with pytest.raises(KerncapError, match="variants is a symbolic link .*kerncap does not write through it"):
        api.recompile(demo)
    assert not any(outside.iterdir())


def test_source_edits_refuse_a_source_link_out_of_the_reproducer(tmp_path):
    """Found while adding MCP's sequence-kernel sources: a reproducer whose source/ is a
    link elsewhere had list_sources/read_source/write_source read and write through it."""
    repro = tmp_path / "r"
    shutil.copytree(AXPY, repro)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.cu").write_text("kept")
    (repro / "source").symlink_to(outside)
    for call in (lambda: api.write_source(repro, "x.cu", "evil"), lambda: api.read_source(repro, "secret.cu"),
                 lambda: api.list_sources(repro)):
        with pytest.raises(KerncapError, match="source is a symbolic link"):
            call()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.cu"]


def test_store_refuses_a_blobs_link_and_deletes_nothing_outside(tmp_path):
    """Issue: a symlinked capture/blobs/ made store delete another directory's files."""
    repro = tmp_path / "r"
    shutil.copytree(AXPY, repro)
    other = tmp_path / "other-blobs"
    shutil.move(repro / "capture" / "blobs", other)
    (repro / "capture" / "blobs").symlink_to(other)
    before = listing(other)
    assert main(["store", str(repro), "--store", str(tmp_path / "store")]) == 3
    assert listing(other) == before and not (repro / "capture" / "stored.json").exists()


def test_pack_and_store_refuse_a_capture_link_info_names_the_right_reproducer(tmp_path, capsys):
    """Issue: `pack` of a reproducer whose capture/ is a link to another reproducer was a
    traceback; `info` reported the link's target as the reproducer."""
    target = tmp_path / "target"
    shutil.copytree(AXPY, target)
    repro = tmp_path / "linked"
    repro.mkdir()
    (repro / "capture").symlink_to(target / "capture")
    assert main(["pack", str(repro), "-o", str(tmp_path / "l.kcap")]) == 3
    err = capsys.readouterr().err
    assert "capture is a symbolic link" in err and "Traceback" not in err
    assert main(["store", str(repro), "--store", str(tmp_path / "store")]) == 3
    assert "symbolic link" in capsys.readouterr().err and len(list((target / "capture" / "blobs").iterdir())) == 3
    assert api.info(repro)["path"] == str(repro)


# -- also found: tracebacks ----------------------------------------------------------------------


def test_a_nul_in_a_pack_entry_path_is_named(tmp_path, capsys):
    packed = api.pack(AXPY, tmp_path / "a.kcap").path
    index, frames = read_pack(packed)
    index["entries"][0]["path"] = "capture\x00x"
    evil = write_pack(tmp_path / "nul.kcap", index, frames)
    assert main(["unpack", str(evil), "-o", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err
    assert "holds a NUL character" in err and "Traceback" not in err


def test_a_pack_listing_a_file_and_a_directory_under_it_is_named(tmp_path, capsys):
    """Issue 47: a pack listing file `x` and directory `x/y` said "x is already exists
    (listed twice?)"."""
    packed = api.pack(AXPY, tmp_path / "a.kcap").path
    index, frames = read_pack(packed)
    index["entries"] += [{"path": "x", "type": "file", "mode": 0o644, "mtime": 0, "size": 2,
                          "xxh64": xxhash.xxh64_hexdigest(b"hi")},
                         {"path": "x/y", "type": "dir", "mode": 0o755, "mtime": 0}]
    evil = write_pack(tmp_path / "xy.kcap", index, [*frames, ("files/x", compress(b"hi"))])
    assert main(["unpack", str(evil), "-o", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err
    assert "entry 'x/y' lies under 'x', which the index lists as a file" in err and "already" not in err, err
    assert not (tmp_path / "out").exists()


def test_pack_leaves_out_a_file_name_that_is_not_utf8(tmp_path, capsys):
    src = tmp_path / "src"
    shutil.copytree(AXPY, src)
    (src / "source").mkdir()
    (src / "source" / os.fsdecode(b"caf\xe9.cu")).write_text("// latin-1 name\n")
    assert main(["pack", str(src), "-o", str(tmp_path / "s.kcap")]) == 0
    out = capsys.readouterr().out
    assert "left out: source/caf\\xe9.cu (a file name that is not UTF-8 text" in out
    api.unpack(tmp_path / "s.kcap", tmp_path / "back")


@needs_nvcc
def test_recompile_of_a_path_holding_byte_ff(tmp_path):
    """Issue: decoding nvcc's -dryrun output of such a path raised UnicodeDecodeError."""
    repro = tmp_path / os.fsdecode(b"r\xff")
    shutil.copytree(DEMO, repro, ignore=shutil.ignore_patterns("variants"))
    from kerncap.recompile.devcompile.build import CompileFailed

    try:
        assert api.recompile(repro).cubin.is_file()
    except CompileFailed as exc:  # the demo's asserts put the path in __FILE__: cicc refuses that byte itself
        assert "invalid multibyte character" in exc.log and str(repro) in exc.message


def test_mcp_write_source_with_a_nul_is_a_usage_error(demo):
    """Issue: MCP write_source with a NUL in the name: a traceback on the server's stderr,
    "Error executing tool" for the client."""
    with pytest.raises(UsageError, match="without '..' or a NUL"):
        api.write_source(demo, "k\x00.cu", "x")


def test_mcp_a_nul_in_the_reproducer_and_a_fifo_source_are_tool_errors(tmp_path):
    """Issue 47: MCP `info`/`read_source` with a NUL in `reproducer` raised ValueError on
    the server ("Error executing tool" for the client); `read_source` of a FIFO said "does
    not exist"."""
    pytest.importorskip("mcp")
    anyio = pytest.importorskip("anyio")
    from mcp import Client

    from kerncap.frontends.mcp_server import build_server

    root = tmp_path / "root"
    shutil.copytree(AXPY.parent / "graph_explicit", root / "g")
    os.mkfifo(root / "g" / "source" / "pipe.cu")

    async def go():
        async with Client(build_server([root])) as c:
            return [await c.call_tool(name, args) for name, args in (
                ("info", {"reproducer": "g\x00x"}), ("read_source", {"reproducer": "g\x00x", "file": "k.cu"}),
                ("read_source", {"reproducer": "g", "file": "pipe.cu"}))]

    nul_info, nul_read, fifo = anyio.run(go)
    for r in (nul_info, nul_read):
        assert r.is_error and "reproducer 'g\\x00x' holds a NUL character" in r.content[0].text, r.content
        assert r.structured_content["error"]["type"] == "UsageError"
    assert fifo.is_error and "pipe.cu is not a regular file (a FIFO or a device)" in fifo.content[0].text, fifo.content
    assert "does not exist" not in fifo.content[0].text


def test_sweep_of_variants_and_configs_together_is_a_usage_error(capsys):
    """Issue 47: `sweep --variants … --configs …` ran both and exited 3."""
    assert main(["sweep", str(AXPY), "--variants", "v.cubin", "--config", "num_warps=4"]) == 2
    err = capsys.readouterr().err
    assert "--variants does not go with --configs, --config or --autotune" in err, err


def test_mcp_http_on_a_busy_port_is_one_message(tmp_path):
    """Issue 47: `kerncap mcp --http` on a port in use printed uvicorn's bare error."""
    pytest.importorskip("mcp")
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = kerncap("mcp", "--root", str(tmp_path), "--http", f"127.0.0.1:{port}", timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith(f"kerncap mcp: error: cannot serve MCP on 127.0.0.1:{port}: Address already in use")
    assert "hint: pick another port" in proc.stderr and "ERROR" not in proc.stderr, proc.stderr


# The `kerncap` console script, in a child whose audit hook stops at the K-th import made
# after kerncap.__main__ starts: it tells the test (fd READY), which sends SIGINT and then
# lets it go on (fd GO). A handshake at a chosen import, instead of a sleep that lands
# anywhere (the machine's load decided where, and most tries fell outside kerncap's code).
STARTUP_CHILD = """
import _signal, os, sys
# a terminal's Ctrl-C, whatever the suite inherited (a script's background job has SIGINT
# ignored, and then kerncap rightly ignores it too: that failed three loaded runs)
_signal.signal(_signal.SIGINT, _signal.default_int_handler)
ready, go, target = (int(a) for a in sys.argv[1:4])
seen, held = 0, []
def hook(event, args):
    global seen
    if event != "import" or "kerncap.__main__" not in sys.modules:  # imports made by its code, from its first line
        return
    seen += 1
    held.append(_signal.SIGINT in _signal.pthread_sigmask(_signal.SIG_BLOCK, set()))
    if seen == target:
        os.write(ready, b"x")
        os.read(go, 1)
sys.addaudithook(hook)
sys.argv = ["kerncap", "info", sys.argv[4]]
import atexit
if target == 0:  # the counting run: which imports happen with SIGINT held
    atexit.register(lambda: os.write(ready, bytes(int(h) for h in held)))
from kerncap.__main__ import run
sys.exit(run())
"""


def startup_child(target: int) -> tuple[subprocess.Popen, int, int]:
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", STARTUP_CHILD, str(ready_w), str(go_r), str(target), str(AXPY)],
                            pass_fds=(ready_w, go_r), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env())
    os.close(ready_w)
    os.close(go_r)
    return proc, ready_r, go_w


def test_sigint_while_starting_is_no_traceback():
    """Issue: Ctrl-C while the CLI was still starting printed a traceback (11 of 40 tries
    in the first 15-65 ms: `import signal` ran before SIGINT was held). SIGINT is sent at
    the first imports after kerncap's entry starts and across the rest of its start-up
    (while SIGINT is held: the counting run says which), each by a handshake."""
    proc, ready_r, go_w = startup_child(0)
    with os.fdopen(ready_r, "rb") as r:
        flags = r.read()
    os.close(go_w)
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    window = max(i for i, h in enumerate(flags) if h) + 1  # up to the last import made with SIGINT held
    assert window > 20, flags
    for target in sorted({1, 2, 3, window // 4, window // 2, 3 * window // 4, window}):
        proc, ready_r, go_w = startup_child(target)
        with os.fdopen(ready_r, "rb") as r:
            assert r.read(1) == b"x", (target, proc.communicate(timeout=60)[1])
        proc.send_signal(signal.SIGINT)
        os.write(go_w, b"g")
        os.close(go_w)
        err = proc.communicate(timeout=120)[1]
        assert "Traceback" not in err, (target, err)
        assert proc.returncode == 130 and err == "kerncap: interrupted\n", (target, proc.returncode, err)


# -- also found: misleading messages --------------------------------------------------------------


def test_a_closed_pipe_ends_quietly():
    """Issue: `kerncap info DIR | head -1` printed "Broken pipe … check free space and
    permissions" and exited 3. The reader here is gone before the first write."""
    r, w = os.pipe()
    os.close(r)
    proc = subprocess.run([sys.executable, "-m", "kerncap", "info", str(AXPY)], stdout=w, stderr=subprocess.PIPE,
                          text=True, env=env(), timeout=60)
    os.close(w)
    assert proc.returncode == 141 and proc.stderr == "", proc.stderr


def test_a_closed_stdout_or_stderr_is_no_traceback(tmp_path):
    """Issue 47: `kerncap info DIR >&-` (stdout closed) was an AttributeError traceback,
    exit 1. A closed stdout is refused with one message (3); a closed stderr is /dev/null."""
    def shell(redirect: str) -> subprocess.CompletedProcess:
        return subprocess.run(["sh", "-c", f'exec "$0" -m kerncap info "$1" {redirect}', sys.executable, str(AXPY)],
                              capture_output=True, text=True, env=env(), timeout=60)

    closed = shell(">&-")
    assert closed.returncode == 3 and "Traceback" not in closed.stderr, closed.stderr
    assert closed.stderr.startswith("kerncap info: error: standard output is closed") and ">/dev/null" in closed.stderr
    quiet = shell("2>&-")
    assert quiet.returncode == 0 and quiet.stdout.startswith("reproducer  "), quiet


def test_the_bundled_demo_lacks_nothing(tmp_path):
    """Issue 47: the bundled demo greeted every newcomer with two "capture lacks …
    extract again with this kerncap" lines they could not act on. It is a capture of the
    current format (tests/gpu/make_demo.py on the H200): it lacks nothing, and an older
    capture still gets the advice to extract again."""
    copy = tmp_path / "demo"
    shutil.copytree(DEMO, copy)
    assert api.capture_lacks(api.open_capture(copy)) == []
    assert api.info(copy)["lacks"] == []
    older = tmp_path / "older"
    shutil.copytree(AXPY.parent / "axpy_older", older)
    said = api.capture_lacks(api.open_capture(older))
    assert said and all("extract again" in w for w in said), said


def test_a_garbage_store_marker_is_one_line_not_four_of_three_chunks(tmp_path, capsys):
    repro = tmp_path / "r"
    shutil.copytree(AXPY, repro)
    (repro / "capture" / "stored.json").write_text("garbage")
    for blob in (repro / "capture" / "blobs").iterdir():
        blob.unlink()
    assert main(["info", str(repro)]) == 3
    out = capsys.readouterr().out
    assert "DAMAGED     the store marker: " in out and "3 of 3 chunks missing" in out and "4 of 3" not in out


def test_hydrate_over_a_wrong_size_blob(tmp_path, capsys):
    """Issue 47: `hydrate` said "every payload is already in place" over a blob file of the
    wrong size that `info` calls DAMAGED. Stored: it is written back from the store; not
    stored: one message saying there is nothing to write it back from (3)."""
    repro = tmp_path / "r"
    shutil.copytree(AXPY, repro)
    blob = next((repro / "capture" / "blobs").iterdir())
    blob.write_bytes(blob.read_bytes()[:100])
    assert main(["hydrate", str(repro)]) == 3
    out, err = capsys.readouterr()
    assert "already in place" not in out and f"first: {blob.name} holds 100 bytes, expected 16384" in err, err
    assert "in no store" in err and "kerncap info" in err
    shutil.copyfile(AXPY / "capture" / "blobs" / blob.name, blob)
    api.store(repro, tmp_path / "store")
    blob.write_bytes(b"short")
    assert not api.info(repro)["payloads"]["ok"]
    assert main(["hydrate", str(repro)]) == 0
    assert "hydrated" in capsys.readouterr().out and api.info(repro, verify=True)["payloads"]["ok"]


def test_prune_beside_a_store_reads_the_moved_chunks_from_the_store(tmp_path, monkeypatch, capsys):
    """Issue 47: `prune` beside a concurrent `store` of the same reproducer said "the
    capture is incomplete; extract again" (the data was intact, moved to the store). Here
    the store runs, in full, between prune's start and its copying of the chunks."""
    from kerncap.prune import pruner

    repro = synthetic_reproducer(tmp_path / "r", [os.urandom(4096) for _ in range(4)], unreachable=2)
    closure = pruner.compute_closure

    def store_meanwhile(cap, *args, **kwargs):
        api.store(repro, tmp_path / "store")
        return closure(cap, *args, **kwargs)

    monkeypatch.setattr(pruner, "compute_closure", store_meanwhile)
    out = tmp_path / "pruned"
    assert main(["prune", str(repro), "--no-validate", "-o", str(out)]) == 0, capsys.readouterr().err
    assert not list((repro / "capture" / "blobs").glob("*.bin"))  # the store did run
    assert api.info(out, verify=True)["payloads"]["ok"]
    assert len(api.info(out)["regions"]) == 1


def test_info_verify_reads_the_cubin(tmp_path):
    """Issue: info --verify said "hashes verified" when the cubin could not be read."""
    t = shared_tmp()
    try:
        repro = t / "r"
        shutil.copytree(AXPY, repro)
        cubin = next((repro / "capture" / "cubins").iterdir())
        cubin.chmod(0o000)
        summary = run_unprivileged(lambda: api.info(repro, verify=True)["payloads"]["summary"])
        assert "cubin cannot be read (Permission denied)" in summary and "hashes verified" not in summary
    finally:
        shutil.rmtree(t)


def test_one_unreadable_reproducer_is_a_row_not_an_abort(tmp_path):
    t = shared_tmp()
    try:
        ws = t / "ws"
        for name in ("a", "b", "c"):
            shutil.copytree(AXPY, ws / "reproducers" / name)
        subprocess.run(["chmod", "-R", "a+rX", str(t)], check=True)
        (ws / "reproducers" / "a").chmod(0o000)
        (ws / "reproducers" / "b" / "capture" / "manifest.json").chmod(0o000)
        rows = run_unprivileged(lambda: api.list_reproducers(ws))
        by = {Path(r["path"]).name: r for r in rows}
        assert set(by) == {"a", "b", "c"} and by["c"]["error"] is None and by["c"]["payloads"] == "ok"
        assert "Permission denied" in by["a"]["error"] and "Permission denied" in by["b"]["error"]
    finally:
        (t / "ws" / "reproducers" / "a").chmod(0o755)
        shutil.rmtree(t)


def test_list_names_a_garbage_record_or_history_and_exits_3(tmp_path, capsys):
    """Issue 47: `list` exited 0 over an unreadable history.json or a garbage
    reproducer.json (docs/cli.md: 3 when any row has a problem); each is named now."""
    ws = tmp_path / "ws"
    for name in ("a", "b", "c"):
        shutil.copytree(AXPY, ws / "reproducers" / name)
    (ws / "reproducers" / "a" / "reproducer.json").write_text("garbage")
    (ws / "reproducers" / "b" / "history.json").write_text("garbage")
    assert main(["list", "--workspace", str(ws)]) == 3
    out = capsys.readouterr().out
    assert f"! {ws}/reproducers/a: {ws}/reproducers/a/reproducer.json is not valid JSON" in out, out
    assert f"! {ws}/reproducers/b: {ws}/reproducers/b/history.json is not valid JSON" in out, out
    assert "reproducers/c:" not in out and out.count(" axpy_inplace  ") == 3  # every row still listed
    assert main(["list", "--workspace", str(ws), "--json"]) == 3
    rows = {Path(r["path"]).name: r for r in json.loads(capsys.readouterr().out)}
    assert [len(rows[n]["problems"]) for n in "abc"] == [1, 1, 0]


def test_pack_with_an_empty_output_name(tmp_path, capsys):
    """Issue: `pack -o ''` said ". already exists"."""
    assert main(["pack", str(AXPY), "-o", ""]) == 2
    assert "the pack file name (-o) is empty" in capsys.readouterr().err
    assert main(["pack", str(AXPY), "-o", str(tmp_path)]) == 3
    assert "is a directory" in capsys.readouterr().err


def test_unpack_of_a_fifo_does_not_hang(tmp_path):
    fifo = tmp_path / "p.kcap"
    os.mkfifo(fifo)
    proc = kerncap("unpack", str(fifo), "-o", str(tmp_path / "out"), timeout=30)
    assert proc.returncode == 3 and "is not a regular file" in proc.stderr


def test_a_manifest_of_five_million_regions_is_refused_before_it_is_parsed(tmp_path):
    """Issue: a 979 MB manifest with 5 M regions took 32 s and 5.2 GB before the schema
    refused it. Its '{' are counted first (here 5 M empty region objects, 15 MB)."""
    repro = tmp_path / "r"
    shutil.copytree(AXPY, repro)
    path = repro / "capture" / "manifest.json"
    text = path.read_text()
    at = text.index('"regions":') + len('"regions":') + text[text.index('"regions":') + 10:].index("[") + 1
    path.write_text(text[:at] + "{}," * 5_000_000 + text[at:])
    with pytest.raises(KerncapError, match="holds more than 4194304 JSON objects"):
        api.info(repro)


def test_a_nul_in_the_kernel_name_is_refused(tmp_path):
    repro = tmp_path / "r"
    shutil.copytree(AXPY, repro)
    path = repro / "capture" / "manifest.json"
    m = json.loads(path.read_text())
    m["kernel"]["name"] = "_Z4axpy\x00evil"
    path.write_text(json.dumps(m))
    with pytest.raises(KerncapError, match=r"field kernel.name holds a NUL character"):
        api.info(repro)


@pytest.fixture
def small_fs(tmp_path):
    """A 64 KiB tmpfs (a real full disk); skipped where mounting is not allowed."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_prune_on_a_full_disk_names_the_first_error(tmp_path, small_fs, capsys):
    """Issue: prune on a full disk printed a 2 KB Python list as its message."""
    repro = synthetic_reproducer(tmp_path / "r", [os.urandom(4096) for _ in range(4)], unreachable=2)
    (repro / "source").mkdir()
    for i in range(40):
        (repro / "source" / f"f{i}.cu").write_bytes(os.urandom(4096))
    assert main(["prune", str(repro), "--no-validate", "-o", str(small_fs / "out")]) == 3
    err = capsys.readouterr().err
    assert "cannot write the pruned reproducer" in err and "No space left on device" in err, err
    assert "[(" not in err and len(err) < 700, err
    assert "more file(s)" in err and not list(small_fs.iterdir())


# -- also found: leftovers and a transient DAMAGED ---------------------------------------------


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_temp_files_of_killed_store_and_hydrate_are_removed_by_the_next_run(tmp_path):
    """Issue: SIGINT during store or hydrate left a hidden 4 MiB .tmp object that later
    runs never removed."""
    repro = tmp_path / "r"
    shutil.copytree(AXPY, repro)
    store = tmp_path / "store"
    pid = dead_pid()
    h = next(api.open_capture(repro).iter_blobs())
    left_object = store / "objects" / h[:2] / f".{h}.zst.{pid}.0123abcd.tmp"
    left_object.parent.mkdir(parents=True)
    left_object.write_bytes(b"x" * 100)
    api.store(repro, store)
    assert not left_object.exists()
    left_blob = repro / "capture" / "blobs" / f".{h}.bin.{pid}.0123abcd.tmp"
    left_blob.write_bytes(b"x")
    api.hydrate(repro)
    assert not left_blob.exists() and api.info(repro, verify=True)["payloads"]["ok"]


def test_ctrl_c_inside_a_write_leaves_no_temp_file(tmp_path, monkeypatch):
    from kerncap.core import fsio

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(fsio.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fsio.write_atomic(tmp_path / "x.json", "{}")
    assert list(tmp_path.iterdir()) == []


# `kerncap store` of each path read from stdin, in one process that imports kerncap once;
# after each, a line with the command's exit status.
STORE_EACH_LINE = """
import contextlib, os, sys
from kerncap.cli import main
for line in sys.stdin:
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        status = main(["store", line.rstrip("\\n")])
    print(f"stored {status}", flush=True)
"""


def test_list_verify_beside_a_store_never_reports_damaged(tmp_path):
    """Issue: a `list --verify` beside a `store` of the same reproducer reported it
    DAMAGED in 2 of 10 rounds. Ten rounds of a store of 96 chunks in another process while
    this one lists and verifies without pause. The other process starts once and stores
    when told (issue 44: ten start-ups, with this one verifying through each, were 34 s of
    CPU; the verifying only matters while a store runs)."""
    rounds, reports = 10, []
    proc = subprocess.Popen([sys.executable, "-c", STORE_EACH_LINE], env=env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for i in range(rounds):
            ws = tmp_path / f"ws{i}"
            repro = synthetic_reproducer(ws / "reproducers" / "r", [os.urandom(4096) for _ in range(96)])
            said: list[str] = []
            reader = threading.Thread(target=lambda: said.append(proc.stdout.readline()))
            proc.stdin.write(f"{repro}\n")
            proc.stdin.flush()
            reader.start()
            while reader.is_alive():
                reports += [(i, r["payloads"], r["error"]) for r in api.list_reproducers(ws, verify=True)]
            assert said == ["stored 0\n"], (said, proc.stderr.read() if proc.poll() is not None else "")
            reports += [(i, r["payloads"], r["error"]) for r in api.list_reproducers(ws, verify=True)]
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    bad = [r for r in reports if r[1] != "ok" or r[2]]
    assert not bad and len(reports) > rounds, bad[:3]
