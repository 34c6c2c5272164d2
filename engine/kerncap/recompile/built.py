"""Which cubin of a reproducer's variants/ was compiled from which source, across processes.

`kerncap build` compiles source/ into `variants/<n>.cubin`, then times and validates it;
when the replay cannot run (no GPU here), the next build of the same source reuses that
cubin instead of compiling another one (docs/cli.md). The workbench keeps that in memory
(`Session._built`); a command line run is a new process each time, so the record lives
on disk: one JSON file per reproducer in the user's cache
(`$XDG_CACHE_HOME/kerncap/builds/`, default `~/.cache/kerncap/builds/`), never inside the
reproducer, so a reproducer from someone else cannot claim that a cubin it ships was built
from its source. Before a reuse the record is checked against the cubin: a regular file
in variants/ (no link) with the size and SHA-256 recorded when it was compiled.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path

from kerncap.core.fsio import make_dirs, write_atomic
from kerncap.errors import KerncapError
from kerncap.reproducer.variants import VARIANTS, RecompileResult

MAX_ENTRIES = 32  # per reproducer: the latest builds
MAX_RECORD_BYTES = 4 << 20
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}\.cubin")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kerncap" / "builds"


def _record_path(reproducer: Path) -> Path:
    return cache_dir() / (hashlib.sha256(os.path.realpath(reproducer).encode()).hexdigest()[:32] + ".json")


def _entries(reproducer: Path) -> list[dict]:
    path = _record_path(reproducer)
    try:
        if path.stat().st_size > MAX_RECORD_BYTES:
            return []
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return []  # none yet, or damaged: a compile, not an error
    if not isinstance(doc, dict) or doc.get("reproducer") != os.path.realpath(reproducer):
        return []
    return [e for e in doc.get("entries", []) if isinstance(e, dict)]


def _digest(path: Path) -> tuple[int, str] | None:
    """(size, SHA-256) of a regular file `path` (not a link), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        h = hashlib.sha256()
        with os.fdopen(fd, "rb", closefd=False) as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return st.st_size, h.hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


def _key(fingerprint: str, mode: str, config: str | None) -> list:
    return [fingerprint, mode, config]


def remember(reproducer: str | os.PathLike, fingerprint: str, result: RecompileResult, *, mode: str = "auto",
             config: str | None = None) -> None:
    """Record that `result.cubin` was compiled from the source whose fingerprint is
    `fingerprint` (kerncap.reproducer.editable.source_fingerprint), with `mode` and
    `config`. Best effort: a cache that cannot be written costs a compile, never a build."""
    repro = Path(reproducer)
    cubin = Path(result.cubin)
    digest = _digest(cubin)
    if digest is None or cubin.parent.resolve() != (repro / VARIANTS).resolve() or not _NAME.fullmatch(cubin.name):
        return
    entry = {"key": _key(fingerprint, mode, config), "cubin": cubin.name, "size": digest[0], "sha256": digest[1],
             "seconds": result.seconds, "command": result.command, "log": result.log, "mode": result.mode,
             "phases": result.phases, "notes": result.notes, "summary": result.summary}
    kept = [e for e in _entries(repro) if e.get("key") != entry["key"] and (repro / VARIANTS / str(e.get("cubin"))).exists()]
    doc = {"format": "kerncap-builds", "reproducer": os.path.realpath(repro), "entries": [*kept, entry][-MAX_ENTRIES:]}
    try:
        make_dirs(cache_dir())
        write_atomic(_record_path(repro), json.dumps(doc, indent=1) + "\n")
    except KerncapError:
        pass


def recall(reproducer: str | os.PathLike, fingerprint: str, *, mode: str = "auto",
           config: str | None = None) -> RecompileResult | None:
    """The cubin compiled earlier from this very source (and mode and config), when the
    record says so and the cubin in variants/ is still the one compiled (size and
    SHA-256); else None."""
    repro = Path(reproducer)
    variants = repro / VARIANTS
    if variants.is_symlink() or not variants.is_dir():
        return None
    key = _key(fingerprint, mode, config)
    for e in reversed(_entries(repro)):
        name = e.get("cubin")
        if e.get("key") != key or not isinstance(name, str) or not _NAME.fullmatch(name):
            continue
        cubin = variants / name
        if _digest(cubin) != (e.get("size"), e.get("sha256")):
            continue
        try:
            return RecompileResult(cubin=cubin, seconds=float(e.get("seconds") or 0.0),
                                   command=[str(w) for w in e.get("command") or []], log=str(e.get("log") or ""),
                                   mode=str(e.get("mode") or "full"), phases=dict(e.get("phases") or {}),
                                   notes=[str(n) for n in e.get("notes") or []], summary=str(e.get("summary") or ""))
        except (TypeError, ValueError):
            continue
    return None
