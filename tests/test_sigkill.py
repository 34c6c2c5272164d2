"""SIGKILL of kerncap at random points of the commands that run without a GPU (unpack,
extract with a fake app that publishes a real capture, prune --no-validate, store):
nothing complete-looking is left, the next command succeeds and names what the killed
one left behind, and following its advice leaves a clean directory. The GPU variant
for extract and validate is tests/gpu/test_sigkill_gpu.py."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import tempfile
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kerncap import api
from kerncap.core import fsio
from kerncap.errors import KerncapError
from kerncap.reproducer.format import Capture

ROOT = Path(__file__).resolve().parent.parent
AXPY = ROOT / "tests" / "fixtures" / "captures" / "axpy_small"
DEMO = ROOT / "kerncap_tui" / "demo" / "reproducer"
RNG = random.Random(17)

APP = textwrap.dedent(
    r'''
    import os, shutil, sys
    out = os.environ["KERNCAP_OUT"]
    partial = os.path.join(out, "capture.partial-%d" % os.getpid())
    shutil.copytree(sys.argv[1], partial)
    os.rename(partial, os.path.join(out, "capture"))
    '''
)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "engine"), os.environ.get("PYTHONPATH", "")])}


def kill_after(argv: list[str], when, extra_env: dict[str, str] | None = None) -> int:
    """Run kerncap ARGV and SIGKILL it: after `when` seconds, or (a callable) as soon as
    when() is true — e.g. once its staging directory appeared, to land mid-way for sure."""
    proc = subprocess.Popen([sys.executable, "-m", "kerncap", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**env(), **(extra_env or {})})
    if callable(when):
        deadline = time.monotonic() + 30
        while proc.poll() is None and not when() and time.monotonic() < deadline:
            time.sleep(0.001)
    else:
        time.sleep(when)
    proc.send_signal(signal.SIGKILL)
    return proc.wait()


def appeared(directory: Path, pattern: str, min_files: int = 1):
    def check() -> bool:
        try:
            return any(sum(1 for _ in d.rglob("*")) >= min_files for d in directory.glob(pattern))
        except FileNotFoundError:  # renamed while we walked it (capture.partial-* -> capture)
            return False
    return check


def run(argv: list[str], extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kerncap", *argv], capture_output=True, text=True,
                          env={**env(), **(extra_env or {})}, timeout=120)


def complete_or_absent(path: Path) -> None:
    """The target of a killed command: absent, or a whole reproducer."""
    if path.exists():
        Capture.open(path).verify()


def follow_advice(text: str, directory: Path) -> None:
    """Remove what the next command said to remove."""
    for left in fsio.find_leftovers(directory):
        assert str(left.path) in text, f"{left.path} was left behind and not named:\n{text}"
        fsio.remove_quietly(left.path)


def test_sigkill_during_unpack(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(DEMO, src)
    for i in range(400):  # a reproducer with many files: unpacking it takes a while
        (src / "source" / f"extra{i}.h").write_text(f"// {i}\n" * 50)
    packed = api.pack(src, tmp_path / "demo.kcap").path
    for trial in range(6):
        out = tmp_path / f"u{trial}"
        when = appeared(tmp_path, f"u{trial}.partial-*", RNG.randrange(1, 300)) if trial % 2 else RNG.uniform(0.1, 0.4)
        kill_after(["unpack", str(packed), "-o", str(out)], when)
        complete_or_absent(out)
        if out.exists():
            continue
        again = run(["unpack", str(packed), "-o", str(out)])
        assert again.returncode == 0, again.stderr
        follow_advice(again.stderr, tmp_path)
        Capture.open(out).verify()
    assert not [p for p in tmp_path.iterdir() if fsio.is_leftover_name(p.name)]


def test_sigkill_during_extract(tmp_path):
    app = tmp_path / "app.py"
    app.write_text(APP)
    lib = tmp_path / "libkerncap_inject.so"
    lib.write_bytes(b"")
    extra = {"KERNCAP_INJECT_LIB": str(lib)}
    argv = ["extract", "add", "--", sys.executable, str(app), str(DEMO / "capture")]
    for trial in range(6):
        out = tmp_path / f"e{trial}"
        when = appeared(tmp_path, f"e{trial}.run-*/*", 1) if trial % 2 else RNG.uniform(0.1, 0.6)
        kill_after(argv[:2] + ["-o", str(out)] + argv[2:], when, extra)
        time.sleep(0.3)  # the orphaned app finishes (it lives in its own session)
        complete_or_absent(out)
        if out.exists():
            continue
        again = run(argv[:2] + ["-o", str(out)] + argv[2:], extra)
        assert again.returncode == 0, again.stderr
        follow_advice(again.stderr, tmp_path)
        Capture.open(out).verify()
    assert not [p for p in tmp_path.iterdir() if fsio.is_leftover_name(p.name)]


def test_sigkill_during_prune(tmp_path):
    for trial in range(4):
        repro = tmp_path / f"p{trial}"
        shutil.copytree(AXPY, repro)
        out = tmp_path / f"p{trial}-pruned"
        when = appeared(tmp_path, f"p{trial}-pruned.partial-*") if trial % 2 else RNG.uniform(0.1, 0.4)
        kill_after(["prune", str(repro), "--no-validate"], when)
        Capture.open(repro).verify()  # the original is never touched without validation
        complete_or_absent(out)
        if out.exists():
            continue
        again = run(["prune", str(repro), "--no-validate"])
        assert again.returncode == 0, again.stderr
        follow_advice(again.stdout + again.stderr, tmp_path)
    assert not [p for p in tmp_path.iterdir() if fsio.is_leftover_name(p.name)]


def test_sigkill_during_store(tmp_path):
    store = tmp_path / "store"
    for trial in range(4):
        repro = tmp_path / f"s{trial}"
        shutil.copytree(DEMO, repro)
        kill_after(["store", str(repro), "--store", str(store)], RNG.uniform(0.1, 0.4))
        Capture.open(repro).verify()  # from its blobs, or from the store once the marker exists
        again = run(["store", str(repro), "--store", str(store)])
        assert again.returncode == 0, again.stderr
        Capture.open(repro).verify()


def test_a_killed_prune_swap_names_the_full_reproducer(tmp_path):
    """A prune killed between its two renames (where there is no atomic exchange) leaves
    the full reproducer as <dir>.full-<pid>: `list` says to rename it back."""
    ws = tmp_path / "ws" / "reproducers"
    shutil.copytree(AXPY, ws / "a")
    dead = 999_999  # no such process (pid_max is 4194304 at most; this one is not running here)
    os.rename(ws / "a", ws / f"a.full-{dead}")
    shutil.copytree(AXPY, ws / f"a.prune-{dead}")
    rows = api.list_reproducers(ws.parent)
    advice = {Path(r["path"]).name: r["error"] for r in rows if r.get("leftover")}
    assert f"rename this back to {ws / 'a'}" in advice[f"a.full-{dead}"]
    assert "staged pruned copy: remove it" in advice[f"a.prune-{dead}"]
    assert not [r for r in rows if not r.get("leftover")]  # neither looks like a reproducer


def test_leftovers_of_a_live_process_are_not_reported(tmp_path):
    (tmp_path / f"x.partial-{os.getpid()}").mkdir()
    sleeper = subprocess.Popen(["sleep", "5"])
    try:
        (tmp_path / f"x.partial-{sleeper.pid}").mkdir()
        assert fsio.find_leftovers(tmp_path) == []
    finally:
        sleeper.kill()
        sleeper.wait()
    assert [left.pid for left in fsio.find_leftovers(tmp_path)] == [sleeper.pid]


def test_unpack_names_a_leftover_of_a_dead_process(tmp_path):
    packed = api.pack(AXPY, tmp_path / "a.kcap").path
    (tmp_path / "a.partial-999999").mkdir()
    result = api.unpack(packed)
    assert result.notes == [f"{tmp_path / 'a.partial-999999'}: an interrupted unpack or prune left a partial copy: "
                            "remove it"]
    with pytest.raises(KerncapError, match="exists and is not empty"):
        api.unpack(packed)


# -- issue 47: SIGTERM, and what a killed or failed compile leaves -----------------------------------

NVCC = shutil.which("nvcc") or (os.path.isfile("/usr/local/cuda/bin/nvcc") and "/usr/local/cuda/bin/nvcc")
needs_nvcc = pytest.mark.skipif(not NVCC, reason="needs the CUDA toolkit's nvcc")


def demo_copy(tmp_path: Path) -> Path:
    repro = tmp_path / "demo"
    shutil.copytree(DEMO, repro, ignore=shutil.ignore_patterns("variants"))
    return repro


def private_tmp(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """TMPDIR for the commands of one test, and kerncap's scratch directory below it."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return {"TMPDIR": str(tmp)}, tmp / f"kerncap-{os.getuid()}"


