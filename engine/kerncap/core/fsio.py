"""Writing files so that a fault says one thing: a read-only location, a full disk or a
permission error becomes one KerncapError naming the path, and the cleanup after it
never raises over it (a temp file that cannot be removed from a read-only directory
must not replace "read-only file system" with a traceback)."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kerncap.errors import KerncapError

_HINTS = {
    errno.EROFS: "the location is on a read-only file system: choose a writable one",
    errno.ENOSPC: "the disk is full: free space there, or choose another location",
    errno.EDQUOT: "the disk quota is exhausted: free space there, or choose another location",
    errno.EACCES: "you may not write there: check the permissions, or choose another location",
    errno.EPERM: "you may not write there: check the permissions, or choose another location",
}


def fs_error(exc: OSError, what: str, hint: str | None = None) -> KerncapError:
    """`cannot <what>: <strerror> (<path>)` with the hint for that errno."""
    where = f" ({exc.filename})" if exc.filename else ""
    return KerncapError(f"cannot {what}: {exc.strerror or exc}{where}",
                        hint or _HINTS.get(exc.errno or 0, "check the location's free space and permissions"))


def remove_quietly(path: Path) -> None:
    """Best-effort cleanup of a temp file or directory: never raises."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass


def temp_name(path: Path) -> Path:
    """A hidden sibling of `path`, unique to this writer (concurrent writers never share one)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def write_atomic(path: Path, data: bytes | str, *, what: str | None = None, fsync: bool = False) -> int:
    """Write `data` to a temp file next to `path` and rename it into place: readers see
    the old file or the new one, never a part. Returns the bytes written."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = temp_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(raw)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        remove_quietly(tmp)
        raise fs_error(exc, what or f"write {path}") from None
    except BaseException:  # Ctrl-C or a bug between open and rename: no temp file stays
        remove_quietly(tmp)
        raise
    return len(raw)


def make_dirs(path: Path, what: str | None = None) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fs_error(exc, what or f"create {path}") from None


# -- what an interrupted (SIGKILLed) kerncap leaves behind -----------------------------------

# Every multi-step write of kerncap goes through a sibling named <name>.<kind>-<pid> and
# ends with one rename; a kill in between leaves that sibling, never a complete-looking
# <name>. The next command that touches <name> names what to remove.
_LEFTOVER = re.compile(r"^(?P<base>.+)\.(?P<kind>run|partial|prune|full|scratch)-(?P<pid>\d+)$")
_HIDDEN_TEMP = re.compile(r"^\.(?P<base>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$")
_ADVICE = {
    "run": "an interrupted `kerncap extract` left its run directory (the raw capture): remove it",
    "partial": "an interrupted unpack or prune left a partial copy: remove it",
    "prune": "an interrupted `kerncap prune` left its staged pruned copy: remove it",
    "full": "an interrupted `kerncap prune` moved the full reproducer aside: if {base} is missing, rename this "
            "back to {base}; otherwise remove it",
    "tmp": "an interrupted write left a temporary file: remove it",
    "scratch": "an interrupted compile left its scratch directory (the compiler's temporary files): remove it",
}


@dataclass(frozen=True)
class Leftover:
    path: Path
    kind: str        # run | partial | prune | full | tmp | scratch
    pid: int

    def advice(self) -> str:
        return f"{self.path}: " + _ADVICE[self.kind].format(base=self.path.parent / self.base)

    def removed(self) -> str:
        """What to say once kerncap removed it itself."""
        what = "scratch directory" if self.kind == "scratch" else "temporary file"
        return f"removed {self.path}, a {what} an interrupted kerncap (pid {self.pid}) left"

    @property
    def base(self) -> str:
        m = _LEFTOVER.match(self.path.name) or _HIDDEN_TEMP.match(self.path.name)
        return m.group("base") if m else self.path.name


