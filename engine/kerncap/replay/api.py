"""One-shot helpers: start a replay server, run one request, stop it."""

from __future__ import annotations

from pathlib import Path

from kerncap.replay.client import ReplayClient
from kerncap.replay.results import ReplayResult, ValidationResult


def replay(capture_dir: str | Path, cubin: str | Path | None = None, iterations: int = 20, warmup: int = 3,
           flush_l2: bool = False, *, device: int = 0) -> ReplayResult:
    with ReplayClient(capture_dir, device=device) as rc:
        return rc.replay(cubin=cubin, iterations=iterations, warmup=warmup, flush_l2=flush_l2)


def validate(capture_dir: str | Path, cubin: str | Path | None = None, atol: float | None = None,
             rtol: float | None = None, dtype: str | None = None, dtypes: dict[int, str] | None = None, *,
             device: int = 0) -> ValidationResult:
    with ReplayClient(capture_dir, device=device) as rc:
        return rc.validate(cubin=cubin, atol=atol, rtol=rtol, dtype=dtype, dtypes=dtypes)
