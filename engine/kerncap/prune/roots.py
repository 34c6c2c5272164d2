"""Where a pointer closure starts (kerncap.prune.closure, docs/prune.md): what one launch
names, or what every launch and memory operation of a sequence names.

    roots = dispatch_roots(cap)   # one dispatch
    roots = sequence_roots(cap)   # a sequence capture (cap.sequence)

A root is a region named outright (a parameter annotation, a texture object's memory, a
memory operation's destination or source), a byte string whose 8-byte-aligned values may
be pointers (a parameter buffer, a launch attribute's value), or a stored item whose
states may hold pointers (a module global, a host region, a host-to-device copy's bytes).
Each carries why it is a root, and a *kind* for the report's tally per reason.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kerncap.reproducer.format import Capture, Param

# Kinds of reasons (PruneReport.by_reason), in the order a report lists them.
ARGUMENTS = "arguments"
ATTRIBUTES = "launch attributes"
TEXTURES = "texture and surface objects"
MEMORY_OPS = "memory operations"
GLOBALS = "module globals"
HOST = "host regions"
POINTERS = "pointers in memory"
STORED = "pointers stored in the window"
ALIASES = "one memory at several addresses"
KINDS = (ARGUMENTS, ATTRIBUTES, TEXTURES, MEMORY_OPS, GLOBALS, HOST, POINTERS, STORED, ALIASES)

STORED_SUFFIX = " (stored in the window)"  # a pointer found only in a post-state


@dataclass(frozen=True)
class Named:
    """A region a root names outright."""

    region: int
    why: str
    kind: str


@dataclass(frozen=True)
class Words:
    """A byte string whose aligned u64 values may point into regions: `why(offset)` names
    the value at a byte offset."""

    data: bytes
    why: Callable[[int], str]
    kind: str


@dataclass(frozen=True)
class Item:
    """A stored item whose states may hold pointers (`states`: its chunk lists, the
    post-state second when it differs)."""

    states: tuple[list, ...]
    size: int
    prefix: str   # "global table": the reason is "<prefix>+<offset>"
    kind: str


@dataclass
class Roots:
    direct: list[Named | Words] = field(default_factory=list)  # in order: the first reason found stays
    items: list[Item] = field(default_factory=list)            # after every direct root
    post: bool = False        # the worklist also scans each kept region's post-state
    subject: str = "the kernel"   # who wrote memory (the refusal's words)
    writer: str = "it"            # who could have written an unreached region
    sources: str = "the arguments, the globals or the captured memory"


def param_name(params: Iterable[Param], offset: int) -> str:
    for p in params:
        if p.offset <= offset < p.offset + p.size:
            return f"argument {p.index}" + (f"+{offset - p.offset:#x}" if offset != p.offset else "")
    return f"parameter buffer+{offset:#x}"


def _texture_roots(cap: Capture, roots: Roots) -> None:
    ids = {r.id for r in cap.regions}
    for o in cap.texture_objects:
        region = o.resource.get("region")
        if o.resource.get("type") in ("linear", "pitch2d") and region in ids:
            roots.direct.append(Named(region, f"{o.kind} object {o.id}", TEXTURES))


def _host_items(cap: Capture, post: bool) -> list[Item]:
    # Host regions are always kept (they are few and small), so their pointers are roots.
    return [Item(_states(h.pre, h.post, post), h.size, f"pointer at host region {h.id}", HOST)
            for h in cap.snapshotted_host_regions]


def _global_items(cap: Capture, post: bool) -> list[Item]:
    return [Item(_states(g.pre, g.post, post), g.size, f"global {g.name}", GLOBALS) for g in cap.globals]


def _states(pre: list, post: list | None, with_post: bool) -> tuple[list, ...]:
    return (pre, post) if with_post and post is not None and post != pre else (pre,)


def dispatch_roots(cap: Capture) -> Roots:
    """One launch's roots: its parameter annotations and raw buffer, its attributes, its
    texture objects' memory, the pre-state of every module global and host region."""
    roots = Roots()
    ids = {r.id for r in cap.regions}
    for p in cap.manifest.get("params", []):
        annotated = [p.get("pointer")] if p.get("pointer") else []
        annotated += p.get("pointers") or []
        for ptr in annotated:
            if ptr.get("region") in ids:
                roots.direct.append(Named(ptr["region"], f"argument {p.get('index')}", ARGUMENTS))
    params = cap.params
    roots.direct.append(Words(cap.param_buffer, lambda off: param_name(params, off), ARGUMENTS))
    _texture_roots(cap, roots)
    for attr in cap.launch.get("attributes", []):
        roots.direct.append(Words(bytes.fromhex(attr.get("value", "")),
                                 lambda off, a=attr.get("id"): f"launch attribute {a}+{off:#x}", ATTRIBUTES))
    roots.items = _global_items(cap, False) + _host_items(cap, False)
    return roots


