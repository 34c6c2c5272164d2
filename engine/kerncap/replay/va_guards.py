"""Guard pages around a capture's spans, placed before a tool initialises CUDA.

compute-sanitizer reserves about twice the GPU's memory (279.6 GiB on the H200) inside
`cuInit`, at the lowest free address of the driver's range: where PyTorch's expandable
segments were captured (0x302000000), so those spans could not be reserved again under
the tool (docs/facts.md §20). Two 2 MiB `PROT_NONE` host mappings just outside each span,
made before `cuInit`, leave no free stretch that holds both a span and the tool's block:
the tool reserves elsewhere, and the spans, never covered, stay reservable at their
captured addresses (measured on the H200: docs/facts.md §22). A placeholder over the
span itself does not work: the driver then skips that range for good.

The client computes the spans (`guard_env`) and hands them to the server it starts
through `KERNCAP_VA_GUARDS`; the server places the guards first thing (`place_from_env`).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Iterable

from kerncap.replay.host_memory import plan_replay
from kerncap.replay.plan import MiB, SpanConflict, plan_address_space
from kerncap.reproducer.format import Capture

ENV = "KERNCAP_VA_GUARDS"
GUARD = 2 * MiB
_GRANULARITY = 2 * MiB  # spans are 32 MiB-aligned for any granularity up to 32 MiB

_PROT_NONE = 0
_MAP_PRIVATE, _MAP_ANONYMOUS, _MAP_NORESERVE, _MAP_FIXED_NOREPLACE = 0x02, 0x20, 0x4000, 0x100000
_MAP_FAILED = ctypes.c_void_p(-1).value


def spans_of(capture: Capture | str | Path) -> list[tuple[int, int]]:
    """(base, size) of the spans the replay server will reserve for this capture (an
    opened one is used as it is: a large manifest is not parsed twice)."""
    if not isinstance(capture, Capture):
        capture = Capture.open(capture)
    try:
        plan, _, _ = plan_replay(capture, _GRANULARITY)  # as the server plans them
    except SpanConflict:  # the server refuses such a capture itself, naming why
        plan = plan_address_space(capture.regions, _GRANULARITY)
    return [(s.base, s.size) for s in plan.spans]


def guard_env(capture: Capture | str | Path) -> str:
    return ",".join(f"{base:x}:{size:x}" for base, size in spans_of(capture))


def guards_for(spans: Iterable[tuple[int, int]]) -> list[int]:
    """Addresses of the guards: just below and just above each span, none inside one."""
    spans = sorted(spans)
    wanted = []
    for base, size in spans:
        wanted += [base - GUARD, base + size]
    return [g for g in dict.fromkeys(wanted)
            if g > 0 and not any(g < b + s and b < g + GUARD for b, s in spans)]


def parse(text: str) -> list[tuple[int, int]]:
    spans = []
    for item in filter(None, text.split(",")):
        base, _, size = item.partition(":")
        spans.append((int(base, 16), int(size, 16)))
    return spans


def place(spans: Iterable[tuple[int, int]]) -> list[int]:
    """Maps the guards (best effort: an address already taken keeps what holds it, which
    guards as well); returns the addresses placed. Linux only; must run before cuInit."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    flags = _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE | _MAP_FIXED_NOREPLACE
    placed = []
    for at in guards_for(spans):
        got = libc.mmap(at, GUARD, _PROT_NONE, flags, -1, 0)
        if got in (None, _MAP_FAILED):
            continue
        if got != at:  # a kernel without MAP_FIXED_NOREPLACE took it as a hint
            libc.munmap(got, GUARD)
            continue
        placed.append(at)
    return placed


def place_from_env() -> list[int]:
    text = os.environ.pop(ENV, "")
    return place(parse(text)) if text else []
