"""Address-space planner (docs/replay.md, "Opening a capture"): spans >= 64 MiB, 32 MiB-aligned, covering
every region; mapped page ranges granularity-aligned, merged, inside the spans."""

from dataclasses import dataclass

import pytest
from kerncap.replay.plan import SPAN_ALIGN, SPAN_MIN, plan_address_space

MiB = 1 << 20
GiB = 1 << 30
PAGE = 2 * MiB


@dataclass
class R:
    id: int
    base: int
    size: int


def check_invariants(regions, plan):
    for s in plan.spans:
        assert s.base % SPAN_ALIGN == 0 and s.size % SPAN_ALIGN == 0 and s.size >= SPAN_MIN
    for a, b in zip(plan.spans, plan.spans[1:]):
        assert a.end <= b.base, "spans overlap"
    for r in regions:
        holders = [s for s in plan.spans if s.base <= r.base and r.base + r.size <= s.end]
        assert len(holders) == 1 and r.id in holders[0].regions
        assert any(b <= r.base and r.base + r.size <= b + n for b, n in plan.maps), f"region {r.id} unmapped"
    for b, n in plan.maps:
        assert b % PAGE == 0 and n % PAGE == 0 and n > 0
        assert any(s.base <= b and b + n <= s.end for s in plan.spans)
    for (b1, n1), (b2, _) in zip(plan.maps, plan.maps[1:]):
        assert b1 + n1 < b2, "map ranges should be merged when they touch"


def test_pytorch_like_segments():
    # The caching allocator: a few 2 MiB and 20 MiB segments close together, one large block.
    base = 0x7F3A_0000_0000 + 6 * MiB
    regions = [
        R(0, base, 2 * MiB), R(1, base + 2 * MiB, 2 * MiB), R(2, base + 4 * MiB, 20 * MiB),
        R(3, base + 24 * MiB, 20 * MiB), R(4, base + 44 * MiB, 2 * MiB), R(5, base + 64 * MiB, 512 * MiB),
        R(6, base + 576 * MiB, 2 * MiB), R(7, base + 600 * MiB, 100 * MiB),
    ]
    plan = plan_address_space(regions, PAGE)
    check_invariants(regions, plan)
    assert len(plan.spans) == 1
    span = plan.spans[0]
    assert span.base == 0x7F3A_0000_0000 and span.regions == tuple(range(8))
    assert span.end >= base + 700 * MiB
    # adjacent pages merge into one mapping; gaps of whole pages stay unmapped
    assert plan.maps == [(base, 46 * MiB), (base + 64 * MiB, 514 * MiB), (base + 600 * MiB, 100 * MiB)]


def test_small_regions_share_a_page():
    base = 0x7F00_0000_0000 + 4 * MiB
    regions = [R(0, base, 512), R(1, base + 512, 512), R(2, base + 4096, 512)]
    plan = plan_address_space(regions, PAGE)
    check_invariants(regions, plan)
    assert plan.maps == [(base, PAGE)]
    assert [(s.base, s.size) for s in plan.spans] == [(0x7F00_0000_0000, SPAN_MIN)]


def test_regions_far_apart_get_separate_spans():
    a, b = 0x7F00_0000_0000, 0x7F00_0000_0000 + 3 * GiB + 10 * MiB
    regions = [R(0, a, 1 * MiB), R(1, b, 100 * MiB)]
    plan = plan_address_space(regions, PAGE)
    check_invariants(regions, plan)
    assert [s.regions for s in plan.spans] == [(0,), (1,)]
    assert plan.spans[1].base == b - 10 * MiB
    assert plan.spans[1].size == 128 * MiB  # [b-10M, b+90M) aligned up to 32 MiB multiples
    assert plan.maps == [(a, PAGE), (b, 100 * MiB)]


def test_padding_that_reaches_the_next_group_merges_spans():
    # Groups 40 MiB apart: the first one's 64 MiB padding runs into the second.
    a = 0x7E00_0000_0000
    regions = [R(0, a, MiB), R(1, a + 64 * MiB, MiB)]
    plan = plan_address_space(regions, PAGE)
    check_invariants(regions, plan)
    assert len(plan.spans) == 1 and plan.spans[0].regions == (0, 1)


def test_neighbourhoods_that_touch_merge():
    a = 0x7E00_0000_0000
    regions = [R(0, a + 30 * MiB, MiB), R(1, a + 33 * MiB, MiB)]  # [0,32) and [32,64) neighbourhoods touch
    plan = plan_address_space(regions, PAGE)
    check_invariants(regions, plan)
    assert len(plan.spans) == 1


def test_unaligned_region_spanning_a_boundary():
    a = 0x7E00_0000_0000 + 31 * MiB + 100
    regions = [R(0, a, 3 * MiB)]
    plan = plan_address_space(regions, PAGE)
    check_invariants(regions, plan)
    assert plan.maps == [(a - 100 - MiB, 6 * MiB)]  # pages [30, 36) MiB


def test_empty_and_zero_sized():
    assert plan_address_space([], PAGE).spans == []
    plan = plan_address_space([R(0, 0x7E00_0000_0000, 0)], PAGE)
    assert plan.spans == [] and plan.maps == []


def test_span_label_names_regions():
    plan = plan_address_space([R(3, 0x7E00_0000_0000, 4096), R(4, 0x7E00_0010_0000, 4096)], PAGE)
    assert plan.spans[0].label == "0 (regions 3, 4)"


def test_rejects_overlap_and_bad_granularity():
    with pytest.raises(ValueError, match="overlap"):
        plan_address_space([R(0, 0x1000_0000, 8192), R(1, 0x1000_1000, 8192)], PAGE)
    with pytest.raises(ValueError, match="power of two"):
        plan_address_space([R(0, 0x1000_0000, 8192)], 3 * MiB)


def test_larger_granularity_is_respected():
    g = 64 * MiB
    regions = [R(0, 0x7E00_0000_0000 + 70 * MiB, MiB)]
    plan = plan_address_space(regions, g)
    assert plan.maps == [(0x7E00_0000_0000 + 64 * MiB, g)]
    assert all(s.base % g == 0 and s.size % g == 0 for s in plan.spans)