def sequence_roots(cap: Capture) -> Roots:
    """A sequence's roots: every launch's parameters (annotations and raw buffer) and
    attributes, every region a memory operation of the window writes or reads, the bytes
    of its host-to-device copies, its texture objects' memory, and both states of every
    module global and host region; the worklist scans post-states too (a launch may
    store a pointer that a later launch follows)."""
    seq = cap.sequence
    assert seq is not None
    roots = Roots(post=True, subject="the sequence",
                  sources="its launches' arguments, its memory operations, the globals or the captured memory "
                          "before or after the window")
    names = [seq.launch_label(i) for i in range(len(seq.launches))]
    roots.writer = names[0] if len(names) == 1 else (
        f"one of its {len(names)} launches ({', '.join(names[:4])}{', …' if len(names) > 4 else ''})")
    ids = {r.id for r in cap.regions}
    for launch in seq.launches:
        at = f"launch {launch.index}: "
        for p in launch.params:
            if p.region in ids:
                roots.direct.append(Named(p.region, f"{at}argument {p.index}", ARGUMENTS))
        roots.direct.append(Words(launch.param_buffer, lambda off, ps=launch.params, a=at: a + param_name(ps, off),
                                 ARGUMENTS))
        for attr_id, value in launch.attributes:
            roots.direct.append(Words(bytes.fromhex(value), lambda off, a=f"{at}launch attribute {attr_id}":
                                     f"{a}+{off:#x}", ATTRIBUTES))
    spans = _Spans(cap)
    for i, st in enumerate(seq.steps):
        for start, length, role in _touched(st):
            for rid in spans.overlapping(start, length):
                roots.direct.append(Named(rid, f"step {i}: {role}", MEMORY_OPS))
        if st.op == "copy" and st.kind == "h2d" and st.payload:
            # The host bytes land in device memory: a pointer among them is one there, even
            # where a later step of the window overwrites it.
            roots.items.append(Item((list(st.payload),), st.bytes, f"step {i}: h2d copy's bytes", MEMORY_OPS))
    _texture_roots(cap, roots)
    roots.items = _global_items(cap, True) + _host_items(cap, True) + roots.items
    return roots


def _touched(st) -> list[tuple[int, int, str]]:
    """(device address, bytes, role) of the device memory a step writes or reads."""
    if st.op == "copy":
        out = []
        if st.kind in ("d2d", "h2d"):
            out.append((st.dst, st.bytes, f"{st.kind} copy destination"))
        if st.kind in ("d2d", "d2h"):
            out.append((st.src, st.bytes, f"{st.kind} copy source"))
        return out
    if st.op == "memset":
        rows = max(st.height, 1)
        extent = (rows - 1) * st.pitch + st.width * st.element if rows > 1 else st.width * st.element
        return [(st.dst, extent, "fill")]
    return []


class _Spans:
    """Which regions overlap [start, start + length)."""

    def __init__(self, cap: Capture):
        self.regions = sorted(cap.regions, key=lambda r: r.base)
        self.bases = [r.base for r in self.regions]

    def overlapping(self, start: int, length: int) -> list[int]:
        if length <= 0:
            return []
        out = []
        i = max(bisect.bisect_right(self.bases, start) - 1, 0)
        end = start + length
        while i < len(self.regions) and self.regions[i].base < end:
            r = self.regions[i]
            if r.end > start:
                out.append(r.id)
            i += 1
        return out
