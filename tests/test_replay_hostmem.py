"""Host memory and sparse regions on the CPU (issue 25): the format reads them, `info`
says what an older capture lacks, the replay planner keeps spans off host ranges and
backs never-written zeros by a shared chunk, the replay server maps host ranges at their
captured addresses before CUDA (or names who holds them), and the glue hands the native
core what it needs. The manifests here are synthetic: the committed axpy capture
(tests/fixtures/captures/axpy_small) with a host region or a sparse region added. The
GPU suite runs the same paths on real captures (tests/gpu/test_hostmem_gpu.py)."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from kerncap import api
from kerncap.errors import AddressUnavailable, CaptureFormatError, KerncapError
from kerncap.replay import host_memory, sparse
from kerncap.replay.plan import SpanConflict, plan_address_space, plan_with_host_ranges
from kerncap.reproducer.closure_report import likely_causes
from kerncap.reproducer.format import Capture
from kerncap.reproducer.info import format_summary

import replay_sim as sim


def validate_once(reproducer, cubin=None):
    """One launch checked against the captured post-state, through the reproducer's session."""
    with api.open(reproducer, compile_worker=False) as s:
        return s.validate_once(cubin)

MiB, GiB = 1 << 20, 1 << 30
PAGE2M = 2 * MiB
AXPY = Path(__file__).parent / "fixtures" / "captures" / "axpy_small"
ROOT = Path(__file__).resolve().parents[1]


def manifest_of(repro: Path) -> dict:
    return json.loads((repro / "capture" / "manifest.json").read_text())


def write_manifest(repro: Path, m: dict) -> None:
    (repro / "capture" / "manifest.json").write_text(json.dumps(m))


def free_address(size: int = 1 << 16) -> int:
    """An address nothing maps in this process right now (mapped once and unmapped)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    p = libc.mmap(None, size, 3, 0x22, -1, 0)
    libc.munmap(p, size)
    return p


def add_host_region(repro: Path, base: int, *, old: bool = False) -> dict:
    """Synthetic: a 16 KiB mapped host region whose pre/post chunks are region 0's pre and
    region 1's post (so it is 'written'); `old`: as a kerncap before host snapshots wrote it."""
    m = manifest_of(repro)
    pre, post = m["regions"][0]["pre"], m["regions"][1]["post"]
    if old:
        m["host_regions"] = [{"base": base, "size": 16384, "api": "cuMemHostAlloc"}]
        m.pop("closure", None)
    else:
        m["host_regions"] = [{"id": 0, "base": base, "size": 16384, "api": "cuMemHostAlloc", "flags": 2,
                              "device_pointer": base, "snapshotted": True, "written": True, "zero_fraction": 0.0,
                              "pre": pre, "post": post}]
        m["closure"] = {"words_checked": 2, "unresolved": []}
    write_manifest(repro, m)
    return m


# -- format, info, what an older capture lacks ------------------------------------------------


def test_host_regions_are_read_with_their_payloads(tmp_path):
    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    add_host_region(repro, 0x7E00_0000_0000)
    cap = Capture.open(repro)
    (h,) = cap.host_regions
    assert h.snapshotted and h.written and h.device_pointer == h.base and h.id == 0
    assert h in cap.payload_items and cap.host_region_of(h.base + 100) is h
    assert len(set(cap.iter_blobs())) == 3  # its chunks are the regions': nothing new to store
    cap.verify()
    s = api.info(repro)
    assert s["host_regions"][0]["snapshotted"]
    assert not any("host memory" in w or "closure" in w for w in s["lacks"])
    text = format_summary(s)
    assert "host regions (1: pinned or registered host memory" in text and "not snapshotted" not in text


def test_an_older_capture_opens_and_says_what_it_lacks(tmp_path):
    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    add_host_region(repro, 0x7E00_0000_0000, old=True)
    cap = Capture.open(repro)
    (h,) = cap.host_regions
    assert not h.snapshotted and h.pre is None and h.device_pointer is None
    s = api.info(repro)
    assert sum("host memory contents" in w for w in s["lacks"]) == 1
    assert sum("closure check" in w for w in s["lacks"]) == 1
    text = format_summary(s)
    assert "LACKS       host memory contents" in text and "host region 0: captured by a kerncap" in text
    assert any("recorded but not snapshotted" in c for c in likely_causes(cap))
    assert cap.payload_items == [*cap.regions, *cap.globals]  # nothing of it replays or is packed


