"""The editable sources a recompile builds from, reached by reproducer: its source/, or for
a sequence one kernel's entry, kernels/<k>/source/ (MCP's list/read/write_source, the
workbench). Nothing outside that directory is read or written (kerncap.reproducer.editable)."""

from __future__ import annotations

import os
from pathlib import Path

from kerncap.errors import UsageError
from kerncap.recompile import sequence_kernel
from kerncap.reproducer import editable
from kerncap.reproducer.editable import SourceFile
from kerncap.reproducer.format import Capture
from kerncap.reproducer.sequence import is_sequence


def sources_of(reproducer: str | os.PathLike, kernel: str | None) -> Path:
    """Whose source/ a source call reaches: the reproducer's, or for a sequence its kernel
    `kernel`'s entry (kernels/<k>/; None: the only one with sources)."""
    root = Path(reproducer)
    if kernel is None and not is_sequence(root):
        return root
    cap = Capture.open(root)
    if cap.sequence is None:
        raise UsageError(f"{root} is one dispatch, not a sequence: its sources are {root / 'source'}",
                         "leave out the kernel")
    entry = sequence_kernel.entry_dir(cap.reproducer_dir, sequence_kernel.choose(cap, kernel))
    if not entry.resolve().is_relative_to(cap.reproducer_dir.resolve()):  # kernels/ a link out of the reproducer
        raise UsageError(f"{entry} leads outside {cap.reproducer_dir} (a symbolic link?)",
                         "replace the link by the directory itself, or unpack the reproducer again")
    return entry


def list_sources(reproducer: str | os.PathLike, kernel: str | None = None) -> list[SourceFile]:
    """The files under `<reproducer>/source/` that `recompile` builds from, each with its
    size and whether it is editable (kerncap's build records are listed, not editable).
    A sequence's: those of `kernel`'s entry, `kernels/<k>/source/` (its number or a part of
    its name; None: the only kernel with sources)."""
    return editable.list_sources(sources_of(reproducer, kernel))


def read_source(reproducer: str | os.PathLike, name: str, kernel: str | None = None) -> str:
    """The text of one source file (`name` relative to source/, or to a sequence kernel's
    `kernels/<k>/source/` as for list_sources; nothing outside it)."""
    return editable.read_source(sources_of(reproducer, kernel), name)


def write_source(reproducer: str | os.PathLike, name: str, text: str, kernel: str | None = None) -> SourceFile:
    """Replace or create one source file atomically (`name` relative to source/, or to a
    sequence kernel's `kernels/<k>/source/`); the next `recompile` (`build --kernel K` for
    a sequence) builds from it."""
    return editable.write_source(sources_of(reproducer, kernel), name, text)