def is_leftover_name(name: str) -> bool:
    return bool(_LEFTOVER.match(name) or _HIDDEN_TEMP.match(name))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def find_leftovers(directory: Path, base: str | None = None) -> list[Leftover]:
    """Leftovers of processes that are gone, in `directory` (those of `base` only, if given)."""
    found = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    for name in names:
        m = _LEFTOVER.match(name)
        kind = m.group("kind") if m else "tmp"
        m = m or _HIDDEN_TEMP.match(name)
        if m is None or (base is not None and m.group("base") != base):
            continue
        pid = int(m.group("pid"))
        path = Path(directory) / name
        # Still there once its owner is known gone: listed just before the owner renamed it
        # into place and exited, it is no leftover.
        if pid != os.getpid() and not pid_alive(pid) and os.path.lexists(path):
            found.append(Leftover(path, kind, pid))
    return found


def remove_dead_temps(directory: Path) -> list[Leftover]:
    """Remove the hidden temp files (`temp_name`) that processes now gone left in
    `directory` (a store's object directory, capture/blobs, variants/): a killed `store`,
    `hydrate` or `recompile` leaves one, and the next run there cleans it up. What it
    removed (`Leftover.removed()` says so)."""
    removed = []
    for left in find_leftovers(directory):
        if left.kind == "tmp":
            try:
                os.unlink(left.path)  # a file: a link or directory of that name is not ours
                removed.append(left)
            except OSError:
                pass
    return removed


# -- scratch directories: where the compilers kerncap runs keep their temporary files ---------


def scratch_root() -> Path:
    """`$TMPDIR/kerncap-<uid>`: a directory of this user's only (mode 0700), made if
    missing. Every compile kerncap runs keeps its temporary files below it (the
    preprocessed source among them), and `clean_scratch` removes what a killed run left."""
    base = Path(tempfile.gettempdir()) / f"kerncap-{os.getuid()}"
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise fs_error(exc, f"create kerncap's scratch directory {base}",
                       "set TMPDIR to a writable directory of your own") from None
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise KerncapError(f"{base} is not a private directory of yours (a link, another user's, or open to others): "
                           "kerncap keeps its compilers' temporary files there",
                           "remove it, or set TMPDIR to a directory of your own")
    return base


@contextmanager
def scratch(kind: str) -> Iterator[Path]:
    """A new directory `<scratch_root>/<kind>-<random>.scratch-<pid>`, removed with all it
    holds when the block ends (also on Ctrl-C and SIGTERM); one that a SIGKILL left is
    removed by the next kerncap (`clean_scratch`)."""
    root = scratch_root()
    path = None
    try:
        while path is None:
            # The name is chosen before the directory exists, so a SIGTERM or Ctrl-C that
            # lands just after mkdir still finds it to remove (mkdtemp returning it late,
            # outside this try, left one behind under load).
            candidate = root / f"{kind}-{uuid.uuid4().hex[:12]}.scratch-{os.getpid()}"
            try:
                path = candidate
                os.mkdir(candidate, 0o700)
            except FileExistsError:
                path = None
        yield path
    finally:
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


def clean_scratch() -> list[Leftover]:
    """Remove the scratch directories (and stray files) of kerncap processes that are gone
    from `scratch_root`; what it removed. Never raises: a run must not fail over another's
    leftovers."""
    base = Path(tempfile.gettempdir()) / f"kerncap-{os.getuid()}"
    try:
        st = os.lstat(base)
    except OSError:
        return []  # none yet (made by the first compile)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return []  # not ours: scratch() names it when a compile needs it
    removed = []
    for left in find_leftovers(base):
        if left.kind in ("scratch", "tmp"):
            remove_quietly(left.path)
            if not os.path.lexists(left.path):
                removed.append(left)
    return removed


@contextmanager
def exclusive(directory: Path, doing: str) -> Iterator[None]:
    """Hold an exclusive lock on `directory` itself (flock on the directory: no lock
    file to leave behind); refuse at once, naming it, when another process holds it."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise fs_error(exc, f"open {directory}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise KerncapError(f"another kerncap process is {doing} {directory} right now",
                               "wait for it to finish, then run the command again") from None
        try:
            moved = os.fstat(fd).st_ino != os.stat(directory).st_ino
        except OSError:
            moved = True
        if moved:  # replaced while we waited for the lock (e.g. by a prune that finished)
            raise KerncapError(f"{directory} was replaced by another kerncap process", "run the command again")
        yield
    finally:
        os.close(fd)
