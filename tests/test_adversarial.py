"""The adversarial suite of issue 26: a generator for each class of hostile input, not
one fixed case (those are test_hostile.py), each case counted (FUZZ_CASES, printed at the
end of the run; the counts are in docs/testing.md).

* pack indexes whose entries' modes, sizes, names and declared chunks (ratios) are drawn
  adversarially: unpack ends in a reproducer or one KerncapError, writes nothing outside
  its target, never a link, a set-ID, sticky or group/world-writable bit, nor a chunk its
  manifest does not use;
* build.json commands drawn from every nvcc / host compiler flag that can read, write or
  run something, with paths inside, outside and beside the reproducer: the review names
  each one that needs --trust (and only those); real recompiles with programs planted
  wherever a reproducer can place them (its tools, its source/, the recorded cwd, PATH
  entries ".", "" and inside it) never run one of them;
* control characters in every string of the manifest and reproducer.json (and in a
  section no schema knows yet): no front end prints one raw;
* a symbolic link at every directory of a reproducer: store, hydrate, prune, pack,
  recompile never write or delete through it;
* SIGINT, SIGTERM and SIGKILL at random points of pack, unpack, store, hydrate, prune
  and recompile: no traceback, nothing half-written that looks complete, the next run
  cleans up;
* a source/ holding links out, FIFOs, sockets and #includes of files outside (absolute,
  escaping, computed, written with digraphs, splices and comments), and their harmless
  look-alikes, at drawn places: recompile refuses exactly the hostile ones, at once, and
  never prints what lies outside;
* readers (info/list --verify, pack) beside writers (store, hydrate) of one reproducer:
  never a transient DAMAGED.
"""

from __future__ import annotations

import copy
import io
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import xxhash
from conftest import FUZZ_CASES
from hostile import (AXPY, DEMO, SOURCE_PLANTS, SOURCE_SECRET, env, listing, plant_source, read_pack,
                     synthetic_reproducer, write_pack)
from hypothesis import given, settings
from hypothesis import strategies as st

from test_fuzz import FUZZ, assert_only_kerncap_errors

from kerncap import api
from kerncap.cli import main
from kerncap.core import fsio
from kerncap.errors import KerncapError
from kerncap.recompile import trust
from kerncap.recompile.cuda import device_flags
from kerncap.reproducer.format import Capture, capture_chunks
from kerncap.reproducer.store import compress

NVCC = shutil.which("nvcc") or (os.path.isfile("/usr/local/cuda/bin/nvcc") and "/usr/local/cuda/bin/nvcc")
RAW = set("\x00\x01\x07\x08\x0b\x0c\x0d\x1b\x7f\x85\x9b\u202e\u2066\u2028")


def counted(name: str, n: int = 1) -> None:
    FUZZ_CASES[name] = FUZZ_CASES.get(name, 0) + n


# -- pack indexes -----------------------------------------------------------------------------------

NAMES = st.sampled_from(["../x", "/etc/x", "a/../../x", ".", "..", "", "capture", "capture/blobs", "x\x00y",
                         "\udcff", "a" * 300, "x\\y", "capture/manifest.json", "capture/blobs/00.bin", "./x",
                         "x//y", "x/.", "\x1b[31m", "reproducer.json"]) | st.text(
    alphabet=st.sampled_from("ab./\\\x00\x1b\u202e-_"), max_size=12)
MODES = st.integers(0, 0o177777) | st.sampled_from([0o4755, 0o2755, 0o6777, 0o1777, 0o777, 0o666, 0o000, 0o7777])


class Frames(tuple):
    """(index, frames) of a pack, shown briefly when hypothesis reports a case."""

    def __repr__(self) -> str:
        return f"<the axpy pack: {len(self[1])} frames>"


@pytest.fixture(scope="module")
def axpy_pack(tmp_path_factory):
    root = tmp_path_factory.mktemp("adv-pack")
    return Frames(read_pack(api.pack(AXPY, root / "axpy.kcap").path))


