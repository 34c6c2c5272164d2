"""The stored timings `kerncap check --baseline FILE` compares against, written by
`--write-baseline FILE`: per case (reproducer key and variant label) the median and min
of the replay, on which GPU, with which kerncap.

    {"format": "kerncap-check-baseline", "format_version": 1, "created": "...",
     "cases": {"axpy#baseline": {"median_ms": 0.0123, "min_ms": 0.0119, "gpu": "NVIDIA H200",
                                 "iterations": 50, "kerncap": "0.1.0"}, ...}}
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kerncap.errors import KerncapError, UsageError
from kerncap.fleet.files import write_atomic

FORMAT = "kerncap-check-baseline"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class BaselineEntry:
    median_ms: float
    min_ms: float | None
    gpu: str | None


def load(path: str | os.PathLike) -> dict[str, BaselineEntry]:
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"baseline {path} does not exist", f"create it with `kerncap check ... --write-baseline {path}`")
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"format is {data.get('format')!r}, not {FORMAT!r}")
        if data.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"format_version {data.get('format_version')!r} (this kerncap reads {FORMAT_VERSION})")
        out = {}
        for key, e in data["cases"].items():
            median = e["median_ms"]
            if not isinstance(median, (int, float)) or median <= 0:
                raise ValueError(f"case {key}: median_ms {median!r} is not a positive number")
            out[str(key)] = BaselineEntry(float(median), e.get("min_ms"), e.get("gpu"))
        return out
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise KerncapError(f"baseline {path} is unreadable ({type(exc).__name__}: {exc})",
                           "write a new one with --write-baseline") from None


def save(path: str | os.PathLike, cases: dict[str, dict[str, Any]]) -> Path:
    """Write `cases` (key -> median_ms, min_ms, gpu, iterations, kerncap) atomically."""
    record = {"format": FORMAT, "format_version": FORMAT_VERSION,
              "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cases": cases}
    return write_atomic(path, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode(), "the baseline",
                        "--write-baseline")
