"""Address-space plan: which virtual ranges to reserve and which pages to map so that
every captured region sits at its original address (docs/replay.md, "Opening a capture";
measured on the H200: docs/facts.md §8).

The driver honours a requested address only for reservations of at least ~64 MB that
start on a 32 MB boundary. So regions are grouped into *spans* (regions whose 32 MB
neighbourhoods touch share one), each span starts 32 MB-aligned and is padded to at
least 64 MB; inside the spans only the granularity-aligned pages holding regions are
backed by physical memory.

Regions that map one physical allocation of the app at several addresses (a ring buffer
mapped twice, `cuMemCreate` once and `cuMemMap` twice: docs/replay.md, "Aliased
mappings") get one physical allocation mapped at each of them (`shared`): a write
through one address reads back through the others, as in the app.

Sparse regions (kerncap.replay.sparse: huge, mostly never-written zeros) are backed only
where data lives or the kernel writes (`maps`); the rest of their pages (`zero_maps`)
share one zero chunk. Host ranges the replay maps at their captured addresses
(kerncap.replay.host_memory) must stay outside every span: a span that would cover one
is padded downward instead of upward; a host range inside the neighbourhood of device
regions is restored in device memory at its address instead (`plan_with_host_ranges`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Protocol

MiB = 1 << 20
SPAN_ALIGN = 32 * MiB
SPAN_MIN = 64 * MiB


class HasRange(Protocol):
    id: int
    base: int
    size: int


@dataclass(frozen=True)
class Span:
    index: int
    base: int
    size: int
    regions: tuple[int, ...]  # ids of the regions inside

    @property
    def end(self) -> int:
        return self.base + self.size

    @property
    def label(self) -> str:
        """How errors name the span: "2 (regions 3, 4)"."""
        return grouped_label(self.index, "region", self.regions)


def grouped_label(index: int, kind: str, ids: tuple[int, ...]) -> str:
    """"2 (regions 3, 4)", "0 (host region 1)": a group of captured things in messages."""
    return f"{index} ({kind}{'s' if len(ids) != 1 else ''} {', '.join(str(i) for i in ids)})"


@dataclass(frozen=True)
class SharedMap:
    """One physical allocation of `size` bytes mapped at every address of `bases`: the
    captured regions `regions` (same order), which the app mapped from one allocation.
    The first region holds the memory's state (restored and compared); the others are
    its aliases."""

    size: int
    bases: tuple[int, ...]
    regions: tuple[int, ...]

    @property
    def note(self) -> str:
        others = ", ".join(str(r) for r in self.regions[1:])
        return (f"region{'s' if len(self.regions) > 2 else ''} {others} map{'' if len(self.regions) > 2 else 's'} the "
                f"physical allocation of region {self.regions[0]} (one allocation mapped at {len(self.regions)} "
                f"addresses in the app): replayed as one allocation, restored and compared as region "
                f"{self.regions[0]}")


def shared_maps(regions: Iterable, granularity: int) -> tuple[list[SharedMap], list[str]]:
    """The regions of `regions` that map one physical allocation at several addresses
    (Region.physical), as SharedMaps, and a note for each group the replay cannot map as
    one allocation (its regions then get memory of their own; the capture warned).

    A group is mapped as one allocation when every region covers the same extent of the
    allocation (cuMemMap maps a handle whole) at granularity-aligned addresses."""
    groups: dict[int, list] = {}
    for r in sorted(regions, key=lambda r: r.base):
        phys = getattr(r, "physical", None)
        if phys and r.size > 0:
            groups.setdefault(phys[0], []).append(r)
    out, notes = [], []
    for alloc, members in sorted(groups.items()):
        if len(members) < 2:
            continue
        ids = ", ".join(str(r.id) for r in members)
        if len({(r.physical[1], r.size) for r in members}) != 1:
            notes.append(f"regions {ids} map different parts of one physical allocation ({alloc}): each replays "
                         "in memory of its own, so a write through one is not seen through the others")
        elif any(r.base % granularity or r.size % granularity for r in members):
            notes.append(f"regions {ids} map one physical allocation ({alloc}) at addresses or sizes that are not "
                         f"multiples of this GPU's {granularity >> 20} MiB allocation granularity: each replays in "
                         "memory of its own, so a write through one is not seen through the others")
        else:
            out.append(SharedMap(members[0].size, tuple(r.base for r in members), tuple(r.id for r in members)))
    return out, notes


@dataclass(frozen=True)
class AddressPlan:
    granularity: int
    spans: list[Span] = field(default_factory=list)
    maps: list[tuple[int, int]] = field(default_factory=list)  # (base, size), page-aligned: own memory
    zero_maps: list[tuple[int, int]] = field(default_factory=list)  # page-aligned: the shared zero chunk
    # sparse region id -> (offset, length) of its parts backed by own memory (maps ∩ region)
    segments: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    shared: list[SharedMap] = field(default_factory=list)  # one allocation at several addresses

    @property
    def reserved_bytes(self) -> int:
        return sum(s.size for s in self.spans)

    @property
    def mapped_bytes(self) -> int:
        return sum(size for _, size in self.maps) + sum(m.size for m in self.shared)

    @property
    def aliases(self) -> set[int]:
        """Ids of the regions that are another region's memory mapped again (not restored
        or compared themselves)."""
        return {r for m in self.shared for r in m.regions[1:]}

    @property
    def zero_bytes(self) -> int:
        return sum(size for _, size in self.zero_maps)


class SpanConflict(ValueError):
    """A span cannot be placed without covering a host range the replay maps (`host`:
    that range's [lo, hi), when one is to blame)."""

    def __init__(self, message: str, host: tuple[int, int] | None = None):
        super().__init__(message)
        self.host = host


def align_down(v: int, a: int) -> int:
    return v - v % a


def align_up(v: int, a: int) -> int:
    return align_down(v + a - 1, a)


def _pad(base: int, end: int, align: int, minimum: int) -> tuple[int, int]:
    """[base, end) aligned outward to `align`, grown upward to at least `minimum` bytes."""
    base, end = align_down(base, align), align_up(end, align)
    return base, max(end, base + align_up(minimum, align))


def _place_span(lo: int, hi: int, align: int, avoid: list[tuple[int, int]]) -> tuple[int, int]:
    """[lo, hi) (aligned) padded to SPAN_MIN: upward, else partly or wholly downward (by
    whole `align` steps: the start must stay aligned) where upward padding would cover a
    host range of `avoid`. SpanConflict (naming the range) when none fits. The end stays
    aligned too: a reservation ending right at a host mapping inside its last 32 MiB was
    placed elsewhere by the H200's driver (JAX's pinned buffer behind its arena,
    docs/facts.md §31)."""
    def first_in(a: int, b: int) -> tuple[int, int] | None:
        return next(((h0, h1) for h0, h1 in avoid if h0 < b and a < h1), None)

    inside = first_in(lo, hi)
    if inside:
        raise SpanConflict(f"host range [{inside[0]:#x}, {inside[1]:#x}) lies inside [{lo:#x}, {hi:#x}), the "
                           "32 MiB-aligned neighbourhood of captured device regions", inside)
    minimum = align_up(SPAN_MIN, align)
    for below in range(0, minimum + align, align):  # 0: all padding above; minimum: all below
        a = lo - below
        if a < 0:
            break
        b = max(hi, a + minimum)
        if first_in(a, b) is None:
            return a, b
    blocker = first_in(lo - minimum, hi + minimum)
    raise SpanConflict(f"no {SPAN_MIN >> 20} MiB span around [{lo:#x}, {hi:#x}) avoids the host ranges near it",
                       blocker)


def plan_address_space(regions: Iterable[HasRange], granularity: int, *,
                       live: dict[int, list[tuple[int, int]]] | None = None,
                       avoid: Iterable[tuple[int, int]] = (), shared: Iterable[SharedMap] = ()) -> AddressPlan:
    """Spans to reserve and page ranges to map for `regions` (which must not overlap).

    `live`: for each sparse region id, the (offset, length) intervals that hold data or
    that the kernel writes; only those pages get memory of their own, the region's other
    pages go to `zero_maps`. `avoid`: (base, size) host ranges no span may cover.
    `shared`: regions mapped from one allocation (shared_maps); their pages are left out
    of `maps`."""
    if granularity <= 0 or granularity & (granularity - 1):
        raise ValueError(f"allocation granularity {granularity} is not a power of two")
    align = max(SPAN_ALIGN, granularity)
    ordered = sorted((r for r in regions if r.size > 0), key=lambda r: r.base)
    for a, b in zip(ordered, ordered[1:]):
        if a.base + a.size > b.base:
            raise ValueError(f"regions {a.id} and {b.id} overlap")

    # Groups of regions whose aligned neighbourhoods touch, then padded; padding can make
    # two groups overlap, so merge until stable.
    groups: list[list] = []  # [base, end, [ids]]
    for r in ordered:
        lo, hi = align_down(r.base, align), align_up(r.base + r.size, align)
        if groups and lo <= groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], hi)
            groups[-1][2].append(r.id)
        else:
            groups.append([lo, hi, [r.id]])
    avoid_ranges = sorted((b, b + n) for b, n in avoid if n > 0)
    padded: list[list] = []
    for lo, hi, ids in groups:
        lo, hi = _place_span(lo, hi, align, avoid_ranges) if avoid_ranges else _pad(lo, hi, align, SPAN_MIN)
        if padded and lo <= padded[-1][1]:
            padded[-1][1] = max(padded[-1][1], hi)
            padded[-1][2].extend(ids)
        else:
            padded.append([lo, hi, list(ids)])
    spans = [Span(i, lo, hi - lo, tuple(ids)) for i, (lo, hi, ids) in enumerate(padded)]

    shared = list(shared)
    in_shared = {r for m in shared for r in m.regions}
    live = {k: v for k, v in (live or {}).items() if k not in in_shared}  # an alias is backed whole
    intervals: list[tuple[int, int]] = []  # absolute [lo, hi) of bytes that need memory of their own
    for r in ordered:
        if r.id in in_shared:
            continue
        if r.id in live:
            intervals += [(r.base + off, r.base + off + n) for off, n in live[r.id] if n > 0]
        else:
            intervals.append((r.base, r.base + r.size))
    maps = _merge((align_down(lo, granularity), align_up(hi, granularity)) for lo, hi in sorted(intervals))
    zero: list[tuple[int, int]] = []
    segments: dict[int, list[tuple[int, int]]] = {}
    for r in ordered:
        if r.id not in live:
            continue
        cover = (align_down(r.base, granularity), align_up(r.base + r.size, granularity))
        zero += _subtract(cover, maps)
        segments[r.id] = [(max(lo, r.base) - r.base, min(hi, r.base + r.size) - max(lo, r.base))
                          for lo, hi in maps if lo < r.base + r.size and r.base < hi]
    zero_maps = _merge(sorted(zero))
    plan = AddressPlan(granularity, spans, [(lo, hi - lo) for lo, hi in maps], [(lo, hi - lo) for lo, hi in zero_maps],
                       segments, shared)
    alias_ranges = [(b, m.size) for m in shared for b in m.bases]
    for base, size in plan.maps + plan.zero_maps + alias_ranges:  # by construction; a failure here is a planner bug
        assert any(s.base <= base and base + size <= s.end for s in spans), "map range outside every span"
    for base, size in alias_ranges:  # shared_maps keeps only granularity-aligned aliases
        assert all(hi <= base or base + size <= lo for lo, hi in maps + zero_maps), "alias range mapped twice"
    return plan


