"""Writing and deleting inside a directory tree that someone else made, without ever
passing through a symbolic link out of it.

A reproducer from a stranger may hold links where kerncap writes (`variants/`,
`capture/blobs/`, `source/`…): followed, they would redirect a recompile's cubin or a
store's deletes anywhere. Two tools:

* `real_dir(root, rel)` checks (and creates) each directory from `root` down to
  `root/rel`, refusing one that is a link or not a directory: for the writes kerncap
  makes into a reproducer it did not just create.
* `Tree` holds a directory open and reaches everything below it through directory file
  descriptors opened with O_NOFOLLOW, creating files with O_EXCL: nothing it writes can
  land outside, even if links appear while it works (unpack, hydrate). It makes plain
  files and directories only, with `safe_mode` permission bits.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from kerncap.core.fsio import fs_error, temp_name
from kerncap.errors import KerncapError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def safe_mode(mode: int, *, directory: bool = False) -> int:
    """Permission bits kerncap gives a file or directory it restores: the recorded ones
    without set-user-ID, set-group-ID, sticky and group/world-write bits, and always
    readable (and, for a directory, searchable) by its owner."""
    return (mode & 0o755) | (0o700 if directory else 0o400)


def link_error(path: Path, what: str = "write") -> KerncapError:
    try:
        target = f" (to {os.readlink(path)})" if os.path.islink(path) else " (not a directory)"
    except OSError:
        target = ""
    return KerncapError(f"{path} is a symbolic link{target}: kerncap does not {what} through it",
                        "a reproducer holds its files itself; replace the link by a directory "
                        "(e.g. a copy: cp -rL), or use another copy of the reproducer")


def real_dir(root: str | os.PathLike, rel: str | os.PathLike = ".", *, create: bool = False,
             what: str = "write") -> Path:
    """`root/rel`, after checking that no directory from `root` (itself excluded: the
    caller named it) down to it is a symbolic link or something other than a directory;
    missing ones are made when `create`."""
    root = Path(root)
    path = root
    for part in PurePosixPath(Path(rel).as_posix()).parts:
        if part in (".", ""):
            continue
        if part == "..":
            raise KerncapError(f"{root / rel} leaves {root}", "a reproducer's paths stay inside it")
        path = path / part
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if not create:
                return root / rel
            try:
                os.mkdir(path)
            except FileExistsError:
                pass
            except OSError as exc:
                raise fs_error(exc, f"create {path}") from None
            st = os.lstat(path)
        except OSError as exc:
            raise KerncapError(f"cannot look at {path} ({exc.strerror})", "check its permissions") from None
        if not stat.S_ISDIR(st.st_mode):
            raise link_error(path, what) if stat.S_ISLNK(st.st_mode) else \
                KerncapError(f"{path} is not a directory", "remove or rename it, then run the command again")
    return root / rel


class TreeError(Exception):
    """A path inside a Tree that is a link, not a directory, or already exists."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path}: {why}")
        self.path, self.why = path, why


class Tree:
    """A directory held open; every path below it is reached component by component
    through O_NOFOLLOW directory descriptors (a link anywhere is refused, never
    followed). Use as a context manager."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.fd = os.open(self.root, _DIR_FLAGS)
        self._dirs: dict[PurePosixPath, int] = {PurePosixPath("."): self.fd}
        # Temp files of `replace` creates not yet committed or discarded: a Ctrl-C between the
        # open and the caller's own clean-up (in `create` itself) must not leave one behind.
        self._temps: set[tuple[int, str]] = set()

    def __enter__(self) -> "Tree":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for parent, name in self._temps:
            try:
                os.unlink(name, dir_fd=parent)
            except OSError:
                pass
        self._temps.clear()
        for fd in self._dirs.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._dirs.clear()

    def dir_fd(self, rel: PurePosixPath | str, *, create: bool = False) -> int:
        """The descriptor of directory `rel` (made when `create`; `set_dir` gives it its mode)."""
        rel = PurePosixPath(rel)
        if rel in self._dirs:
            return self._dirs[rel]
        if rel.name in ("", ".", "..") or rel.is_absolute():
            raise TreeError(str(rel), "not a path inside the directory")
        parent = self.dir_fd(rel.parent, create=create)
        try:
            fd = os.open(rel.name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise
            try:
                os.mkdir(rel.name, 0o755, dir_fd=parent)
            except FileExistsError:
                pass
            fd = self._open_dir(rel, parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise TreeError(str(rel), "a symbolic link or not a directory") from None
            raise
        self._dirs[rel] = fd
        return fd

    def _open_dir(self, rel: PurePosixPath, parent: int) -> int:
        try:
            return os.open(rel.name, _DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise TreeError(str(rel), "a symbolic link or not a directory") from None
            raise

    def create(self, rel: PurePosixPath | str, *, mode: int = 0o644, replace: bool = False) -> BinaryIO:
        """A new plain file `rel` opened for writing (parents made). Without `replace`, a
        file already there is an error; with it the data goes to a hidden temp file that
        `commit` renames over the old one. Links are never followed."""
        rel = PurePosixPath(rel)
        parent = self.dir_fd(rel.parent, create=True)
        if replace:
            name = temp_name(Path(rel.name)).name
            self._temps.add((parent, name))  # before the file exists: no moment without a record
        else:
            name = rel.name
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         safe_mode(mode) | 0o200, dir_fd=parent)
        except FileExistsError:
            raise TreeError(str(rel), "already there (a file or directory of that name was made before it)") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise TreeError(str(rel), "a symbolic link") from None
            raise
        f = os.fdopen(fd, "wb")
        f.kerncap_name = (parent, name, rel.name)  # type: ignore[attr-defined]
        return f

    def commit(self, f: BinaryIO, *, mode: int | None = None, mtime: float | None = None) -> None:
        """Close a file from `create`, set its mode and time, and (for `replace`) rename it in."""
        parent, name, final = f.kerncap_name  # type: ignore[attr-defined]
        try:
            if mode is not None:
                os.fchmod(f.fileno(), safe_mode(mode))
            if mtime is not None:
                os.utime(f.fileno(), (mtime, mtime))
        finally:
            f.close()
        if name != final:
            os.rename(name, final, src_dir_fd=parent, dst_dir_fd=parent)
            self._temps.discard((parent, name))

    def discard(self, f: BinaryIO) -> None:
        """Close and remove a file from `create` that is not to be kept (never raises)."""
        parent, name, final = f.kerncap_name  # type: ignore[attr-defined]
        try:
            f.close()
            os.unlink(name, dir_fd=parent)
        except OSError:
            pass
        if name != final:
            self._temps.discard((parent, name))

    def set_dir(self, rel: PurePosixPath | str, *, mode: int, mtime: float | None = None) -> None:
        fd = self.dir_fd(rel)
        os.fchmod(fd, safe_mode(mode, directory=True))
        if mtime is not None:
            os.utime(fd, (mtime, mtime))