def check_unpacked(out: Path, packed_size: int) -> None:
    """What a successful unpack may leave: plain files and directories, masked modes,
    only chunks the manifest uses, no more than the limits allow."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(out):
        for name in dirnames + filenames:
            st_ = os.lstat(os.path.join(dirpath, name))
            assert stat.S_ISREG(st_.st_mode) or stat.S_ISDIR(st_.st_mode), (name, oct(st_.st_mode))
            assert stat.S_IMODE(st_.st_mode) & 0o7022 == 0, (name, oct(st_.st_mode))
            total += st_.st_size if stat.S_ISREG(st_.st_mode) else 0
    cap = Capture.open(out)
    used = {f"{h}.bin" for h, _ in capture_chunks(cap)}
    assert {p.name for p in (cap.root / "blobs").iterdir()} <= used
    assert api.UnpackLimits().problem(total, packed_size) is None


@settings(FUZZ, max_examples=500)
@given(data=st.data())
def test_pack_index_modes_sizes_names_and_ratios(axpy_pack, tmp_path_factory, data):
    index, frames = copy.deepcopy(tuple(axpy_pack))
    entries = index["entries"]
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        op = data.draw(st.sampled_from(["mode", "size", "name", "blob", "bomb", "dup", "dir-as-file"]), label="op")
        e = data.draw(st.sampled_from(entries), label="entry")
        if op == "mode":
            e["mode"] = data.draw(MODES, label="mode")
        elif op == "size" and e["type"] == "file":
            e["size"] = data.draw(st.integers(0, 1 << 40) | st.sampled_from([0, 1, e["size"] - 1, e["size"] + 1]))
        elif op == "name":
            old = e["path"]
            e["path"] = data.draw(NAMES, label="name")
            frames = [(f"files/{e['path']}" if n == f"files/{old}" else n, p) for n, p in frames]
        elif op in ("blob", "bomb"):  # a chunk no manifest uses: small and honest, or declaring gigabytes
            size = data.draw(st.integers(1, 1 << 16), label="blob size")
            raw = data.draw(st.sampled_from([bytes(size), os.urandom(size)]), label="blob bytes")
            h = xxhash.xxh64_hexdigest(raw)
            declared = size if op == "blob" else data.draw(st.integers(1 << 30, 1 << 32), label="declared")
            index["blobs"].append({"hash": h, "size": declared})
            frames.append((f"blobs/{h}", compress(raw)))
        elif op == "dup":
            entries.append(dict(e))
        else:
            e["type"] = "dir" if e["type"] == "file" else "file"
            e.setdefault("size", 0)
            e.setdefault("xxh64", "0" * 16)
    work = tmp_path_factory.mktemp("adv-u", numbered=True)
    path = write_pack(work / "p.kcap", index, frames)
    before = set(os.listdir(work))
    result = assert_only_kerncap_errors(api.unpack, path, work / "out")
    assert set(os.listdir(work)) - before <= {"out"}, "unpack wrote outside its target"
    if isinstance(result, KerncapError):
        assert not (work / "out").exists()
    else:
        check_unpacked(work / "out", path.stat().st_size)
    shutil.rmtree(work, ignore_errors=True)
    counted("adversarial pack index")


# -- compile commands -------------------------------------------------------------------------------

# Every option of nvcc and of the host compiler that reads, writes or runs something,
# with the path P it names ("@" marks those that need --trust whatever P is).
ALWAYS = ["@{P}", "--options-file={P}", "-optf {P}", "-odir {P}", "--keep-dir={P}", "-keep", "-save-temps",
          "-ccbin {R}/g++", "--compiler-bindir={R}", "-Xcompiler=-fplugin={P}", "-Xcompiler=-B{P}", "-Xcompiler=-wrapper,{P}",
          "-Xcompiler=-specs={P}", "-Xcompiler=-save-temps", "-Xcompiler=-Wp,-MD,{P}", "-Xcompiler=-Wa,-a={P}",
          "-Wl,-rpath,{P}", "-Xcompiler=-fdump-tree-all", "-Xcompiler=-fprofile-generate={P}",
          "-Xcompiler=-fdeps-file=x.json", "-Xcompiler=-fcallgraph-info", "-Xcompiler=-fstack-usage",
          "-Xcompiler=-aux-info,{P}", "-Xcompiler=-fmodule-mapper=|cat", "-Xcompiler=-fdiagnostics-add-output=sarif",
          "-Xptxas=--output-file={P}", "-Xptxas=--options-file={P}", "-Xptxas=--fdevice-time-trace={P}",
          "-Xptxas -knob,X", "--fdevice-time-trace={P}", "-time {P}", "--run", "-Xcudafe=--gen_c_file_name={P}",
          "-fplugin={P}", "--use-local-env", "-Xcompiler=-fsanitize-ignorelist={P}",
          "-Xcompiler=-ftime-trace", "-Xcompiler=-fpass-plugin={P}", "--dryrun", "{P}"]
READS = ["-I{P}", "-I {P}", "-I={P}", "-isystem {P}", "--include-path={P}", "--system-include={P}", "-include {P}",
         "--pre-include={P}", "-Xcompiler=-I{P}", "-Xcompiler=-isystem{P}", "-Xcompiler -include,{P}",
         "-Xcompiler -imacros,{P}", "-Xcompiler -iquote,{P}", "-Xcompiler -idirafter,{P}", "--sysroot={P}",
         "-Xcompiler=--sysroot={P}", "-Xcompiler -isysroot,{P}"]
SAFE = ["-O3", "-lineinfo", "-DX=1", "-DY=\"a\"", "-std=c++17", "-Xcompiler=-Wall,-fPIC", "-Xptxas=-v",
        "--expt-relaxed-constexpr", "-use_fast_math", "-G", "-maxrregcount 64", "-x cu", "-Werror=all-warnings",
        "-Xcompiler=-O2", "--diag-suppress=177", "-Xcudafe=--diag_suppress=20012", "-ftz=true",
        "-Xcompiler -isystem,/usr/include", "-isystem /usr/include", "-I/nonexistent",
        "-Xnvlink=--output-file=/tmp/x", "-Xfatbin=-compress-all", "-o x.o", "-MF {P}", "-MD", "-c"]


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    root = tmp_path_factory.mktemp("adv-review")
    repro = root / "repro"
    (repro / "source" / "inc").mkdir(parents=True)
    (repro / "source" / "inc" / "h.h").write_text("")
    (repro / "g++").write_text("#!/bin/sh\n")  # a host compiler the reproducer ships
    (root / "outside").mkdir()
    (root / "outside" / "h.h").write_text("")
    inside = [str(repro / "source" / "inc"), str(repro / "source" / "inc" / "h.h"), "inc", "inc/h.h"]
    system = ["/usr/include", "/usr/include/stdio.h"]
    outside = [str(root / "outside"), str(root / "outside" / "h.h"), "/etc", "/etc/passwd", "../../outside",
               str(repro / "source" / "inc" / ".." / ".." / ".." / "outside")]
    absent = ["/nonexistent/x", "no/such/dir"]
    return repro, {"inside": inside, "system": system, "outside": outside, "absent": absent}


def words(template: str, path: str, repro: Path) -> list[str]:
    return template.replace("{P}", path).replace("{R}", str(repro)).split(" ")


@settings(FUZZ, max_examples=800)
@given(data=st.data())
def test_compile_command_review(places, data):
    repro, paths = places
    flags: list[str] = []
    expected = 0
    for _ in range(data.draw(st.integers(1, 6), label="flags")):
        kind = data.draw(st.sampled_from(["safe", "safe", "always", "reads"]), label="kind")
        where = data.draw(st.sampled_from(sorted(paths)), label="where")
        path = data.draw(st.sampled_from(paths[where]), label="path")
        template = data.draw(st.sampled_from({"safe": SAFE, "always": ALWAYS, "reads": READS}[kind]), label="flag")
        flags += words(template, path, repro)
        expected += kind == "always" or (kind == "reads" and where == "outside")
    argv = ["/usr/local/cuda/bin/nvcc", *flags, "-c", "/src/k.cu"]
    kept = device_flags(argv, Path("/src/k.cu"), repro / "source")
    problems = trust.review(kept, repro, trust.ReadPlaces(repro, cwd=repro / "source"))
    assert bool(problems) == bool(expected), (flags, problems)
    counted("adversarial compile command")


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The demo reproducer with a marker program at every place a reproducer can put one."""
    root = tmp_path_factory.mktemp("adv-planted")
    repro = root / "demo"
    shutil.copytree(DEMO, repro, ignore=shutil.ignore_patterns("variants"))
    marker = root / "ran"
    for where in ("tools", "source", "source/smooth", "bin"):
        for name in ("nvcc", "gcc", "g++", "cc", "c++", "cicc", "ptxas", "fatbinary", "nvlink", "cudafe++"):
            path = repro / where / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"#!/bin/sh\necho \"$0\" >> {marker}\nexit 1\n")
            path.chmod(0o755)
    return repro, marker, json.loads((repro / "source" / "build.json").read_text())


