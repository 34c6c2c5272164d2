"""Host memory of a capture, mapped at its captured addresses in the replay process.

A kernel that reads a `cudaHostAlloc(…, Mapped)` table or a `cudaHostRegister`ed buffer
holds the host address itself (with unified addressing the device pointer is the host
pointer, CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = 1 on the H200). So the replay server
maps each captured host range at exactly its address — anonymous memory, `mmap` with
MAP_FIXED_NOREPLACE, *before* CUDA starts in the process, so nothing of the driver's
lands there first — and the native core then registers it (cuMemHostRegister, DEVICEMAP)
and checks that the device pointer is the captured one (native/replay/host_memory.hpp).
Contents come from the resident pre-state copies like any region's.

When a range is taken, the error names it and what holds it (the /proc/self/maps lines
that overlap it); there is never a fallback to another address. The client tries a few
fresh servers first: the holders (libraries, the Python heap) land at random addresses.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Iterable

from kerncap.core.units import human_bytes
from kerncap.errors import AddressUnavailable
from kerncap.replay.plan import AddressPlan, grouped_label, plan_with_host_ranges, shared_maps

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_PROT_READ, _PROT_WRITE = 0x1, 0x2
_MAP_PRIVATE, _MAP_ANONYMOUS, _MAP_NORESERVE, _MAP_FIXED_NOREPLACE = 0x02, 0x20, 0x4000, 0x100000
_MAP_FAILED = ctypes.c_void_p(-1).value
HINT = ("the captured host memory must be mapped at its original address and something in the replay process "
        "holds part of it; a fresh replay server usually finds it free (libraries and heaps land at random "
        "addresses). If it persists, the range collides with what this system maps there")


@dataclass(frozen=True)
class HostRange:
    index: int
    base: int  # page-aligned
    size: int
    regions: tuple[int, ...]  # host region ids inside

    @property
    def end(self) -> int:
        return self.base + self.size

    @property
    def label(self) -> str:
        return "host range " + grouped_label(self.index, "host region", self.regions)


def plan_host_ranges(host_regions: Iterable, page: int = PAGE) -> list[HostRange]:
    """The page-aligned ranges holding the snapshotted host regions, merged where they
    share or touch a page (the driver registers whole pages)."""
    spans: list[list] = []
    for h in sorted((h for h in host_regions if h.snapshotted and h.size > 0), key=lambda h: h.base):
        lo, hi = h.base - h.base % page, -(-(h.base + h.size) // page) * page
        if spans and lo <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], hi)
            spans[-1][2].append(h.id)
        else:
            spans.append([lo, hi, [h.id]])
    return [HostRange(i, lo, hi - lo, tuple(ids)) for i, (lo, hi, ids) in enumerate(spans)]


def device_ranges(ranges: Iterable[HostRange], host_regions: Iterable) -> dict[int, tuple[int, int]]:
    """Range index -> (device address, size): where a kernel reaches each range (the
    host address itself under unified addressing)."""
    by_id = {h.id: h for h in host_regions}
    out = {}
    for r in ranges:
        h = by_id[r.regions[0]]
        delta = h.device_pointer - h.base if h.device_pointer is not None else 0
        out[r.index] = (r.base + delta, r.size)
    return out


def plan_replay(capture, granularity: int, *, live=None,
                backed: Iterable[int] = ()) -> tuple[AddressPlan, list[HostRange], set[int]]:
    """The replay's address plan for `capture`, the host ranges to map at their host
    addresses, and the indices of those restored in device memory (plan.plan_with_host_ranges).
    The replay server and the VA guards plan through here, so both see the same spans."""
    ranges = plan_host_ranges(capture.host_regions)
    shared, _ = shared_maps(capture.regions, granularity)
    plan, device_backed = plan_with_host_ranges(capture.regions, device_ranges(ranges, capture.host_regions),
                                                granularity, live=live, backed=backed, shared=shared)
    return plan, [r for r in ranges if r.index not in device_backed], device_backed


def holders(base: int, size: int, maps_text: str | None = None) -> list[str]:
    """The /proc/self/maps lines overlapping [base, base + size), as they read."""
    if maps_text is None:
        try:
            with open("/proc/self/maps") as f:
                maps_text = f.read()
        except OSError:
            return []
    out = []
    for line in maps_text.splitlines():
        lo_hi = line.split(" ", 1)[0]
        try:
            lo, hi = (int(x, 16) for x in lo_hi.split("-"))
        except ValueError:
            continue
        if lo < base + size and base < hi:
            out.append(" ".join(line.split()))
    return out


def refusal(r: HostRange, why: str, lines: list[str]) -> AddressUnavailable:
    held = ("; held by: " + " | ".join(lines[:4]) + (f" | and {len(lines) - 4} more" if len(lines) > 4 else "")
            if lines else "")
    return AddressUnavailable(
        f"cannot map {r.label} [{r.base:#x}, +{human_bytes(r.size)}) at its captured address in the replay "
        f"process: {why}{held}", HINT)


def place(ranges: Iterable[HostRange]) -> list[tuple[int, int]]:
    """Maps every range read-write at its address (Linux; before cuInit). Raises
    AddressUnavailable naming the range and its holders; ranges mapped before the failure
    are unmapped again. Returns the (base, size) mapped."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    flags = _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE | _MAP_FIXED_NOREPLACE
    placed: list[tuple[int, int]] = []
    try:
        for r in ranges:
            got = libc.mmap(r.base, r.size, _PROT_READ | _PROT_WRITE, flags, -1, 0)
            if got in (None, _MAP_FAILED):
                err = ctypes.get_errno()
                raise refusal(r, f"mmap failed: {os.strerror(err)}", holders(r.base, r.size))
            placed.append((got, r.size))
            if got != r.base:  # a kernel without MAP_FIXED_NOREPLACE took the address as a hint
                raise refusal(r, f"the kernel placed it at {got:#x} instead (no MAP_FIXED_NOREPLACE?)",
                              holders(r.base, r.size))
    except AddressUnavailable:
        for base, size in placed:
            libc.munmap(base, size)
        raise
    return placed
