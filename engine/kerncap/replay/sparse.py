"""Which regions replay sparsely, and what of them needs memory of its own.

A JAX BFC arena preallocates 75 % of the GPU (104.9 GiB on an H200) and a vLLM-style KV
cache 90 % of what is free, while a dispatch reaches a few hundred MiB of data in them.
Restoring such a region whole needs its size twice (target and resident copy) and fails
on any GPU. The capture already says what is in it: a chunk listed as zero (`null`)
before and after the kernel held zeros and the kernel left it so. Those chunks need no
memory of their own: the replay maps one zero chunk at all of them (docs/replay.md,
"Sparse regions"), read-only, so that a write there faults instead of changing every
alias. Everything else — chunks with data, chunks the kernel wrote — gets its own pages
and resident copies as any region does.

A region replays sparsely when its never-written zero chunks add up to at least
`KERNCAP_SPARSE_MIN` bytes (default 1 GiB); `KERNCAP_SPARSE=0` turns it off (every
region whole, as before), `KERNCAP_SPARSE=1` makes every eligible region sparse.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

GiB = 1 << 30
MiB = 1 << 20
DEFAULT_MIN_BYTES = 1 * GiB
ZERO_CHUNK = 64 * MiB  # one physical chunk, mapped many times (DESIGN §4.14: 1,600 mappings for 100 GiB)


def min_bytes_from_env(environ: Mapping[str, str] = os.environ) -> int | None:
    """The threshold in bytes; None when sparse replay is turned off."""
    mode = environ.get("KERNCAP_SPARSE", "").strip()
    if mode == "0":
        return None
    if mode == "1":
        return 1
    raw = environ.get("KERNCAP_SPARSE_MIN", "").strip()
    try:
        return max(1, int(raw)) if raw else DEFAULT_MIN_BYTES
    except ValueError:
        return DEFAULT_MIN_BYTES


def live_intervals(pre: list, post: list, size: int, chunk_size: int) -> tuple[list[tuple[int, int]], int]:
    """(offset, length) runs of the chunks that hold data before or after the kernel, and
    the bytes of the others (zero before and after)."""
    runs: list[list[int]] = []
    dead = 0
    for i, (a, b) in enumerate(zip(pre, post)):
        off = i * chunk_size
        n = min(chunk_size, size - off)
        if a is None and b is None:
            dead += n
            continue
        if runs and runs[-1][0] + runs[-1][1] == off:
            runs[-1][1] += n
        else:
            runs.append([off, n])
    return [(o, n) for o, n in runs], dead


def sparse_regions(regions: Iterable, chunk_size: int, min_bytes: int | None) -> dict[int, list[tuple[int, int]]]:
    """Region id -> live intervals, for the regions that replay sparsely. A region whose
    base is not 8-byte aligned stays whole (segment offsets must suit every dtype)."""
    if min_bytes is None:
        return {}
    out = {}
    for r in regions:
        if r.size <= 0 or r.base % 8:
            continue
        intervals, dead = live_intervals(r.pre, r.post, r.size, chunk_size)
        if dead >= min_bytes:
            out[r.id] = intervals
    return out


def describe(segments: dict[int, list[tuple[int, int]]], sizes: dict[int, int]) -> list[str]:
    """One line per sparse region for logs and notes."""
    lines = []
    for rid, segs in sorted(segments.items()):
        backed = sum(n for _, n in segs)
        lines.append(f"region {rid}: {backed / MiB:.1f} MiB of {sizes[rid] / GiB:.1f} GiB backed "
                     f"({len(segs)} part(s)); the rest is never-written zeros on a shared read-only chunk")
    return lines