@pytest.mark.skipif(not NVCC, reason="needs the CUDA toolkit's nvcc")
@settings(FUZZ, max_examples=8)
@given(data=st.data())
def test_recompile_runs_no_program_the_reproducer_holds(planted, monkeypatch, data):
    repro, marker, build = planted
    compiler = data.draw(st.sampled_from([str(repro / "tools" / "nvcc"), "nvcc", "./nvcc", "tools/nvcc",
                                          build["compile_command"][0]]), label="compiler")
    cwd = data.draw(st.sampled_from([str(repro / "source"), str(repro / "tools"), str(repro), "/nonexistent", "."]))
    ccbin = data.draw(st.sampled_from([[], [f"-ccbin={repro / 'tools' / 'g++'}"], ["-ccbin", "g++"],
                                       [f"--compiler-bindir={repro / 'bin'}"]]), label="ccbin")
    path = data.draw(st.lists(st.sampled_from([".", "", str(repro / "tools"), str(repro / "source"), "bin"]),
                              max_size=3), label="PATH entries")
    record = {**build, "compile_command": [compiler, *ccbin, *build["compile_command"][1:]], "cwd": cwd}
    (repro / "source" / "build.json").write_text(json.dumps(record))
    monkeypatch.delenv("KERNCAP_NVCC", raising=False)
    monkeypatch.setenv("PATH", os.pathsep.join([*path, os.environ["PATH"]]))
    monkeypatch.chdir(repro if data.draw(st.booleans(), label="cd into it") else repro.parent)
    result = assert_only_kerncap_errors(api.recompile, repro)
    counted("adversarial recompile (real nvcc): refused" if isinstance(result, KerncapError) else
            "adversarial recompile (real nvcc): built")
    assert not marker.exists(), marker.read_text()
    if ccbin and ccbin[0] != "-ccbin" and not isinstance(result, KerncapError):  # (a relative one not there is dropped)
        raise AssertionError(f"{ccbin} passed the review")


