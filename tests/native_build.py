"""What the CPU tests compile (the C++ unit tests under AddressSanitizer, the cubins they
read), built on every core and cached by content (issue 44: these builds were 238 s of
a CPU run's setup, one g++ process compiling a dozen sources in a row, again every run).

Each source becomes its own object, compiled in parallel, kept under the cache
directory at a key made of everything the object depends on: the compiler (its path and
`--version`), the flags, the source's bytes and the bytes of every header in the
source's directory and in the -I directories inside this repository (headers outside it,
the toolkit's, by name, size and modification time). An executable's key is its
objects' keys and the link flags; a cubin's is nvcc's version, its arguments and the
source. A run that changed nothing compiles nothing; an edit rebuilds what it can touch.

The cache: $KERNCAP_TEST_CACHE, else $XDG_CACHE_HOME/kerncap-tests, else
~/.cache/kerncap-tests. KERNCAP_TEST_CACHE=off compiles everything again into a
temporary directory (a cold run, as a fresh machine sees it). Entries unused for 14 days
are removed.

`start(name, fn)` runs `fn()` once per process in a background thread: conftest starts
the builds of the selected test files when collection ends, so they compile beside the
first tests instead of in front of one; the fixture's `result(name, fn)` waits for it.
An exception in `fn` (pytest.skip, a failed build) is raised by `result`.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The environment as this process began. Builds run in background threads while a test may
# have changed os.environ (test_adversarial puts planted `g++`s first on PATH, and such a
# build once ran one): tools are looked up and run with this copy, never the live one.
ENV = dict(os.environ)
# One compiler process per core, whichever build asked for it.
_SLOTS = threading.BoundedSemaphore(os.cpu_count() or 1)
HEADER_SUFFIXES = {".h", ".hpp", ".cuh", ".inc"}
MAX_AGE_S = 14 * 24 * 3600


def cache_dir() -> Path:
    setting = os.environ.get("KERNCAP_TEST_CACHE", "")
    if setting.lower() == "off":
        return _scratch_cache()
    if setting:
        root = Path(setting)
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kerncap-tests"
    root.mkdir(parents=True, exist_ok=True)
    _prune_once(root)
    return root


@functools.lru_cache(maxsize=None)
def _scratch_cache() -> Path:
    root = Path(tempfile.mkdtemp(prefix="kerncap-tests-cache-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


@functools.lru_cache(maxsize=None)
def _prune_once(root: Path) -> None:
    cutoff = time.time() - MAX_AGE_S
    for entry in root.glob("*/*"):
        try:
            if entry.stat().st_mtime < cutoff:
                entry.unlink()
        except OSError:
            pass


def which(name: str) -> str | None:
    """`name` on the PATH this process began with."""
    return shutil.which(name, path=ENV.get("PATH", os.defpath))


def compiler() -> str | None:
    """The C++ compiler: $CXX or g++, as the process began."""
    return which(ENV.get("CXX", "g++"))


def env(**extra: str) -> dict[str, str]:
    """The environment this process began with, and `extra`: for what a build runs."""
    return {**ENV, **extra}


@functools.lru_cache(maxsize=None)
def tool_id(tool: str) -> str:
    """The path and what `--version` says: another compiler is another key."""
    p = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False, env=ENV)
    return f"{Path(tool).resolve()}\n{p.stdout}"


def _headers_digest(directory: Path, h) -> None:
    inside = directory.resolve().is_relative_to(ROOT)
    try:
        names = sorted(p for p in directory.iterdir() if p.suffix in HEADER_SUFFIXES and p.is_file())
    except OSError:
        return
    for p in names:
        h.update(p.name.encode() + b"\0")
        if inside:
            h.update(p.read_bytes())
        else:
            st = p.stat()
            h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
        h.update(b"\0")


def _include_dirs(flags: list[str]) -> list[Path]:
    return [Path(f[2:]) for f in flags if f.startswith("-I") and len(f) > 2]


def _key(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0\1")
    return h.hexdigest()[:32]


def _publish(tmp: Path, final: Path) -> Path:
    os.replace(tmp, final)  # whole or not at all: other pytest processes share the cache
    return final


def _touch(path: Path) -> Path:
    try:
        os.utime(path)
    except OSError:
        pass
    return path


@contextlib.contextmanager
def _building(final: Path):
    """Held while `final` is looked up and built: of the processes that want it at once
    (pytest-xdist's workers each start the same PREBUILDs), one compiles and the others
    wait and then find it in the cache instead of compiling it again."""
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.with_name(f".{final.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _tmp_beside(final: Path) -> Path:
    return final.with_name(f".{final.name}.{os.getpid()}.{threading.get_ident()}.tmp")


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    with _SLOTS:
        return subprocess.run(cmd, capture_output=True, text=True, check=False, env=ENV)


def _object(cxx: str, flags: list[str], source: Path) -> Path:
    h = hashlib.sha256()
    for d in dict.fromkeys([source.parent, *_include_dirs(flags)]):
        _headers_digest(d, h)
    key = _key(tool_id(cxx), "\n".join(flags), str(source), source.read_bytes(), h.hexdigest())
    final = cache_dir() / "obj" / f"{source.stem}-{key}.o"
    with _building(final):
        if final.exists():
            return _touch(final)
        tmp = _tmp_beside(final)
        p = _run([cxx, *flags, "-c", str(source), "-o", str(tmp)])
        if p.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise AssertionError(f"building the unit test failed ({source.name}):\n{p.stderr[-4000:]}")
        return _publish(tmp, final)


def executable(name: str, cxx: str, flags: list[str], sources: list[Path], link_flags: list[str] = ()) -> Path:
    """`cxx flags sources -o name`, each source compiled on its own core and every object
    and the executable cached; returns the cached executable (run it, do not write it)."""
    with ThreadPoolExecutor(max_workers=max(1, min(len(sources), os.cpu_count() or 1))) as pool:
        objects = list(pool.map(lambda s: _object(cxx, flags, Path(s)), sources))
    compile_only = [f for f in flags if not f.startswith(("-I", "-W", "-D"))]
    key = _key(tool_id(cxx), "\n".join(compile_only), "\n".join(link_flags), *(o.name for o in objects))
    final = cache_dir() / "bin" / f"{name}-{key}"
    with _building(final):
        if final.exists():
            return _touch(final)
        tmp = _tmp_beside(final)
        p = _run([cxx, *compile_only, *map(str, objects), *link_flags, "-o", str(tmp)])
        if p.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise AssertionError(f"linking the unit test {name} failed:\n{p.stderr[-4000:]}")
        return _publish(tmp, final)


def cubin(nvcc: str, args: list[str], source: Path) -> Path:
    """`nvcc -cubin args source`, cached; returns the cached cubin (read it, do not write it)."""
    key = _key(tool_id(nvcc), "\n".join(args), source.read_bytes())
    final = cache_dir() / "cubin" / f"{source.stem}-{key}.cubin"
    with _building(final):
        if final.exists():
            return _touch(final)
        tmp = _tmp_beside(final)
        p = _run([nvcc, "-cubin", *args, "-o", str(tmp), str(source)])
        if p.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise AssertionError(f"nvcc failed:\n{p.stderr}")
        return _publish(tmp, final)


def tree_digest(root: Path) -> str:
    """Every file's path under `root` and bytes: a key part for what is built from them."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def tree(name: str, key: str, build) -> Path:
    """A directory `build(path)` fills, cached under `key`. It is built where it stays (what
    it holds may name its own path: a CMake build tree does), by the first process to ask;
    a `.done` file beside it says it is whole. Read it, do not write it."""
    final = cache_dir() / "tree" / f"{name}-{key}"
    done = final.with_name(final.name + ".done")
    with _building(done):
        if done.exists():
            _touch(done)
            return final
        shutil.rmtree(final, ignore_errors=True)  # a build that was cut short
        final.mkdir(parents=True)
        try:
            build(final)
        except BaseException:
            shutil.rmtree(final, ignore_errors=True)
            raise
        done.touch()
        return final


_started: dict[str, Future] = {}
_started_lock = threading.Lock()
_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="native-build")


def start(name: str, fn) -> Future:
    """fn() in the background, once per process under this name."""
    with _started_lock:
        if name not in _started:
            _started[name] = _pool.submit(fn)
        return _started[name]


def result(name: str, fn):
    """What fn() returned (started now unless conftest started it); its exception if it raised."""
    return start(name, fn).result()
