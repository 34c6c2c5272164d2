"""Run a piece of a test as an unprivileged user. Permission checks do not apply to
root, so a test of "permission denied" run as root would pass without checking
anything: as root, the function runs in a forked child that has dropped to `nobody`
(it keeps every imported module, so no interpreter has to be reachable by nobody)."""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import tempfile
from pathlib import Path

NOBODY = 65534


def shared_tmp() -> Path:
    """A directory nobody can reach (pytest's tmp_path is private to its user)."""
    path = Path(tempfile.mkdtemp(prefix="kerncap-unpriv-", dir="/tmp"))
    path.chmod(0o755)
    return path


_preloaded = False


def _preload_kerncap() -> None:
    """Import every kerncap module here, once, before a child drops to nobody: the engine
    imports lazily (kerncap.api, the CLI's commands), and nobody may not be able to read
    the installed files (a clone under a 0700 directory, as bench/ci_time.py makes). Two
    tests failed so whenever no earlier test of their worker had imported the module."""
    global _preloaded
    if _preloaded:
        return
    import importlib
    import pkgutil

    import kerncap

    for m in pkgutil.walk_packages(kerncap.__path__, "kerncap."):
        if not m.name.endswith("__main__") and not m.name.startswith("kerncap.pyhooks"):
            importlib.import_module(m.name)
    _preloaded = True


def run_unprivileged(fn, *args):
    """fn(*args) as a non-root user; its result, or the exception it raised (re-raised
    here as RuntimeError(type name, str) when it cannot be pickled). Every kerncap module
    is imported first; import anything else fn needs before calling this: the child may
    not be able to read the interpreter's files."""
    if os.geteuid() != 0:
        return fn(*args)
    _preload_kerncap()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop privileges, run, report, leave without pytest's teardown
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                payload = ("ok", fn(*args))
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                payload = ("raised", exc)
            try:
                data = pickle.dumps(payload)
            except Exception:
                data = pickle.dumps(("raised", RuntimeError(f"{type(payload[1]).__name__}: {payload[1]}")))
            with os.fdopen(w, "wb") as f:
                f.write(data)
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    kind, value = pickle.loads(data)
    if kind == "raised":
        raise value
    return value


def cli_unprivileged(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`kerncap ARGV` in this process's code, as a non-root user: (status, stdout, stderr)."""
    def run():
        from kerncap.cli import main

        saved = dict(os.environ)
        os.environ.update(env or {})
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = main(argv)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        return rc, out.getvalue(), err.getvalue()
    return run_unprivileged(run)
