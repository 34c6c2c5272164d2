"""Guard pages around a capture's spans (kerncap/replay/va_guards.py): computed by the
client from the capture, placed by the server before CUDA starts. The GPU half (a tool's
own reservation kept off torch_expandable's spans) is tests/gpu/test_inspect_gpu.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kerncap.replay import va_guards
from kerncap.replay.plan import MiB

AXPY = Path(__file__).parent / "fixtures" / "captures" / "axpy_small"

GiB = 1 << 30


def test_guards_sit_just_outside_every_span_and_never_inside_one():
    spans = [(0x302000000, 4 * GiB), (0x402000000 + 2 * MiB, 64 * MiB)]  # 2 MiB apart
    guards = va_guards.guards_for(spans)
    assert 0x302000000 - 2 * MiB in guards and 0x402000000 + 2 * MiB + 64 * MiB in guards
    for g in guards:
        assert not any(g < b + s and b < g + va_guards.GUARD for b, s in spans), hex(g)
    # the gap between the two spans is exactly one guard: placed once
    assert guards.count(0x402000000) == 1


def test_spans_come_from_the_replay_plan_of_the_capture():
    spans = va_guards.spans_of(AXPY)
    assert spans and all(base % (32 * MiB) == 0 and size >= 64 * MiB for base, size in spans)
    assert va_guards.parse(va_guards.guard_env(AXPY)) == spans


def test_server_side_placement_maps_prot_none_pages_at_the_guards(tmp_path):
    spans = [(0x6a2000000, 64 * MiB), (0x7a2000000, 128 * MiB)]
    env = {**os.environ, va_guards.ENV: ",".join(f"{b:x}:{s:x}" for b, s in spans)}
    code = ("import json\nfrom kerncap.replay import va_guards\nplaced = va_guards.place_from_env()\n"
            "maps = [l.split()[:2] for l in open('/proc/self/maps')]\nprint(json.dumps([placed, maps]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    placed, maps = json.loads(out.stdout)
    assert sorted(placed) == sorted(va_guards.guards_for(spans))
    for g in placed:
        hit = [perms for rng, perms in maps if int(rng.split("-")[0], 16) <= g < int(rng.split("-")[1], 16)]
        assert hit == ["---p"], (hex(g), hit)
    for base, size in spans:  # the spans themselves stay free for the driver
        assert not any(int(r.split("-")[0], 16) < base + size and base < int(r.split("-")[1], 16)
                       for r, _ in maps), hex(base)


def test_a_taken_guard_address_is_skipped_not_fatal():
    """The guard below the span is taken by another mapping first: place() skips it, places
    the one above, and a second call (both held) places nothing. Mutations caught: place()
    returning [], and `break` instead of `continue` on a taken address."""
    import ctypes
    libc = ctypes.CDLL(None)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    spans = [(0x6a2000000, 64 * MiB)]
    below, above = va_guards.guards_for(spans)
    assert below < spans[0][0] < above
    taken = libc.mmap(below, va_guards.GUARD, 1, 0x02 | 0x20 | 0x100000, -1, 0)  # PROT_READ, FIXED_NOREPLACE
    assert taken == below, "could not take the guard address for the test"
    placed = []
    try:
        placed = va_guards.place(spans)
        assert placed == [above]  # the taken one skipped, the other still placed
        assert va_guards.place(spans) == []  # both held now: kept as they are
    finally:
        for g in [taken, *placed]:
            libc.munmap(g, va_guards.GUARD)


def test_the_guards_spans_keep_off_the_captures_host_ranges_as_the_servers_do(tmp_path):
    """A pinned host region 16 MiB past the device regions' 32 MiB neighbourhood: the
    server pads that span downward, so it covers no host range; the guards must be
    computed from those spans, not from an upward-padded plan of the device regions alone
    (whose guard below would sit inside the span the server reserves)."""
    import shutil

    from kerncap.replay.host_memory import plan_replay
    from kerncap.reproducer.format import Capture

    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    manifest = repro / "capture" / "manifest.json"
    m = json.loads(manifest.read_text())
    regions_end = max(r["base"] + r["size"] for r in m["regions"])
    host = regions_end - regions_end % (32 * MiB) + 32 * MiB + 16 * MiB
    m["host_regions"] = [{"id": 0, "base": host, "size": 16384, "api": "cuMemHostAlloc", "flags": 2,
                          "device_pointer": host, "snapshotted": True, "written": True, "zero_fraction": 0.0,
                          "pre": m["regions"][0]["pre"], "post": m["regions"][1]["post"]}]
    m["closure"] = {"words_checked": 2, "unresolved": []}
    manifest.write_text(json.dumps(m))
    capture = Capture.open(repro)
    server_plan, host_ranges, _ = plan_replay(capture, 2 * MiB)
    assert [r.base for r in host_ranges] == [host]  # mapped on the host, not device-backed
    spans = va_guards.spans_of(capture)
    assert spans == [(s.base, s.size) for s in server_plan.spans]
    (span,) = spans
    assert not (host < span[0] + span[1] and span[0] < host + 16384), "a span covers the host range"
    for g in va_guards.guards_for(spans):
        assert not any(g < b + s and b < g + va_guards.GUARD for b, s in spans), hex(g)