def padding(maps: Iterable[tuple[int, int]], items: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """(base, size) of the mapped bytes no item covers: the padding of regions' pages. A
    program could keep state there between launches; the replay zeroes it before each."""
    taken = _merge(sorted((b, b + n) for b, n in items if n > 0))
    return [(lo, hi - lo) for base, size in maps for lo, hi in _subtract((base, base + size), taken)]


def _merge(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted [lo, hi) ranges merged where they touch or overlap."""
    out: list[list[int]] = []
    for lo, hi in ranges:
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def _subtract(cover: tuple[int, int], taken: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of [lo, hi) outside every range of `taken` (sorted, disjoint)."""
    lo, hi = cover
    out = []
    for t0, t1 in taken:
        if t1 <= lo or t0 >= hi:
            continue
        if t0 > lo:
            out.append((lo, t0))
        lo = max(lo, t1)
    if lo < hi:
        out.append((lo, hi))
    return out


@dataclass(frozen=True)
class DeviceBacked:
    """A host range restored in device memory at its device address, planned like a region."""

    index: int
    base: int
    size: int

    @property
    def id(self) -> str:
        return f"host range {self.index}"


def plan_with_host_ranges(regions: Iterable[HasRange], host: dict[int, tuple[int, int]], granularity: int, *,
                          live: dict[int, list[tuple[int, int]]] | None = None,
                          backed: Iterable[int] = (), shared: Iterable[SharedMap] = ()
                          ) -> tuple[AddressPlan, set[int]]:
    """The plan for `regions` with the host ranges `host` (index -> (device address,
    size)), and the indices of those that must be restored in device memory instead.

    With unified addressing the driver places pinned host allocations among device ones,
    so a host range can sit inside the 32 MiB neighbourhood of captured regions (a
    PyTorch graph's pinned page, JAX's buffer behind its arena), where no span can avoid
    it. Such a range gets device memory at its device address inside the span: the
    kernel reads and writes the same bytes at the same address, over HBM instead of the
    bus. The others stay host ranges the spans avoid. `backed`: indices already decided."""
    regions = list(regions)
    backed = set(backed)
    shared = list(shared)
    while True:
        extra = [DeviceBacked(i, base, size) for i, (base, size) in sorted(host.items()) if i in backed]
        avoid = [v for i, v in sorted(host.items()) if i not in backed]
        try:
            return plan_address_space(regions + extra, granularity, live=live, avoid=avoid, shared=shared), backed
        except SpanConflict as exc:
            blamed = [i for i, (base, size) in host.items()
                      if i not in backed and exc.host and base < exc.host[1] and exc.host[0] < base + size]
            if not blamed:
                raise
            backed.update(blamed)
