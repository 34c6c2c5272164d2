"""A reproducer's variants/: the cubins `kerncap recompile` builds (CUDA C++ and Triton
alike) and what one build reports."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class RecompileResult:
    cubin: Path          # the new variant, under <reproducer>/variants/
    seconds: float       # compile time
    command: list[str]   # what was run (for Triton, a description of the in-process compile)
    log: str             # the compiler's output


def next_variant(variants: Path) -> int:
    """The number of the next numbered variant (<n>.cubin) in `variants`."""
    numbers = [int(p.stem) for p in variants.glob("*.cubin") if p.stem.isdigit()]
    return max(numbers, default=0) + 1
