"""What a recompile lets the compiler read from a reproducer someone else made
(docs/sources.md, "What a recompile reads").

The compile command's flags are reviewed by kerncap.recompile.trust; this module reviews
the files. A reproducer copied by hand, by git or by tar can hold anything under
`source/` (or a fusion's directory), and the compiler prints what it reads in its error
messages. So before anything runs:

* `check_tree`: every entry below the directory is a regular file or a directory, or a
  symbolic link to one inside the reproducer. A link out of it (`evil.h ->
  /etc/shadow`), a FIFO (the compiler would wait on it for ever), a device or a socket
  is refused by name, whether or not a source includes it.
* `include_problems`: every `#include` (also `#include_next`, `#import`, `#embed`, the
  `%:` digraph, comments and line splices between the words) of the sources names a
  file the compiler may read: an absolute path, or a relative one climbing out with
  `..`, must lie inside the reproducer, the local CUDA toolkit or the system's include
  directories (`trust.ReadPlaces`), as a recorded `-include` must; a computed include
  (`#include MACRO`) cannot be checked and is refused too. `--trust` lets these pass
  for `recompile` (the user read the source); a fusion has no `--trust`.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from kerncap.errors import KerncapError
from kerncap.recompile.trust import SYSTEM_INCLUDE_DIRS, ReadPlaces

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe), not a regular file: the compiler would wait on it for ever"),
          (stat.S_ISCHR, "a character device, not a regular file"), (stat.S_ISBLK, "a block device, not a regular file"),
          (stat.S_ISSOCK, "a socket, not a regular file"))
MAX_SCANNED_BYTES = 64 << 20  # a source file larger than this is not scanned for includes; refused instead


def _what(mode: int) -> str:
    return next((text for test, text in _KINDS if test(mode)), "not a regular file")


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_tree(directory: Path, reproducer: Path) -> list[Path]:
    """The regular files below `directory` (links resolved). Raises, naming the first
    entry that is a link out of `reproducer`, a link to a directory outside `directory`
    (whose files would not be checked), a FIFO, a device or a socket."""
    top = os.path.realpath(directory)
    root = os.path.realpath(reproducer)
    hint = ("a reproducer's sources are regular files inside it: replace the entry by a copy of the file you mean "
            "(cp --remove-destination), or remove it")
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(directory):  # links to directories are not followed
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            try:
                st = os.lstat(path)
            except FileNotFoundError:  # gone since it was listed (an editor saving)
                continue
            if stat.S_ISLNK(st.st_mode):
                real = os.path.realpath(path)
                if not _within(real, root):
                    raise KerncapError(f"{path} is a symbolic link to {real}, outside the reproducer {reproducer}: "
                                       "kerncap does not let the compiler read it", hint)
                try:
                    st = os.stat(path)
                except OSError:
                    continue  # a dangling link inside the reproducer reads nothing
                if stat.S_ISDIR(st.st_mode):
                    if not _within(real, top):
                        raise KerncapError(f"{path} is a symbolic link to the directory {real}, outside {directory}",
                                           hint)
                    continue  # its files are checked where they lie, below `directory`
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                raise KerncapError(f"{path} is {_what(st.st_mode)}", hint)
            files.append(path)
    return files


# A preprocessing directive that reads a file: `#` or `%:`, then the word, then its operand.
_DIRECTIVE = re.compile(rb"^[ \t\f\v]*(?:#|%:)[ \t\f\v]*(include_next|include|import|embed)\b[ \t\f\v]*(.*)$", re.M)
_COMMENT = re.compile(rb"/\*.*?\*/|//[^\n]*", re.S)


def _directives(data: bytes) -> list[tuple[int, str, str]]:
    """(line, directive, operand) of every include-like directive in `data`."""
    joined = data.replace(b"\\\r\n", b"").replace(b"\\\n", b"")  # line splices first, as the preprocessor does
    if b"/*" in joined or b"//" in joined:  # comments become a space (newlines kept: line numbers stay right)
        joined = _COMMENT.sub(lambda m: b" " + b"\n" * m.group(0).count(b"\n"), joined)
    out = []
    for m in _DIRECTIVE.finditer(joined):
        line = joined.count(b"\n", 0, m.start()) + 1
        out.append((line, m.group(1).decode(), m.group(2).strip().decode("utf-8", "surrogateescape")))
    return out


def _operand(text: str) -> str | None:
    """The path of `"path"` or `<path>`, else None (a computed include)."""
    if len(text) >= 2 and ((text[0] == '"' and '"' in text[1:]) or (text[0] == "<" and ">" in text[1:])):
        return text[1:text.index('"' if text[0] == '"' else ">", 1)]
    return None


def include_problems(files: list[Path], places: ReadPlaces, bases: list[Path] = ()) -> list[str]:
    """Why each include of `files` may make the compiler read outside `places`: an
    absolute path outside them, a relative path with `..` that leads outside them from
    the includer's directory, from a directory of `bases` (the include search path) or
    from a system include directory, or a computed include; [] when none does."""
    search = [*bases, *(Path(d) for d in SYSTEM_INCLUDE_DIRS)]
    problems = []
    for path in files:
        try:
            if path.stat().st_size > MAX_SCANNED_BYTES:
                problems.append(f"{path}: larger than {MAX_SCANNED_BYTES >> 20} MiB, not checked for #include")
                continue
            data = path.read_bytes()
        except OSError:
            continue  # gone or unreadable: the compiler cannot read it either
        for line, word, text in _directives(data):
            where = f"{path}:{line}: #{word} {text}"
            name = _operand(text)
            if name is None:
                problems.append(f"{where}: a computed #{word} (a macro) names a file kerncap cannot check")
                continue
            if "\x00" in name or not name:
                continue
            if os.path.isabs(name):
                candidates = [name]
            elif ".." in Path(name).parts:
                local = path.parent / name
                if text[0] == '"' and os.path.lexists(local):
                    candidates = [str(local)]  # the first place a quoted include is looked for
                else:
                    candidates = [str(d / name) for d in (path.parent, *search)]
                    normal = os.path.normpath(name)
                    if normal.startswith("../"):  # from a directory deep enough, it climbs to /
                        candidates.append("/" + normal.lstrip("./"))
            else:
                continue  # found inside a search directory: no way out of it but through a link (check_tree)
            for candidate in candidates:
                real = places.outside(os.path.normpath(candidate))
                if real is not None:
                    problems.append(f"{where}: includes the file {real}, outside the reproducer, the CUDA toolkit "
                                    "and the system's include directories (the compiler would read it)")
                    break
    return problems
