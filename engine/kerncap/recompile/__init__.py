"""Kernel-only recompile of a reproducer's edited source into variants/: CUDA C++
through nvcc (`kerncap.recompile.cuda`), Triton and torch.compile kernels in-process
(`kerncap.triton`). `recompile(dir, config)` picks the path the reproducer needs."""

from __future__ import annotations

from pathlib import Path

from kerncap import triton
from kerncap.errors import UsageError
from kerncap.recompile import cuda
from kerncap.reproducer.record import sources_kind
from kerncap.reproducer.sequence import is_sequence
from kerncap.reproducer.variants import RecompileResult

__all__ = ["RecompileResult", "recompile", "sources_kind"]


def recompile(reproducer_dir: str | Path, config: str | None = None, *, trust: bool = False,
              mode: str = "auto", split: bool = False) -> RecompileResult:
    """Rebuild the kernel; `config` ("num_warps=4,...") applies to Triton reproducers only;
    `trust` lets a CUDA C++ build run recorded flags outside the allow-list; `mode` (CUDA):
    "auto" (only what the kernel needs, else the whole TU), "reduced" (no fallback), "full";
    `split` (CUDA): time cicc's front end and NVVM apart (`recompile --verbose`)."""
    if is_sequence(reproducer_dir):  # refused here, so the CLI and MCP say the same
        raise UsageError(f"{reproducer_dir} is a sequence: pick the kernel to rebuild",
                         "kerncap recompile DIR --kernel K (kerncap info DIR lists its kernels)")
    repro = Path(reproducer_dir).resolve()
    if sources_kind(repro) == "triton":
        if mode != "auto":
            raise UsageError("--full/--reduced apply to CUDA C++ reproducers", "a Triton kernel is compiled whole")
        return triton.recompile(repro) if config is None else triton.recompile(repro, config)
    if config is not None:
        raise UsageError(f"--config applies to Triton reproducers; {repro} holds CUDA C++ source",
                           "edit the source (e.g. __launch_bounds__) instead")
    return cuda.recompile(repro, trust=trust, mode=mode, split=split)