# -- control characters in every string ---------------------------------------------------------------

CONTROL_TEXT = st.text(alphabet=st.sampled_from(sorted(RAW) + list("ab ;]0[m")), min_size=1, max_size=8)


def poison(doc, data, keep: set[str]) -> object:
    """Every string in `doc` (keys in `keep` aside) with control characters mixed in."""
    if isinstance(doc, dict):
        return {k: v if k in keep else poison(v, data, keep) for k, v in doc.items()}
    if isinstance(doc, list):
        return [poison(v, data, keep) for v in doc]
    if isinstance(doc, str):
        return doc + data.draw(CONTROL_TEXT, label="control")
    return doc


@pytest.fixture(scope="module")
def escapes_ws(tmp_path_factory):
    return tmp_path_factory.mktemp("adv-esc")


# 20 cases (40 until issue 44): each poisons every string of both files and runs 11
# commands; `replay` alone starts a replay server a case (half the test's 38 s of CPU).
@settings(FUZZ, max_examples=20)
@given(data=st.data())
def test_control_characters_in_every_string_never_reach_the_terminal(escapes_ws, data):
    ws = escapes_ws / f"ws{FUZZ_CASES.get('adversarial control characters', 0)}"
    name = "r" + data.draw(CONTROL_TEXT, label="directory name").replace("/", "").replace("\x00", "")
    repro = ws / "reproducers" / name
    shutil.copytree(AXPY, repro)
    mpath = repro / "capture" / "manifest.json"
    # hashes, hex and the cubin path must stay well-formed for the rest to be read at all
    keep = {"format", "hash", "pre", "post", "value", "param_buffer", "cubin", "sha256"}
    m = poison(json.loads(mpath.read_text()), data, keep)
    m["hostmem"] = {"regions": [{"name": "x", "note": "y"}]}  # a section no schema knows yet (issue 25)
    m["hostmem"] = poison(m["hostmem"], data, set())
    mpath.write_text(json.dumps(m))
    rpath = repro / "reproducer.json"
    rpath.write_text(json.dumps(poison(json.loads(rpath.read_text()), data, {"kerncap_version"})))
    for argv in (["info", str(repro)], ["info", str(repro), "--verify"], ["list", "--workspace", str(ws)],
                 ["validate", str(repro)], ["replay", str(repro)], ["check", str(repro)], ["pack", str(repro), "-o",
                 str(ws / "p.kcap"), "--force"], ["recompile", str(repro)], ["prune", str(repro), "--no-validate",
                 "-o", str(ws / "pruned")], ["info", str(repro) + "\x1b[2J"]):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            main(argv)
        text = out.getvalue() + err.getvalue()
        assert not RAW & set(text), (argv[0], [c for c in text if c in RAW][:5], text[:300])
        shutil.rmtree(ws / "pruned", ignore_errors=True)
    out = io.StringIO()
    with redirect_stdout(out):
        main(["info", str(repro), "--json"])
    if out.getvalue().startswith("{") and '"error"' not in out.getvalue()[:20]:
        assert json.loads(out.getvalue())["kernel"]["demangled"] == m["kernel"]["demangled"]
    from kerncap.frontends.mcp_server import _error_result

    try:
        api.recompile(repro)
    except KerncapError as exc:
        assert not RAW & set(_error_result(exc).content[0].text)
    shutil.rmtree(ws, ignore_errors=True)
    counted("adversarial control characters")


