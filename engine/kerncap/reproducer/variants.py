"""A reproducer's variants/: the cubins `kerncap recompile` builds (CUDA C++ and Triton
alike) and what one build reports."""

from __future__ import annotations

import errno
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kerncap.core.confined import real_dir

VARIANTS = "variants"


@dataclass
class RecompileResult:
    cubin: Path          # the new variant, under <reproducer>/variants/
    seconds: float       # compile time
    command: list[str]   # what was run (for Triton, a description of the in-process compile)
    log: str             # the compiler's output
    # CUDA: "reduced" (only what the kernel needs) | "full" | "nvcc" (nvcc as one step); Triton: "triton"
    mode: str = "full"
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase, in order
    notes: list[str] = field(default_factory=list)  # e.g. why the reduced compile was not used
    summary: str = ""  # what the reduced compile left out
    variant: Path | None = None  # a sequence kernel's rebuild: the sequence variant (variants/<name>.json) using it

    def phase_line(self) -> str:
        return ", ".join(f"{name} {s:.2f} s" for name, s in self.phases.items())

    @property
    def target(self) -> Path:
        """What a replay of this build names with --cubin."""
        return self.variant or self.cubin

    def to_dict(self) -> dict[str, Any]:
        """`kerncap recompile --json`, MCP's `recompile`."""
        return {"cubin": str(self.cubin), "seconds": round(self.seconds, 3), "command": self.command,
                "log": self.log, "mode": self.mode, "phases": self.phases, "notes": self.notes,
                "summary": self.summary, "variant": None if self.variant is None else str(self.variant)}

    def text(self, verbose: bool = False) -> str:
        """What `kerncap recompile` prints: the command always (the user sees what ran), the
        compiler's output when it said something (or `verbose`), the notes, the cubin."""
        lines = ["$ " + shlex.join(self.command)]
        if verbose or self.log.strip():
            lines.append(self.log.rstrip())
        lines += self.notes
        if verbose and self.summary:
            lines.append(self.summary)
        if verbose and self.phases:
            lines.append("time: " + self.phase_line() + ("" if "link" in self.phases or self.mode == "triton"
                                                         else " (no link step: ptxas writes the cubin)"))
        lines.append(f"{self.cubin}  ({self.seconds:.2f} s)")
        if self.variant is not None:
            lines.append(f"sequence variant {self.variant}")
        return "\n".join(lines)


def variants_dir(reproducer: str | os.PathLike, rel: str | os.PathLike = VARIANTS) -> Path:
    """`<reproducer>/variants` (or `rel` below the reproducer), made if missing, after
    checking that it is a real directory: a link there (in a reproducer from someone
    else) would send every cubin and tool output kerncap writes out of the reproducer."""
    return real_dir(reproducer, rel, create=True)


def next_variant(variants: Path) -> int:
    """The number of the next numbered variant (<n>.cubin) in `variants`."""
    numbers = [int(p.stem) for p in variants.glob("*.cubin") if p.stem.isdigit()]
    return max(numbers, default=0) + 1


def publish_variant(tmp: Path, variants: Path) -> Path:
    """Give the finished cubin `tmp` the next free number in `variants`, atomically: two
    recompiles at once get two numbers, and no reader ever sees a part of a cubin."""
    while True:
        final = variants / f"{next_variant(variants)}.cubin"
        try:
            os.link(tmp, final)  # fails when another process took the number meanwhile
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EXDEV, errno.EMLINK, errno.EOPNOTSUPP, errno.ENOTSUP):
                raise
            try:  # no hard links here: claim the name, then replace it whole
                os.close(os.open(final, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            except FileExistsError:
                continue
            os.replace(tmp, final)
            return final
        tmp.unlink()
        return final