def signal_when(argv: list[str], sig: int, when, extra_env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([sys.executable, "-m", "kerncap", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**env(), **extra_env})
    deadline = time.monotonic() + 60
    while proc.poll() is None and not when() and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@needs_nvcc
def test_sigterm_during_recompile_is_one_line_143_and_leaves_nothing(tmp_path):
    """Issue 47: SIGTERM was handled by no command (143 with no message) and left
    variants/.variant.cubin.*.tmp and $TMPDIR/kerncap-build-* (the preprocessed source)."""
    repro = demo_copy(tmp_path)
    extra, scratch = private_tmp(tmp_path)
    done = signal_when(["recompile", str(repro), "--full"], signal.SIGTERM,
                       lambda: scratch.is_dir() and any(scratch.iterdir()), extra)
    assert done.returncode == 143, (done.returncode, done.stderr)
    assert done.stderr == f"kerncap recompile: terminated (SIGTERM)\n", done.stderr
    assert list((repro / "variants").iterdir()) == [] and list(scratch.iterdir()) == []
    assert sorted(os.listdir(tmp_path / "tmp")) == [scratch.name]  # nothing of nvcc's or cicc's beside it


def test_sigterm_during_unpack_is_one_line_143_and_leaves_no_partial_copy(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(DEMO, src)
    for i in range(400):
        (src / "source" / f"extra{i}.h").write_text(f"// {i}\n" * 50)
    packed = api.pack(src, tmp_path / "demo.kcap").path
    out = tmp_path / "u"
    extra, _ = private_tmp(tmp_path)
    done = signal_when(["unpack", str(packed), "-o", str(out)], signal.SIGTERM,
                       appeared(tmp_path, "u.partial-*", 50), extra)
    assert done.returncode == 143 and done.stderr == "kerncap unpack: terminated (SIGTERM)\n", done.stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if fsio.is_leftover_name(p.name)]


@needs_nvcc
def test_the_next_command_removes_and_names_what_a_killed_recompile_left(tmp_path):
    """A SIGKILL cannot be handled: the next run of any command removes the compile's
    scratch directory and says so; the next recompile does the same for variants/."""
    repro = demo_copy(tmp_path)
    extra, scratch = private_tmp(tmp_path)
    variants = repro / "variants"
    done = signal_when(["recompile", str(repro), "--full"], signal.SIGKILL,
                       lambda: scratch.is_dir() and any(scratch.iterdir()) and any(variants.iterdir()), extra)
    assert done.returncode == -signal.SIGKILL
    [left] = list(scratch.iterdir())
    [tmp] = list(variants.iterdir())
    info = run(["info", str(repro)], extra)
    assert info.returncode == 0 and f"kerncap: removed {left}, a scratch directory an interrupted kerncap" in info.stderr
    assert not left.exists() and tmp.exists()  # info writes nothing into the reproducer
    again = run(["recompile", str(repro)], extra)
    assert again.returncode == 0 and f"removed {tmp}, a temporary file an interrupted kerncap" in again.stdout
    assert sorted(p.name for p in variants.iterdir()) == ["1.cubin", "1.reach.json"] and list(scratch.iterdir()) == []


@needs_nvcc
def test_a_failed_compile_leaves_nothing_in_tmpdir(tmp_path):
    """Issue 47: a failed compile left 0-byte reduced-*.lgenfe.bc files (cicc's) in $TMPDIR."""
    repro = demo_copy(tmp_path)
    kernel = repro / "source" / "smooth" / "smooth_kernel.cuh"
    kernel.write_text(kernel.read_text().replace("{", "{ undeclared_thing;", 1))
    extra, scratch = private_tmp(tmp_path)
    for mode in ([], ["--full"]):
        done = run(["recompile", str(repro), *mode], extra)
        assert done.returncode == 3 and "undeclared_thing" in done.stderr, done.stderr
    assert sorted(os.listdir(tmp_path / "tmp")) == [scratch.name] and list(scratch.iterdir()) == []


def test_a_signal_just_after_the_scratch_mkdir_leaves_nothing(tmp_path, monkeypatch):
    """CI, 2026-12-04: SIGTERM landed after mkdtemp made the scratch directory and before
    the block that removes it began, and left `build-*.scratch-<pid>` behind. The name is
    now chosen first, so an interrupt raised right after mkdir still finds it."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    root = fsio.scratch_root()
    real_mkdir = os.mkdir

    def mkdir_then_interrupt(path, *args, **kwargs):
        real_mkdir(path, *args, **kwargs)
        if ".scratch-" in str(path):
            raise KeyboardInterrupt

    monkeypatch.setattr(os, "mkdir", mkdir_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        with fsio.scratch("build"):
            pass
    assert list(root.iterdir()) == []



@pytest.mark.parametrize("mode", [0o750, 0o705, 0o777, 0o1777])
def test_a_scratch_root_others_may_enter_is_refused_and_nothing_is_written_there(tmp_path, monkeypatch, mode):
    """`$TMPDIR/kerncap-<uid>` holds the compilers' temporary files (the preprocessed
    source among them): one that a group or others may read or enter, made beforehand by
    anyone, is refused with the way out, and no scratch directory is made in it. The
    private one (0700) is used. Mutation caught: only the owner and the kind checked."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    base = tmp_path / f"kerncap-{os.getuid()}"
    base.mkdir()
    base.chmod(mode)
    with pytest.raises(KerncapError, match="is not a private directory of yours") as err:
        with fsio.scratch("build"):
            pass
    assert "set TMPDIR to a directory of your own" in err.value.hint
    assert list(base.iterdir()) == []
    base.chmod(0o700)
    with fsio.scratch("build") as path:
        assert path.parent == base and path.is_dir()
    assert list(base.iterdir()) == []