@pytest.mark.parametrize("damage, field", [
    (lambda h: h.update(device_pointer="0x7e"), "host_regions[0].device_pointer"),
    (lambda h: h.update(pre=h["pre"] * 2), "host_regions[0].pre/post"),
    (lambda h: h.pop("post"), "host_regions[0] lists only one of pre/post"),
    (lambda h: h.update(pre=["zz" * 8]), "host_regions[0].pre[0]"),
])
def test_damaged_host_region_fields_are_named(tmp_path, damage, field):
    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    m = add_host_region(repro, 0x7E00_0000_0000)
    damage(m["host_regions"][0])
    write_manifest(repro, m)
    with pytest.raises(CaptureFormatError) as exc:
        Capture.open(repro)
    assert "manifest.json" in exc.value.message and field in exc.value.message, exc.value.message


def test_a_host_region_over_a_device_region_is_refused(tmp_path):
    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    m = add_host_region(repro, manifest_of(repro)["regions"][1]["base"] + 64)
    write_manifest(repro, m)
    with pytest.raises(CaptureFormatError) as exc:
        Capture.open(repro)
    assert "host region 0" in exc.value.message and "overlaps region 1" in exc.value.message


def test_a_damaged_host_payload_names_the_file_and_the_host_region(tmp_path):
    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    m = add_host_region(repro, 0x7E00_0000_0000)
    fresh = "0123456789abcdef"  # a chunk only the host region uses, then truncated
    m["host_regions"][0]["pre"] = [fresh]
    write_manifest(repro, m)
    (repro / "capture" / "blobs" / f"{fresh}.bin").write_bytes(b"\1" * 100)
    with pytest.raises(CaptureFormatError) as exc:
        Capture.open(repro).verify()
    assert f"{fresh}.bin" in exc.value.message and "(host region 0 pre-state chunk 0)" in exc.value.message
    s = api.info(repro)
    assert not s["payloads"]["ok"]
    assert f"{fresh} (host region 0 pre-state chunk 0): {fresh}.bin holds 100 bytes" in s["payloads"]["summary"]


def test_pack_carries_host_payloads(tmp_path):
    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    m = add_host_region(repro, 0x7E00_0000_0000)
    own = (repro / "capture" / "blobs")
    data = bytes(range(256)) * 64
    import xxhash

    h = xxhash.xxh64_hexdigest(data)
    (own / f"{h}.bin").write_bytes(data)
    m["host_regions"][0]["post"] = [h]
    write_manifest(repro, m)
    packed = api.pack(repro, tmp_path / "r.kcap")
    out = api.unpack(packed.path, tmp_path / "back")
    back = Capture.open(out.path)
    assert back.host_regions[0].post == [h]
    assert back.read_chunk(h, len(data)) == data


# -- planning: sparse regions and host ranges ---------------------------------------------------


