"""The pointer closure of a capture: the regions its launches can reach.

The roots (kerncap.prune.roots) are what the launch names — the manifest's parameter
annotations (`pointer`, `pointers`), every 8-byte-aligned value of the raw parameter
buffer (a struct parameter may hold pointers the manifest did not annotate), the launch
attribute values, the pre-state of the module globals and host regions, the memory of
texture objects over linear or pitched memory (the kernel reads it through the object's
handle) — or, for a sequence, what every launch names plus every region a memory
operation of the window writes or reads. From there a worklist reads the pre-state of
every kept region (for a sequence its post-state too: a launch may store a pointer that
a later launch follows) and treats each 8-byte-aligned little-endian u64 as a candidate
pointer: a value in [base, base + size) of a captured region adds that region, and so
does its one-past-the-end value base + size unless another region begins there (then
the value is that region's base).

Regions that map one physical allocation (Region.physical: a ring buffer mapped twice)
are one memory: keeping one keeps every other, since a write through either address
changes both, and a dropped alias would read as "written, yet unreached".

Granularity is the whole allocation: one pointer into a caching allocator's segment
keeps the segment, and with it everything the segment points to. A value that merely
looks like a pointer keeps its region too; the closure errs towards keeping.

A region written (pre != post) that the closure does not reach means the launches found
memory through something the closure cannot see: such a capture must not be pruned
(`Closure.refusal`).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from kerncap.core.units import human_bytes
from kerncap.prune.roots import ALIASES, KINDS, POINTERS, STORED, STORED_SUFFIX, Named, Roots, dispatch_roots, sequence_roots
from kerncap.reproducer.format import Capture, Region

# Threads that read and scan chunks; each holds one chunk (4 MiB) at a time.
SCAN_WORKERS = min(8, os.cpu_count() or 1)


@dataclass
class Closure:
    kept: list[int]                      # region ids, ascending
    reasons: dict[int, str]              # region id -> why it is kept ("argument 1", "pointer at region 3+0x40")
    regions_full: int
    logical_full: int                    # sum of region sizes
    logical_pruned: int
    stored_full: int                     # bytes of the distinct non-null chunks the manifest names
    stored_pruned: int                   # the same for the kept regions and the globals
    unreached_written: list[Region] = field(default_factory=list)  # written, yet outside the closure
    seconds: float = 0.0
    kinds: dict[int, str] = field(default_factory=dict)  # region id -> kind of its reason (roots.KINDS)
    by_reason: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> {"regions", "logical"}
    roots: Roots = field(default_factory=Roots)

    @property
    def regions_pruned(self) -> int:
        return len(self.kept)

    @property
    def dropped(self) -> int:
        return self.regions_full - len(self.kept)

    @property
    def refusal(self) -> str:
        """Why a reproducer holding only this closure cannot be valid ("" when it can)."""
        if not self.unreached_written:
            return ""
        shown = ", ".join(f"{r.id} ({r.base:#x}, {human_bytes(r.size)})" for r in self.unreached_written[:5])
        more = f" and {len(self.unreached_written) - 5} more" if len(self.unreached_written) > 5 else ""
        which = "region" if len(self.unreached_written) == 1 else "regions"
        r = self.roots
        return (f"{r.subject} wrote {which} {shown}{more}, which no pointer in {r.sources} reaches: {r.writer} "
                "found that memory some other way, so only the full capture replays it")


def compute_closure(capture: Capture, roots: Roots | None = None) -> Closure:
    """The regions reachable from `roots` (default: the launch of `capture`, or every launch
    and memory operation of a sequence capture) by following pointers in memory."""
    t0 = time.perf_counter()
    cap = capture
    if roots is None:
        roots = sequence_roots(cap) if cap.sequence is not None else dispatch_roots(cap)
    finder = PointerFinder(cap.regions)
    reasons: dict[int, str] = {}
    kinds: dict[int, str] = {}
    frontier: list[Region] = []

    by_id = {r.id: i for i, r in enumerate(finder.regions)}
    aliases = _alias_groups(finder.regions)

    def keep(index: int, why: str, kind: str) -> None:
        region = finder.regions[index]
        if region.id not in reasons:
            reasons[region.id] = why
            kinds[region.id] = kind
            frontier.append(region)
            for other in aliases.get(region.id, ()):
                keep(by_id[other], f"maps the memory of region {region.id}", ALIASES)

    for root in roots.direct:
        if isinstance(root, Named):
            if root.region in by_id:
                keep(by_id[root.region], root.why, root.kind)
        else:
            for index, offset in finder.hits(root.data):
                keep(index, root.why(offset), root.kind)
    post = roots.post  # a sequence: post-states hold the pointers its launches stored
    cache: dict[str, list[tuple[int, int]]] = {}  # blob -> hits (region index, offset in chunk)
    with ThreadPoolExecutor(SCAN_WORKERS, thread_name_prefix="kerncap-closure") as pool:
        _scan(cap, finder, [(chunks, item.size) for item in roots.items for chunks in item.states], cache, pool)
        for item in roots.items:
            for n, chunks in enumerate(item.states):
                for index, offset in _item_hits(cap, chunks, cache):
                    keep(index, f"{item.prefix}+{offset:#x}" + (STORED_SUFFIX if n else ""), item.kind)
        while frontier:  # breadth first: a region's reason names the shortest path to it
            level, frontier = frontier, []
            scanned = [(s, r.size) for r in level for s in _region_states(r, post)]
            _scan(cap, finder, scanned, cache, pool)
            for region in level:
                for n, chunks in enumerate(_region_states(region, post)):
                    for index, offset in _item_hits(cap, chunks, cache):
                        keep(index, f"pointer at region {region.id}+{offset:#x}" + (STORED_SUFFIX if n else ""),
                             STORED if n else POINTERS)

    kept = sorted(reasons)
    kept_set = set(kept)
    kept_regions = [r for r in cap.regions if r.id in kept_set]
    by_reason: dict[str, dict[str, int]] = {}
    for r in kept_regions:
        tally = by_reason.setdefault(kinds[r.id], {"regions": 0, "logical": 0})
        tally["regions"] += 1
        tally["logical"] += r.size
    return Closure(
        kept=kept,
        reasons=reasons,
        regions_full=len(cap.regions),
        logical_full=sum(r.size for r in cap.regions),
        logical_pruned=sum(r.size for r in kept_regions),
        stored_full=stored_bytes(cap, cap.regions),
        stored_pruned=stored_bytes(cap, kept_regions),
        # pre != post, whatever the manifest's flag says: a dropped region is never compared
        unreached_written=[r for r in cap.regions if (r.written or r.pre != r.post) and r.id not in kept_set],
        seconds=time.perf_counter() - t0,
        kinds=kinds,
        by_reason={k: by_reason[k] for k in KINDS if k in by_reason},
        roots=roots,
    )


def _alias_groups(regions: list[Region]) -> dict[int, list[int]]:
    """region id -> the ids of the other regions mapping the same physical allocation."""
    by_alloc: dict[int, list[int]] = {}
    for r in regions:
        if getattr(r, "physical", None) is not None:
            by_alloc.setdefault(r.physical[0], []).append(r.id)
    return {i: [j for j in ids if j != i] for ids in by_alloc.values() if len(ids) > 1 for i in ids}


def _region_states(region: Region, post: bool) -> list[list[str | None]]:
    """The chunk lists of `region` to scan: its pre-state, and its post-state when asked
    and different (an unwritten region's post-state is its pre-state)."""
    out = [region.pre]
    if post and region.post != region.pre:
        out.append(region.post)
    return out


def stored_bytes(cap: Capture, regions: Iterable[Region]) -> int:
    """Bytes of the distinct non-null chunks of `regions`, of every global, every CUDA
    array (arrays are never dropped: objects reach them, not pointers), every host region
    and a sequence's host-to-device payloads."""
    sizes: dict[str, int] = {}
    for item in [*regions, *kept_items(cap)]:
        for chunks in (item.pre, item.post):
            for i, h in enumerate(chunks):
                if h is not None:
                    sizes[h] = cap.chunk_length(item.size, i)
    return sum(sizes.values())


def kept_items(cap: Capture) -> list:
    """The stored items a pruned reproducer always keeps: every module global, captured CUDA
    array, snapshotted host region and sequence payload (host-to-device copies' bytes)."""
    seq = cap.sequence.payload_items if cap.sequence is not None else []
    return [*cap.globals, *(a for a in cap.arrays if a.captured), *cap.snapshotted_host_regions, *seq]


def _scan(cap: Capture, finder: "PointerFinder", items: list[tuple[list[str | None], int]],
          cache: dict[str, list[tuple[int, int]]], pool: ThreadPoolExecutor) -> None:
    """Read and scan every blob of `items` (pre-state chunks, item size) not scanned yet.
    Zero chunks hold no pointers; a blob is read once however often it repeats."""
    todo: dict[str, int] = {}
    for chunks, size in items:
        for i, h in enumerate(chunks):
            if h is not None and h not in cache:
                todo.setdefault(h, cap.chunk_length(size, i))

    def scan(batch: list[tuple[str, int]]) -> list[list[tuple[int, int]]]:
        return [finder.hits(cap.read_chunk(h, length)) for h, length in batch]  # read_chunk verifies

    batches = list(_batches(todo.items()))
    for batch, found in zip(batches, pool.map(scan, batches)):
        for (h, _), hits in zip(batch, found):
            cache[h] = hits


def _batches(items: Iterable[tuple[str, int]], max_bytes: int = 8 << 20, max_items: int = 256):
    """Groups of chunks of about max_bytes: a task per small chunk would cost more in
    thread hand-offs than the scan (captures can hold 10^5 small regions)."""
    batch: list[tuple[str, int]] = []
    size = 0
    for h, length in items:
        batch.append((h, length))
        size += length
        if size >= max_bytes or len(batch) >= max_items:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _item_hits(cap: Capture, chunks: list[str | None],
               cache: dict[str, list[tuple[int, int]]]) -> list[tuple[int, int]]:
    """(region index, byte offset in the item) of its scanned chunks, each region once at
    its first offset, in offset order."""
    found: dict[int, int] = {}
    for i, h in enumerate(chunks):
        if h is not None:
            for index, offset in cache[h]:
                found.setdefault(index, i * cap.chunk_size + offset)
    return list(found.items())


class PointerFinder:
    """Which captured regions the u64 values of a byte string point into (or one past)."""

    def __init__(self, regions: list[Region]):
        self.regions = sorted(regions, key=lambda r: (r.base, r.end))
        self.bases = np.array([r.base for r in self.regions], dtype=np.uint64)
        self.ends = np.array([r.end for r in self.regions], dtype=np.uint64)
        self.low = int(self.bases.min()) if self.regions else 0
        self.high = int(self.ends.max()) if self.regions else -1

    def hits(self, data: bytes) -> list[tuple[int, int]]:
        """(region index, byte offset of the first value pointing into it), by offset."""
        n = len(data) // 8
        if n == 0 or self.high < 0:
            return []
        values = np.frombuffer(data, dtype="<u8", count=n)
        where = np.flatnonzero((values >= np.uint64(self.low)) & (values <= np.uint64(self.high)))
        if where.size == 0:
            return []
        cand = values[where]
        # Regions do not overlap and are sorted: the last region starting at or below v
        # holds v if v < its end. Else v may be that region's one-past-the-end pointer
        # (v == end), which keeps it; where the next region begins at v, v is that
        # region's base instead and keeps only it (a caching allocator packs small
        # allocations back to back: counting both would keep every neighbour).
        below = np.searchsorted(self.bases, cand, side="right") - 1  # >= 0: cand >= low
        hit = cand <= self.ends[below]
        index = below[hit]
        offset = where[hit] * 8
        if index.size == 0:
            return []
        order = np.lexsort((offset, index))  # by region, then offset
        regions, first = np.unique(index[order], return_index=True)
        found = sorted(zip(offset[order][first].tolist(), regions.tolist()))
        return [(int(r), int(o)) for o, r in found]