@pytest.mark.parametrize("exc", ["KeyboardInterrupt", "Terminated"])
def test_a_signal_inside_an_import_callback_still_ends_the_command(exc):
    """CI, 2026-12-04: SIGTERM landed inside importlib's module-lock weakref callback (an
    import the engine makes on first use, during `hydrate`): the interpreter printed
    "Exception ignored in … Traceback" and the command went on. The CLI's unraisable hook
    sends the signal again, and it raises where it can. Here a weakref callback raises it."""
    code = textwrap.dedent(f"""
        import sys, weakref
        from kerncap import cli
        from kerncap.errors import Terminated
        cli.handle_sigterm()
        sys.unraisablehook = cli._signal_in_a_callback
        class O: pass
        def cb(_):
            raise {exc}()
        o = O(); r = weakref.ref(o, cb)
        try:
            del o
            for _ in range(10_000_000): pass  # the signal sent again lands here
            print("went on")
        except {exc}:
            print("ended")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), timeout=60)
    assert done.stdout == "ended\n" and "Traceback" not in done.stderr, (done.stdout, done.stderr)


@pytest.mark.parametrize("sig,status,words", [("SIGTERM", 143, "terminated (SIGTERM)"), ("SIGINT", 130, "interrupted")])
def test_a_signal_that_c_code_turned_into_another_error_still_ends_the_command(sig, status, words):
    """tests/test_adversarial.py's random interrupts, 2026-12-05: a SIGTERM inside numpy's
    first import (the engine imports it on first use, here in `prune`) came out as numpy's
    ImportError ("PyCapsule_Import could not import module datetime") and a traceback. An
    error that escapes a command after a signal arrived ends it as the signal would. Here
    a command's handler turns the signal's exception into an ImportError, as numpy's C code
    does; without a signal the same error is not hidden."""
    code = textwrap.dedent(f"""
        import os, signal, sys, time
        from kerncap import cli

        def handler(args):
            if os.environ.get("KC_SEND"):
                try:
                    os.kill(os.getpid(), signal.{sig})
                    time.sleep(5)
                except KeyboardInterrupt:
                    raise ImportError("PyCapsule_Import could not import module datetime") from None
            raise ImportError("no signal: a real error")

        real = cli.build_parser
        def parser(command):
            p = real(command)
            parse = p.parse_args
            def parse_args(argv):
                args = parse(argv)
                args.handler = handler
                return args
            p.parse_args = parse_args
            return p
        cli.build_parser = parser
        sys.exit(cli.main(["list"]))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**env(), "KC_SEND": "1"})
    assert done.returncode == status and words in done.stderr and "Traceback" not in done.stderr, done.stderr
    real = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env())
    assert real.returncode == 1 and "no signal: a real error" in real.stderr  # a traceback: not hidden