# -- a symbolic link at every directory -------------------------------------------------------------


def reproducer_dirs() -> list[str]:
    dirs = ["capture", "capture/blobs", "capture/cubins", "source", "variants", "history", "dumps"]
    dirs += sorted(str(p.relative_to(DEMO)) for p in (DEMO / "source").rglob("*") if p.is_dir())
    return list(dict.fromkeys(dirs))


WRITERS = ["store", "hydrate", "prune", "pack", "dump", "recompile"]


@pytest.mark.parametrize("rel", reproducer_dirs())
def test_a_link_at_every_directory_is_never_written_through(tmp_path, rel):
    outside = tmp_path / "outside"
    for writer in WRITERS:
        if writer == "recompile" and not NVCC:
            continue
        work = tmp_path / writer
        repro = work / "demo"
        shutil.copytree(DEMO, repro)
        (repro / "variants").mkdir(exist_ok=True)
        (repro / "history").mkdir(exist_ok=True)
        (repro / "dumps").mkdir(exist_ok=True)
        if writer == "hydrate":
            api.store(repro, work / "store")
        target = outside / writer
        target.parent.mkdir(exist_ok=True)
        shutil.move(repro / rel, target)
        (repro / rel).symlink_to(target, target_is_directory=True)
        before = listing(target)
        if writer == "store":
            assert_only_kerncap_errors(api.store, repro, work / "store")
        elif writer == "hydrate":
            assert_only_kerncap_errors(api.hydrate, repro)
        elif writer == "prune":
            assert_only_kerncap_errors(api.prune, repro, validate=False, output=work / "pruned")
        elif writer == "pack":
            assert_only_kerncap_errors(api.pack, repro, work / "p.kcap")
        elif writer == "dump":  # the captured states: no GPU needed
            assert_only_kerncap_errors(api.dump, repro)
        else:
            assert_only_kerncap_errors(api.recompile, repro)
        assert listing(target) == before, f"{writer} wrote or deleted through {rel} -> {target}"
        counted("adversarial links")