class R:
    def __init__(self, id, base, size, pre=None, post=None):
        self.id, self.base, self.size = id, base, size
        n = -(-size // (4 * MiB))
        self.pre = pre if pre is not None else ["a" * 16] * n
        self.post = post if post is not None else list(self.pre)


def test_a_huge_mostly_zero_region_is_backed_only_where_data_lives():
    base = 0x7F00_0000_0000
    n = (100 * GiB) // (4 * MiB)
    pre = [None] * n
    post = [None] * n
    pre[10] = "a" * 16                  # data
    post[20] = "b" * 16                 # written by the kernel (zero before)
    pre[n - 1] = post[n - 1] = "c" * 16  # data at the end
    big = R(0, base, 100 * GiB, pre, post)
    small = R(1, base + 100 * GiB + 4 * MiB, 4 * MiB)
    live = sparse.sparse_regions([big, small], 4 * MiB, sparse.DEFAULT_MIN_BYTES)
    assert list(live) == [0]
    assert live[0] == [(10 * 4 * MiB, 4 * MiB), (20 * 4 * MiB, 4 * MiB), ((n - 1) * 4 * MiB, 4 * MiB)]
    plan = plan_address_space([big, small], PAGE2M, live=live)
    assert plan.mapped_bytes == 4 * 4 * MiB  # three chunks of the arena and the small region, nothing else
    assert plan.mapped_bytes + plan.zero_bytes == 100 * GiB + 4 * MiB
    assert plan.segments[0] == live[0] and 1 not in plan.segments
    for a, b in zip(plan.maps, plan.maps[1:]):
        assert a[0] + a[1] < b[0]
    for zb, zn in plan.zero_maps:  # zero-backed pages are never also backed by own memory
        assert not any(mb < zb + zn and zb < mb + mn for mb, mn in plan.maps)
    # the spans still cover the whole arena at its address
    assert plan.spans[0].base <= base and plan.spans[-1].end >= base + 100 * GiB


def test_backed_parts_follow_pages_where_chunks_and_pages_do_not_align():
    base = 0x7F00_0000_0000 + 1 * MiB  # region starts in the middle of a 2 MiB page
    pre = [None] * 512
    pre[3] = "a" * 16
    r = R(0, base, 2 * GiB, pre, list(pre))
    plan = plan_address_space([r], PAGE2M, live=sparse.sparse_regions([r], 4 * MiB, 1))
    # chunk 3 is [base+12 MiB, base+16 MiB): pages [base+11, base+17) MiB cover it
    assert plan.maps == [(base + 11 * MiB, 6 * MiB)]
    assert plan.segments[0] == [(11 * MiB, 6 * MiB)]
    assert plan.zero_maps[0] == (base - 1 * MiB, 12 * MiB)


def test_sparse_replay_thresholds_and_switches():
    assert sparse.min_bytes_from_env({}) == sparse.DEFAULT_MIN_BYTES
    assert sparse.min_bytes_from_env({"KERNCAP_SPARSE": "0"}) is None
    assert sparse.min_bytes_from_env({"KERNCAP_SPARSE": "1"}) == 1
    assert sparse.min_bytes_from_env({"KERNCAP_SPARSE_MIN": "4096"}) == 4096
    r = R(0, 0x7F00_0000_0000, 8 * MiB, [None, None], [None, None])
    assert sparse.sparse_regions([r], 4 * MiB, None) == {}
    assert sparse.sparse_regions([r], 4 * MiB, 8 * MiB) == {0: []}
    assert sparse.sparse_regions([r], 4 * MiB, 8 * MiB + 1) == {}


def test_a_regions_partial_last_chunk_counts_only_its_own_bytes():
    """A region whose size is no multiple of the chunk size ends in a partial chunk: live,
    its backed part stops at the region's end; zero, it adds only its own bytes to the
    never-written zeros that decide whether the region replays sparsely."""
    size = 8 * MiB + 1 * MiB  # chunks of 4, 4 and 1 MiB
    live = R(0, 0x7F00_0000_0000, size, [None, None, "a" * 16], [None, None, "a" * 16])
    assert sparse.live_intervals(live.pre, live.post, size, 4 * MiB) == ([(8 * MiB, 1 * MiB)], 8 * MiB)
    assert sparse.sparse_regions([live], 4 * MiB, 1) == {0: [(8 * MiB, 1 * MiB)]}
    dead = R(1, 0x7F00_0000_0000, size, [None] * 3, [None] * 3)
    assert sparse.live_intervals(dead.pre, dead.post, size, 4 * MiB) == ([], size)
    assert sparse.sparse_regions([dead], 4 * MiB, size) == {1: []}
    assert sparse.sparse_regions([dead], 4 * MiB, size + 1) == {}


def test_a_sparse_regions_last_backed_part_stops_at_the_regions_end():
    """A sparse region ending in the middle of a 2 MiB page whose last (partial) chunk holds
    data: its page is backed whole, but the region's backed part (what is restored and
    compared, in the region's own offsets) ends at the region's end, not at the page's."""
    base = 0x7F00_0000_0000
    size = 2 * GiB + 1 * MiB  # 512 whole chunks of 4 MiB and one of 1 MiB
    pre = [None] * 513
    pre[512] = "a" * 16
    r = R(0, base, size, pre, list(pre))
    live = sparse.sparse_regions([r], 4 * MiB, 1)
    assert live == {0: [(2 * GiB, 1 * MiB)]}
    plan = plan_address_space([r], PAGE2M, live=live)
    assert plan.maps == [(base + 2 * GiB, PAGE2M)]  # the whole page holding the last chunk
    assert plan.segments[0] == [(2 * GiB, 1 * MiB)]
    assert all(off + n <= size for off, n in plan.segments[0])


def test_a_region_whose_base_is_not_8_byte_aligned_replays_whole():
    """Segment offsets must suit every dtype: a mostly-zero region at an address that is no
    multiple of 8 is not replayed sparsely, whatever the threshold; the same region at an
    aligned address is."""
    dead = [None, None]
    for misalign in (1, 4):
        odd = R(0, 0x7F00_0000_0000 + misalign, 8 * MiB, dead, dead)
        assert sparse.sparse_regions([odd], 4 * MiB, 1) == {}, misalign
    aligned = R(0, 0x7F00_0000_0000 + 8, 8 * MiB, dead, dead)
    assert sparse.sparse_regions([aligned], 4 * MiB, 1) == {0: []}


def test_spans_keep_off_host_ranges_or_say_why():
    region = R(0, 0x7F00_0000_0000 + 40 * MiB, 1 * MiB)
    host_above = (0x7F00_0000_0000 + 70 * MiB, 4096)  # where upward padding would reach
    plan = plan_address_space([region], PAGE2M, avoid=[host_above])
    (span,) = plan.spans
    assert span.size == 64 * MiB and span.end <= host_above[0] and span.base % (32 * MiB) == 0
    with pytest.raises(SpanConflict) as exc:  # inside the region's own 32 MiB neighbourhood
        plan_address_space([region], PAGE2M, avoid=[(0x7F00_0000_0000 + 33 * MiB, 4096)])
    assert "lies inside" in str(exc.value)


def test_host_memory_among_device_regions_is_planned_in_device_memory():
    """The H200's JAX capture (default preallocation): XLA's pinned host buffer sat right
    after the end of its 110 GiB arena, inside the arena's 32 MiB-aligned end. A span
    trimmed to end there was placed elsewhere by the driver ("cuMemAddressReserve placed it
    at 0x1d3a000000 instead"), and a torch.compile graph's pinned page sat between its
    device regions. Such host ranges get device memory at their address inside the span;
    a host range clear of the spans stays on the host."""
    arena = R(0, 0x302000000, 0x1D38800000 - 0x302000000)
    host = {0: (0x1D38800000, 2 * MiB), 1: (0x7F00_0000_0000, 4096)}
    with pytest.raises(SpanConflict, match="lies inside") as exc:
        plan_address_space([arena], PAGE2M, avoid=[host[0]])
    assert exc.value.host == (0x1D38800000, 0x1D38A00000)
    plan, backed = plan_with_host_ranges([arena], host, PAGE2M)
    assert backed == {0}
    (span,) = plan.spans
    assert (span.base, span.end) == (0x302000000, 0x1D3A000000) and span.regions == (0, "host range 0")
    assert (0x1D38800000, 2 * MiB) in plan.maps or any(b <= 0x1D38800000 and 0x1D38A00000 <= b + n for b, n in plan.maps)
    assert "host range 0" in span.label


@pytest.mark.parametrize("seed", range(40))
def test_spans_stay_32_mib_aligned_at_both_ends_around_host_ranges(seed):
    """torch_graph_mlp on the H200: a span padded downward by a non-multiple of 32 MiB
    started at 0x7f7089200000 and the driver placed it elsewhere. Whatever the host ranges
    near them, every span starts and ends on a 32 MiB boundary and covers no host range."""
    import random
    rng = random.Random(seed)
    top = 0x7F00_0000_0000
    regions = [R(i, top + rng.randrange(0, 512) * PAGE2M, rng.choice([4096, MiB, 3 * MiB])) for i in range(3)]
    regions = [r for i, r in enumerate(regions)
               if not any(o.base < r.base + r.size and r.base < o.base + o.size for o in regions[:i])]
    host = {i: (top + rng.randrange(-64, 600) * PAGE2M + rng.randrange(0, 512) * 4096, 4096) for i in range(4)}
    host = {i: h for i, h in host.items()
            if not any(r.base < h[0] + h[1] and h[0] < r.base + r.size for r in regions)}
    try:
        plan, backed = plan_with_host_ranges(regions, host, PAGE2M)
    except SpanConflict:
        return  # named: covered by test_spans_keep_off_host_ranges_or_say_why
    for sp in plan.spans:
        assert sp.base % (32 * MiB) == 0 and sp.end % (32 * MiB) == 0 and sp.size >= 64 * MiB
        for i, (b, n) in host.items():
            if i not in backed:
                assert not (b < sp.end and sp.base < b + n), f"span {sp.label} covers host range {i}"
    for i in backed:
        b, n = host[i]
        assert any(mb <= b and b + n <= mb + mn for mb, mn in plan.maps), f"device-backed host range {i} unmapped"


def test_host_ranges_merge_where_they_share_a_page():
    class H:
        def __init__(self, id, base, size):
            self.id, self.base, self.size, self.snapshotted = id, base, size, True

    page = 4096
    ranges = host_memory.plan_host_ranges([H(0, 0x5000_0010, 100), H(1, 0x5000_0800, 5000), H(2, 0x6000_0000, 1)],
                                          page)
    assert [(r.base, r.size, r.regions) for r in ranges] == [(0x5000_0000, 2 * page, (0, 1)),
                                                              (0x6000_0000, page, (2,))]
    assert ranges[0].label == "host range 0 (host regions 0, 1)"


def test_a_host_range_is_planned_at_its_device_address_where_that_differs_from_its_host_address():
    """Without host pointers for registered memory, a pinned buffer's device pointer is not
    its host address: the kernel reaches the range at the device pointer (shifted by the
    same amount for the page-aligned range), so that is where the plan puts it. Here the
    device pointer lies among the device regions: the range is restored in device memory
    there, though its host address is far away."""
    class H:
        def __init__(self, id, base, size, device_pointer):
            self.id, self.base, self.size, self.snapshotted = id, base, size, True
            self.device_pointer = device_pointer

    far, near = 0x5000_0010, 0x7F00_0000_0000 + 4 * MiB + 0x10
    h = H(0, far, 100, near)
    ranges = host_memory.plan_host_ranges([h], 4096)
    assert host_memory.device_ranges(ranges, [h]) == {0: (near - 0x10, 4096)}
    unified = H(0, far, 100, None)  # no device pointer recorded: the host address itself
    assert host_memory.device_ranges(ranges, [unified]) == {0: (far - 0x10, 4096)}

    class Cap:
        regions = [R(0, 0x7F00_0000_0000, 1 * MiB)]
        host_regions = [h]

    plan, on_host, backed = host_memory.plan_replay(Cap(), PAGE2M)
    assert backed == {0} and on_host == []
    assert any(b <= near - 0x10 and near - 0x10 + 4096 <= b + n for b, n in plan.maps)


# -- the replay process: host mappings before CUDA -------------------------------------------------


def run_python(code: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": f"{ROOT / 'engine'}:{ROOT}", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          env=env)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MAP_FIXED_NOREPLACE is Linux's")
def test_host_ranges_map_at_their_address_or_name_the_holder():
    p = run_python("""
        import ctypes, sys
        from kerncap.errors import AddressUnavailable
        from kerncap.replay.host_memory import HostRange, place
        libc = ctypes.CDLL(None)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        at = libc.mmap(None, 1 << 20, 3, 0x22, -1, 0); libc.munmap(at, 1 << 20)
        ok = place([HostRange(0, at, 1 << 16, (0,))])
        ctypes.memmove(at, b"hello", 5)  # writable at its address
        print("placed", ok == [(at, 1 << 16)], ctypes.string_at(at, 5))
        try:
            place([HostRange(1, at + 4096, 8192, (3,))])  # overlaps the first: held by it
        except AddressUnavailable as e:
            print("refused", e.message)
            print("hint", e.hint)
    """)
    assert p.returncode == 0, p.stderr
    lines = dict(line.split(" ", 1) for line in p.stdout.splitlines())
    assert lines["placed"] == "True b'hello'"
    refused = lines["refused"]
    assert refused.startswith("cannot map host range 1 (host region 3) [0x") and "+8.0 KiB) at its captured" in refused
    assert "File exists" in refused and "held by: " in refused and "rw-p" in refused  # the /proc/self/maps line
    assert "fresh replay server" in lines["hint"]


class Glue:
    """What NativeSession handed the simulated core, and what it placed on the host."""


@pytest.fixture
def simulated(tmp_path, monkeypatch):
    placed: list = []
    monkeypatch.setattr(host_memory, "place", lambda ranges: placed.extend(ranges) or [])
    repro = sim.axpy_reproducer(tmp_path, monkeypatch, {
        "captured": sim.axpy, "same.cubin": sim.axpy, "host_writer.cubin": host_writer, "stray.cubin": stray})
    return repro, placed


def host_writer(m, s):  # the variant also changes the host region
    sim.axpy(m, s)
    i = next(k for k, spec in enumerate(s.items) if spec.label == "host region 0")
    s.target[i][0] ^= 0xFF


def stray(m, s):  # the variant writes into the sparse region's never-written zeros
    sim.axpy(m, s)
    m.f32(2)[5] = 1.0


def test_host_regions_are_placed_before_cuda_registered_restored_and_compared(simulated):
    repro, placed = simulated
    base = 0x7E00_0000_0000
    add_host_region(repro, base)
    from kerncap.replay.native_session import NativeSession

    ns = NativeSession(repro)
    assert [(r.base, r.size, r.regions) for r in placed] == [(base, 16384, (0,))]
    assert ns.session.host_ranges == [(base, 16384)]
    assert ns.session.host_regions == [("host region 0", base, 16384, base)]
    host_spec = ns.session.items[-1]
    assert host_spec.label == "host region 0" and host_spec.host and host_spec.base == base
    v = ns.validate(None, None, None, None, None)
    assert v.passed is False  # the captured kernel does not write the host region; its post-state differs
    (check,) = [c for c in v.regions if c.kind == "host"]
    assert check.name == "host region 0" and check.mismatched_bytes and check.base == base


def test_a_variant_writing_host_memory_is_judged_on_it(simulated):
    repro, _ = simulated
    m = add_host_region(repro, 0x7E00_0000_0000)
    m["host_regions"][0]["post"] = m["host_regions"][0]["pre"]  # the kernel leaves it alone
    m["host_regions"][0]["written"] = False
    write_manifest(repro, m)
    assert validate_once(repro).passed
    v = validate_once(repro, cubin=repro.parent / "host_writer.cubin")
    bad = [c for c in v.regions if not c.passed]
    assert [(c.kind, c.id, c.mismatched_bytes, c.unexpected_write) for c in bad] == [("host", 0, 1, True)]


def test_what_the_captured_dispatch_wrote_counts_its_host_regions(simulated):
    """validate's "changed bytes" of the captured input (differential.written_bytes: what
    decides whether a no-op would pass and whether a canary input is run) counts a host
    region the dispatch wrote, not only device regions. Mutation caught: regions alone."""
    from kerncap.replay import differential as diff

    repro, _ = simulated
    before = diff.written_bytes(Capture.open(repro))
    add_host_region(repro, 0x7E00_0000_0000)  # written: pre and post chunks differ, 16 KiB
    assert before > 0 and diff.written_bytes(Capture.open(repro)) == before + 16384


def test_a_device_pointer_that_differs_in_replay_is_named(simulated):
    repro, _ = simulated
    m = add_host_region(repro, 0x7E00_0000_0000)
    m["host_regions"][0]["device_pointer"] = 0x7E00_0000_0000 + (1 << 30)  # as on a system without host pointers
    write_manifest(repro, m)
    with pytest.raises(KerncapError) as exc:
        validate_once(repro)
    assert "host region 0" in exc.value.message and "instead of the captured 0x7e0040000000" in exc.value.message


def test_a_host_region_among_device_regions_replays_in_device_memory(simulated):
    """Synthetic: a pinned page just past y, inside y's 32 MiB neighbourhood (as the
    driver places pinned pages among PyTorch's device blocks). It is not mapped on the
    host: it gets device memory at its address, is restored, compared, and said."""
    repro, placed = simulated
    y = manifest_of(repro)["regions"][1]
    y_end = y["base"] + y["size"]
    at = y_end - y_end % 4096 + 8192
    assert at + 16384 <= y_end - y_end % (32 * MiB) + 32 * MiB, "the fixture's y ends too close to 32 MiB"
    m = add_host_region(repro, at)
    m["host_regions"][0]["post"] = m["host_regions"][0]["pre"]
    m["host_regions"][0]["written"] = False
    write_manifest(repro, m)
    from kerncap.replay.native_session import NativeSession

    ns = NativeSession(repro)
    assert placed == [] and ns.device_backed == {0} and not getattr(ns.session, "host_ranges", None)
    host_spec = ns.session.items[-1]
    assert host_spec.label == "host region 0" and not host_spec.host and host_spec.base == at
    assert any("host range 0" in sp.regions for sp in ns.plan.spans)
    assert any("replayed in device memory" in n for n in ns.notes())
    ns.close() if hasattr(ns, "close") else None
    v = validate_once(repro)
    assert v.passed and any(c.kind == "host" and c.passed for c in v.regions)
    bad = [c for c in validate_once(repro, cubin=repro.parent / "host_writer.cubin").regions if not c.passed]
    assert [(c.kind, c.id, c.mismatched_bytes) for c in bad] == [("host", 0, 1)]


def add_sparse_region(repro: Path) -> dict:
    """Synthetic: an 8 MiB region 1 GiB above y, zero before and after (never written)."""
    m = manifest_of(repro)
    y = m["regions"][1]
    m["regions"].append({"id": 2, "base": y["base"] + GiB - y["base"] % PAGE2M, "size": 8 * MiB, "api": "cuMemAlloc_v2",
                         "kind": "device", "written": False, "zero_fraction": 1.0, "pre": [None, None],
                         "post": [None, None]})
    write_manifest(repro, m)
    return m


def test_sparse_region_replays_zero_backed_and_a_stray_write_is_named(simulated, monkeypatch):
    repro, _ = simulated
    add_sparse_region(repro)
    monkeypatch.setenv("KERNCAP_SPARSE", "1")
    from kerncap.replay.native_session import NativeSession

    ns = NativeSession(repro)
    spec = next(s for s in ns.session.items if s.label == "region 2")
    assert spec.sparse and spec.segments == [] and ns.plan.zero_bytes == 8 * MiB
    assert ns.session.zero_maps == [(spec.base, 8 * MiB)] and ns.session.zero_chunk == sparse.ZERO_CHUNK
    assert not any(b <= spec.base < b + n for b, n in ns.session.maps)  # no memory of its own
    assert ns.info()["sparse"] == {"2": []}
    assert validate_once(repro).passed
    with pytest.raises(KerncapError) as exc:
        validate_once(repro, cubin=repro.parent / "stray.cubin")
    message = exc.value.message
    assert "ILLEGAL_ADDRESS" in message and "Region(s) 2 replay sparsely" in message
    assert "the variant writes outside what the captured kernel wrote" in message


def test_the_captured_kernel_faulting_names_the_capture_not_a_variant(simulated, monkeypatch):
    repro, _ = simulated
    m = manifest_of(repro)
    m["closure"] = {"words_checked": 4, "unresolved": [
        {"param": 1, "at": 0, "value": 0x7F99_0000_0000, "reason": "host memory kerncap does not capture ([…] rw-p)"}]}
    write_manifest(repro, m)

    def faults(_m, _s):
        raise sim.sticky()

    monkeypatch.setitem(sim.KERNELS, "captured", faults)
    with pytest.raises(KerncapError) as exc:
        validate_once(repro)
    assert "Likely cause, from the capture (not the kernel's code): parameter 1 holds 0x7f9900000000" in exc.value.message
    assert "variant" not in (exc.value.hint or "") and "kerncap info" in exc.value.hint


def test_perturbing_a_sparse_region_draws_only_where_it_is_backed(simulated, monkeypatch):
    repro, _ = simulated
    from kerncap.replay import session_ops

    class NS:
        class plan:
            segments = {2: [(4 * MiB, 4 * MiB)]}

    f = {"region": 2, "offset": 1000, "count": (8 * MiB - 1000) // 4, "dtype": "float32"}
    assert session_ops._backed_parts(NS, f) == [(4 * MiB, MiB)]
    assert session_ops._backed_parts(NS, {**f, "region": 1}) == [(1000, f["count"])]
    NS.plan.segments = {2: []}
    assert session_ops._backed_parts(NS, f) == []
