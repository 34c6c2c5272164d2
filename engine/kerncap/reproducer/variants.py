"""A reproducer's variants/: the cubins `kerncap recompile` builds (CUDA C++ and Triton
alike) and what one build reports."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kerncap.core.confined import real_dir
from kerncap.core.fsio import remove_quietly, write_atomic

VARIANTS = "variants"
# beside <n>.cubin: the module globals its kernel's code can reach, which `kerncap apply`
# copies into it before each launch (the others it cannot see: ptx_reach)
REACH = ".reach.json"
MAX_REACH_BYTES = 1 << 20


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


def reach_path(cubin: Path) -> Path:
    return cubin.with_name(cubin.stem + REACH)


def record_reach(cubin: Path, data: bytes, kernel: str, names: frozenset[str] | None) -> None:
    """Keep which module globals `kernel` of the cubin `data` (just published as `cubin`)
    can reach; nothing when that is not known. Losing it costs apply only its copies of
    every global, so a write that fails is no error."""
    path = reach_path(cubin)
    if names is None:
        remove_quietly(path)
        return
    doc = {"cubin_sha256": hashlib.sha256(data).hexdigest(), "kernel": kernel, "globals": sorted(names)}
    try:
        write_atomic(path, json.dumps(doc, indent=1) + "\n")
    except OSError:
        remove_quietly(path)


def read_reach(cubin: Path, kernel: str) -> frozenset[str] | None:
    """The module globals `kernel` of `cubin` can reach, as its build recorded them; None
    (every global is copied) when there is no record, or it is damaged, a link, or made
    for another cubin or kernel (a variant rebuilt or replaced since)."""
    try:
        fd = os.open(reach_path(cubin), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            raw = f.read(MAX_REACH_BYTES + 1)
        doc = json.loads(raw) if len(raw) <= MAX_REACH_BYTES else None
        sha = hashlib.sha256(cubin.read_bytes()).hexdigest()
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("cubin_sha256") != sha or doc.get("kernel") != kernel:
        return None
    names = doc.get("globals")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    return frozenset(names)