# -- SIGINT and SIGKILL at random points ------------------------------------------------------------

RNG = random.Random(26)


def big_reproducer(path: Path) -> Path:
    """A synthetic reproducer whose commands take a noticeable moment: 64 chunks of 256 KiB."""
    return synthetic_reproducer(path, [os.urandom(256 << 10) for _ in range(64)], chunk_size=256 << 10)


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if fsio.is_leftover_name(p.name)]


def _until_kerncap_holds_signals(proc: subprocess.Popen) -> None:
    """The random delay counts from kerncap's first statement (kerncap/__main__.py holds
    SIGINT and SIGTERM there), not from the fork: before it, a signal lands in CPython's
    own start-up ("Fatal Python error: init_import_site"), which no code of kerncap's can
    handle, and under load that start-up alone took longer than the delay."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            return
        blocked = next((int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigBlk:")), 0)
        if blocked & (1 << (signal.SIGINT - 1)):
            return
        time.sleep(0.001)


def interrupt(argv: list[str], sig: int, delay: float) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([sys.executable, "-m", "kerncap", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env())
    _until_kerncap_holds_signals(proc)
    time.sleep(delay)
    proc.send_signal(sig)
    err = proc.communicate(timeout=120)[1]
    return subprocess.CompletedProcess(argv, proc.returncode, "", err)


@pytest.fixture(scope="module")
def interrupt_sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("adv-int")
    repro = big_reproducer(root / "src")
    packed = api.pack(repro, root / "src.kcap").path
    return repro, packed


COMMANDS = ["pack", "unpack", "store", "hydrate", "prune", "recompile"]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_interrupted_at_a_random_point(tmp_path, interrupt_sources, command, sig):
    if command == "recompile" and not NVCC:
        pytest.skip("needs nvcc")
    src, packed = interrupt_sources
    for round_ in range(2):
        work = tmp_path / f"{round_}"
        repro = work / "r"
        if command == "recompile":
            shutil.copytree(DEMO, repro, ignore=shutil.ignore_patterns("variants"))
        else:
            shutil.copytree(src, repro)
        store = work / "store"
        if command == "hydrate":
            api.store(repro, store)
        argv = {"pack": ["pack", str(repro), "-o", str(work / "p.kcap")],
                "unpack": ["unpack", str(packed), "-o", str(work / "u")],
                "store": ["store", str(repro), "--store", str(store)],
                "hydrate": ["hydrate", str(repro)],
                "prune": ["prune", str(repro), "--no-validate", "-o", str(work / "pruned")],
                "recompile": ["recompile", str(repro)]}[command]
        done = interrupt(argv, sig, RNG.uniform(0.05, 1.2 if command == "recompile" else 0.7))
        assert "Traceback" not in done.stderr, done.stderr
        if sig in (signal.SIGINT, signal.SIGTERM):
            # 130 (143), or death by the signal when it arrived as the interpreter started or exited:
            # both read 130 (143) in a shell
            assert done.returncode in (0, 128 + sig, -sig), (done.returncode, done.stderr)
            if done.returncode == 128 + sig:
                assert len(done.stderr.splitlines()) == 1, done.stderr  # one line
            assert not temp_files(work), temp_files(work)  # Ctrl-C and SIGTERM clean up after themselves
        # what exists looks complete and reads back
        for out in (work / "u", work / "pruned"):
            if out.exists():
                Capture.open(out).verify()
        if (work / "p.kcap").exists():
            api.unpack(work / "p.kcap", work / "check")
        # the next run succeeds, and leaves no temp file of the killed one in its own directories
        assert main(argv) in (0, 3) if command in ("pack", "unpack", "prune") else main(argv) == 0
        api.open_capture(repro).verify()
        for d in (store / "objects", repro / "capture" / "blobs", repro / "variants"):
            if d.is_dir() and command in ("store", "hydrate"):
                assert not [p for p in d.rglob("*.tmp")], list(d.rglob("*.tmp"))
        counted("adversarial interrupts")


# -- a hostile source/ ----------------------------------------------------------------------------


@pytest.mark.skipif(not NVCC, reason="needs the CUDA toolkit's nvcc")
@settings(FUZZ, max_examples=16)
@given(data=st.data())
def test_a_source_tree_reads_nothing_outside(tmp_path_factory, data):
    kind, hostile = data.draw(st.sampled_from(SOURCE_PLANTS), label="plant")
    where = data.draw(st.sampled_from(["common", "smooth", ".", "deep/er", ".hidden"]), label="where")
    root = tmp_path_factory.mktemp("adv-source")
    secret = root / "outside" / "secret.h"
    secret.parent.mkdir()
    secret.write_text(f"// {SOURCE_SECRET}\n")
    repro = root / "demo"
    shutil.copytree(DEMO, repro, ignore=shutil.ignore_patterns("variants"))
    planted = plant_source(repro, kind, where, secret)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):  # in this process: a start-up a case was ~60 % of it
        status = main(["recompile", str(repro)])
    said = out.getvalue() + err.getvalue()
    assert SOURCE_SECRET not in said and "Traceback" not in said, said
    if hostile:
        assert status == 3, said
        assert str(planted) in said or "smooth.cu:1:" in said or "smooth.cu:2:" in said, said  # named
        assert not list((repro / "variants").glob("*.cubin"))
    else:
        assert status == 0, said
    counted("adversarial source trees: refused" if hostile else "adversarial source trees: built")


# -- readers beside writers ----------------------------------------------------------------------


def test_readers_beside_writers_never_see_damage(tmp_path):
    """A process storing and hydrating one reproducer over and over while this one runs
    info --verify, list --verify and pack of it in three threads."""
    ws = tmp_path / "ws"
    repro = synthetic_reproducer(ws / "reproducers" / "r", [os.urandom(16 << 10) for _ in range(48)],
                                 chunk_size=16 << 10)
    writer = subprocess.Popen([sys.executable, "-c", (
        "import sys\nfrom kerncap import api\n"
        "for _ in range(12):\n    api.store(sys.argv[1], sys.argv[2])\n    api.hydrate(sys.argv[1])\n"),
        str(repro), str(ws / "store")], env=env(), stderr=subprocess.PIPE, text=True)
    problems: list[str] = []
    counts = {"info": 0, "list": 0, "pack": 0}

    def reader(kind: str) -> None:
        while writer.poll() is None:
            try:
                if kind == "info":
                    p = api.info(repro, verify=True)["payloads"]
                    if not p["ok"]:
                        problems.append(p["summary"])
                elif kind == "list":
                    for r in api.list_reproducers(ws, verify=True):
                        if r["error"] or r["payloads"] != "ok":
                            problems.append(f"{r['error']} {r['payloads']}")
                else:
                    api.pack(repro, tmp_path / f"p{threading.get_ident()}.kcap", force=True)
                counts[kind] += 1
            except KerncapError as exc:
                problems.append(f"{kind}: {exc.message}")
            except Exception as exc:  # noqa: BLE001 - a reader must never die of what a writer does
                problems.append(f"{kind}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=reader, args=(k,)) for k in counts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert writer.wait() == 0, writer.stderr.read()
    assert not problems, problems[:5]
    assert all(counts.values()), counts
    counted("adversarial readers beside writers", sum(counts.values()))
