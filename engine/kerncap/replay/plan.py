"""Address-space plan: which virtual ranges to reserve and which pages to map so that
every captured region sits at its original address (docs/replay.md, "Opening a capture";
measured on the H200: docs/facts.md §8).

The driver honours a requested address only for reservations of at least ~64 MB that
start on a 32 MB boundary. So regions are grouped into *spans* (regions whose 32 MB
neighbourhoods touch share one), each span starts 32 MB-aligned and is padded to at
least 64 MB; inside the spans only the granularity-aligned pages holding regions are
backed by physical memory.
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
        ids = ", ".join(str(r) for r in self.regions)
        return f"{self.index} (region{'s' if len(self.regions) != 1 else ''} {ids})"


@dataclass(frozen=True)
class AddressPlan:
    granularity: int
    spans: list[Span] = field(default_factory=list)
    maps: list[tuple[int, int]] = field(default_factory=list)  # (base, size), page-aligned

    @property
    def reserved_bytes(self) -> int:
        return sum(s.size for s in self.spans)

    @property
    def mapped_bytes(self) -> int:
        return sum(size for _, size in self.maps)


def align_down(v: int, a: int) -> int:
    return v - v % a


def align_up(v: int, a: int) -> int:
    return align_down(v + a - 1, a)


def _pad(base: int, end: int, align: int, minimum: int) -> tuple[int, int]:
    """[base, end) aligned outward to `align`, grown upward to at least `minimum` bytes."""
    base, end = align_down(base, align), align_up(end, align)
    return base, max(end, base + align_up(minimum, align))


def plan_address_space(regions: Iterable[HasRange], granularity: int) -> AddressPlan:
    """Spans to reserve and page ranges to map for `regions` (which must not overlap)."""
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
    padded: list[list] = []
    for lo, hi, ids in groups:
        lo, hi = _pad(lo, hi, align, SPAN_MIN)
        if padded and lo <= padded[-1][1]:
            padded[-1][1] = max(padded[-1][1], hi)
            padded[-1][2].extend(ids)
        else:
            padded.append([lo, hi, list(ids)])
    spans = [Span(i, lo, hi - lo, tuple(ids)) for i, (lo, hi, ids) in enumerate(padded)]

    maps: list[list[int]] = []
    for r in ordered:
        lo, hi = align_down(r.base, granularity), align_up(r.base + r.size, granularity)
        if maps and lo <= maps[-1][1]:
            maps[-1][1] = max(maps[-1][1], hi)
        else:
            maps.append([lo, hi])
    plan = AddressPlan(granularity, spans, [(lo, hi - lo) for lo, hi in maps])
    for base, size in plan.maps:  # by construction; a failure here is a planner bug
        assert any(s.base <= base and base + size <= s.end for s in spans), "map range outside every span"
    return plan
