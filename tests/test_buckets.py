"""Shape buckets (kerncap.reproducer.buckets): the interposer's bucket tables read, merged across
processes, written for people, and per-member speedups turned into the workload's."""

from __future__ import annotations

import math
import struct

import pytest

from kerncap.reproducer.buckets import Bucket, merge, scalar_text, time_shares, weighted_speedup
from kerncap.errors import KerncapError


def native(i, grid, n, launches, total, timed=None, **kw):
    return {"id": i, "kernel": "_Z8bk_scalePfPKfS1_fi", "grid": [grid, 1, 1], "block": [256, 1, 1],
            "shared_mem_bytes": 0, "scalars_known": True,
            "scalars": [{"index": 3, "size": 4, "hex": struct.pack("<f", 2.0).hex()},
                        {"index": 4, "size": 4, "hex": struct.pack("<i", n).hex()}],
            "launches": launches, "timed": launches if timed is None else timed, "total_ns": total, "min_ns": 10,
            "max_ns": 90, "first_dispatch": -1, "captured_dispatch": 3, "capture_dir": None, "refused": None, **kw}


def test_read_and_written_for_people():
    b = Bucket.from_native(native(0, 4096, 1 << 20, 24, 2400), "bk_scale(float*, float const*, float const*, float, int)")
    assert b.signature() == "grid 4096 block 256 smem 0 | #3=2 #4=1048576"
    assert b.first_dispatch is None and b.captured_dispatch == 3 and b.avg_ns == 100
    unknown = Bucket.from_native(dict(native(1, 8, 1, 1, 1), scalars_known=False, scalars=[]))
    assert "args unknown" in unknown.signature()
    with pytest.raises(KerncapError, match="malformed"):
        Bucket.from_native({"grid": [1]})


def test_scalar_text():
    assert scalar_text({"size": 4, "hex": struct.pack("<i", -7).hex()}) == "-7"
    assert scalar_text({"size": 4, "hex": struct.pack("<f", 0.125).hex()}) == "0.125"
    assert scalar_text({"size": 8, "hex": struct.pack("<d", 3.5).hex()}) == "3.5"
    assert scalar_text({"size": 8, "hex": struct.pack("<Q", 1 << 60).hex()}) == "0x1000000000000000"
    assert scalar_text({"size": 24, "hex": "xxh64:0123456789abcdef"}) == "<24-byte struct 01234567>"


def test_a_one_or_two_byte_scalar_reads_as_its_value():
    """A short, a char or a bool argument is a number in the bucket's signature, as an int
    is (the set's members are told apart by it), not its hex bytes."""
    assert scalar_text({"size": 2, "hex": struct.pack("<h", -3).hex()}) == "-3"
    assert scalar_text({"size": 2, "hex": struct.pack("<H", 512).hex()}) == "512"
    assert scalar_text({"size": 1, "hex": "01"}) == "1"
    b = Bucket.from_native(dict(native(0, 64, 1, 1, 10), scalars=[{"index": 2, "size": 2, "hex": struct.pack("<h", 7).hex()},
                                                                  {"index": 3, "size": 1, "hex": "00"}]))
    assert b.signature() == "grid 64 block 256 smem 0 | #2=7 #3=0"


def test_merge_across_processes_and_time_shares():
    a = [Bucket.from_native(native(0, 4096, 1 << 20, 24, 2400)), Bucket.from_native(native(1, 256, 1 << 16, 2, 40))]
    b = [Bucket.from_native(native(0, 256, 1 << 16, 2, 60))]
    merged = merge([a, b])
    assert [x.grid[0] for x in merged] == [4096, 256] and merged[1].launches == 4 and merged[1].total_ns == 100
    shares = time_shares(merged)
    assert math.isclose(sum(shares), 1) and math.isclose(shares[0], 2400 / 2500)


def test_partly_timed_buckets_are_extended_to_their_launches():
    b = Bucket.from_native(native(0, 16, 4096, 10, 400, timed=4))  # the capture ended the app early
    assert b.time_ns == 1000
    untimed = [Bucket.from_native(native(0, 16, 1, 3, 0, timed=0)), Bucket.from_native(native(1, 32, 2, 1, 0, timed=0))]
    assert time_shares(untimed) == [0.75, 0.25]  # no record at all: by launch counts


def test_weighted_speedup_is_amdahl_over_the_members():
    rare_fast = weighted_speedup([0.9, 0.1], [1.0, 2.0])
    common_fast = weighted_speedup([0.9, 0.1], [2.0, 1.0])
    assert math.isclose(rare_fast.weighted, 1 / (0.9 + 0.05)) and rare_fast.worst_member == 0
    assert math.isclose(common_fast.weighted, 1 / (0.45 + 0.1)) and common_fast.worst_member == 1
    assert common_fast.weighted > rare_fast.weighted
    assert math.isclose(weighted_speedup([3, 1], [1.5, 1.5]).weighted, 1.5)  # weights are normalised
    with pytest.raises(KerncapError):
        weighted_speedup([1.0], [1.0, 2.0])
    with pytest.raises(KerncapError):
        weighted_speedup([1.0], [0.0])
