"""A sequence capture as a replay program (docs/sequences.md): the native core's SeqSpec
built from the capture, or from a variant of it (rebuilt modules, one fusion); the
server's operations on it are kerncap.replay.sequence_ops.

Imported only in the replay server process (it drives kerncap._replay objects).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kerncap.errors import CaptureFormatError, KerncapError
from kerncap.recompile.devcompile.module_id import global_names_for, object_names
from kerncap.reproducer.format import Capture, Global, Region
from kerncap.reproducer.sequence import Sequence
from kerncap.reproducer.sequence_variant import ExcludedSpan, SequenceVariant, is_sequence_variant, read_variant
from kerncap.sources.cubin import kernel_names, open_elf

ORDERS = ("streams", "serial", "graph")


@dataclass
class SeqProgram:
    """What the server knows of one loaded sequence program besides its native key."""

    key: str
    label: str
    variant: SequenceVariant | None
    steps: list[str]                      # each step's label, in this program's order
    launch_steps: list[int]               # indices of its launch steps
    launch_labels: list[str]              # per launch step
    launch_streams: list[int]
    excluded: list[ExcludedSpan] = field(default_factory=list)
    fused_at: int | None = None           # the step the fusion put in place of its range
    notes: list[str] = field(default_factory=list)


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise KerncapError(f"cannot read {what} {path}: {exc.strerror}", "check the variant's paths") from None


def _launch_spec(core, seq: Sequence, launch_index: int, objects: dict[int, int]):
    """`objects`: texture object id -> its index among the replay's recreated objects."""
    l = seq.launches[launch_index]
    s = core.LaunchSpec()
    s.kernel_name = seq.kernels[l.kernel].name
    s.grid, s.block = list(l.grid), list(l.block)
    s.shared_mem_bytes = l.shared_mem_bytes
    s.attributes = [(int(i), bytes.fromhex(v)) for i, v in l.attributes]
    s.cooperative = l.cooperative or l.api.startswith("cuLaunchCooperativeKernel")
    s.extra_form = l.extra_form
    s.param_buffer = l.param_buffer
    s.params = [(p.offset, p.size) for p in l.params]
    # the replay's handle where the app passed a texture/surface object's (as for one dispatch)
    stray = [p.index for p in l.params if p.handle_object is not None and p.handle_object not in objects]
    if stray:
        raise CaptureFormatError(f"sequence.json: launch {launch_index}'s parameter {stray[0]} names a texture object "
                                 "the manifest does not list", "extract again")
    s.handles = [(p.offset, objects[p.handle_object]) for p in l.params if p.handle_object is not None]
    return s


def _payload(cap: Capture, chunks: tuple, size: int) -> bytes:
    return cap.read_bytes(list(chunks), size)


def variant_of(cap: Capture, cubin: str | Path | None) -> SequenceVariant | None:
    """None for the captured program; a sequence variant file; or a bare cubin, which
    replaces every module whose launched kernels it defines."""
    if cubin is None:
        return None
    path = Path(cubin)
    seq = cap.sequence
    assert seq is not None
    if is_sequence_variant(path):
        return read_variant(cap.reproducer_dir, path, seq)
    names = kernel_names(open_elf(_read(path, "cubin"), str(path)))
    launched: dict[int, set[str]] = {}
    for l in seq.launches:
        k = seq.kernels[l.kernel]
        launched.setdefault(k.module, set()).add(k.name)
    modules = {m: path for m, kernels in launched.items() if kernels <= names}
    if not modules:
        every = sorted({seq.kernels[l.kernel].demangled or seq.kernels[l.kernel].name for l in seq.launches})
        raise KerncapError(
            f"{path} defines none of the sequence's modules' kernels ({', '.join(every[:6])}"
            f"{', …' if len(every) > 6 else ''})",
            "pass a cubin rebuilt from one of the sequence's kernels (kerncap recompile DIR --kernel K), or a "
            "sequence variant variants/<name>.json")
    return SequenceVariant(path=path, modules=modules)


def build(core, cap: Capture, items: list, cubin: str | Path | None, order: str) -> tuple[Any, SeqProgram]:
    """(the native SeqSpec, what the server keeps of it) for the captured program or a variant."""
    seq = cap.sequence
    assert seq is not None
    if order not in ORDERS:
        raise KerncapError(f"sequence replay order {order!r}", f"use one of: {', '.join(ORDERS)}")
    variant = variant_of(cap, cubin)
    glob = [g for g in items if isinstance(g, Global)]  # the session numbers globals in this order
    spec = core.SeqSpec()
    spec.mode = order
    spec.stream_kinds = [s["kind"] for s in seq.streams]
    spec.blocking = [bool(s["blocking"]) for s in seq.streams]
    spec.events = seq.events
    images: list[bytes] = []  # as read: a std::string member read back from pybind11 is a str (a cubin is not UTF-8)
    modules, fused_module = _module_specs(core, cap, variant, glob, images)
    fuse = variant.fuse if variant else None
    spec.modules = modules
    # A fusion replaces its launches by one, at the place of the last of them: the event
    # waits and records between them still order it; a copy or fill between them stays
    # before it (the skeleton says so: one reading what a replaced launch wrote breaks it).
    step_of = {s.launch: i for i, s in enumerate(seq.steps) if s.op == "launch"}
    replaced = {step_of[i] for i in range(fuse.first, fuse.last + 1)} if fuse else set()
    at = step_of[fuse.last] if fuse else -1
    steps, labels, launch_steps, launch_labels, launch_streams = [], [], [], [], []
    fused_at = None
    # A graph launch recorded with its edges is rebuilt with them in the graph order (a
    # fusion changes the steps: its graph is the serial order's).
    graph_edges = order == "graph" and fuse is None and bool(seq.steps) and all(
        s.graph_deps is not None for s in seq.steps)
    spec.graph_edges = graph_edges
    objects = {o.id: i for i, o in enumerate(cap.texture_objects)}
    for i, st in enumerate(seq.steps):
        if i in replaced and i != at:
            continue
        if i == at:
            fused_at = len(steps)
            ss = _fused_step(core, seq, fuse, fused_module)
        else:
            ss = _step_spec(core, cap, i, st, objects)
        if graph_edges:
            ss.graph_deps = list(st.graph_deps or ())
        if ss.op == "launch":
            launch_steps.append(len(steps))
            launch_labels.append(ss.label.split(": ", 1)[-1])
            launch_streams.append(ss.stream)
        steps.append(ss)
        labels.append(ss.label)
    spec.steps = steps
    digest = hashlib.sha256(order.encode())
    for image in images:
        digest.update(hashlib.sha256(image).digest())
    if variant is not None:
        digest.update(_read(variant.path, "the variant") if variant.path.suffix == ".json" else b"")
    program = SeqProgram(key=digest.hexdigest(), label=str(cubin) if cubin else "captured sequence", variant=variant,
                         steps=labels, launch_steps=launch_steps, launch_labels=launch_labels,
                         launch_streams=launch_streams, excluded=list(fuse.excluded) if fuse else [],
                         fused_at=fused_at, notes=_notes(seq, order, graph_edges, variant))
    return spec, program


def _module_specs(core, cap: Capture, variant, glob: list, images: list[bytes]) -> tuple[list, int | None]:
    """The program's modules (a replaced one's globals found by name in its image) and a
    fusion's fused module (its index), each image appended to `images` as read."""
    seq = cap.sequence
    modules = []
    for m in seq.modules:
        replaced = variant.modules.get(m.id) if variant else None
        image = _read(replaced, "cubin") if replaced else _read(cap.root / m.cubin, "the captured cubin")
        ms = core.SeqModuleSpec()
        ms.image = image
        images.append(image)
        ms.label = str(replaced) if replaced else f"module {m.id} ({m.cubin})"
        mine = [(i, g) for i, g in enumerate(glob) if g.module == m.id]
        names = {g.name: g.name for _, g in mine}
        if replaced and mine:
            available = object_names(image)
            if available is not None:
                mapping = global_names_for([g.name for _, g in mine], available)
                names = {n: mapping.get(n) or "" for n in names}
        gs = []
        for i, g in mine:
            s = core.SeqGlobalSpec()
            s.index, s.name, s.captured, s.size = i, names.get(g.name, g.name), g.name, g.size
            gs.append(s)
        ms.globals = gs
        modules.append(ms)
    fuse = variant.fuse if variant else None
    fused_module = None
    if fuse is not None:
        ms = core.SeqModuleSpec()
        image = _read(fuse.cubin, "the fused kernel's cubin")
        ms.image = image
        images.append(image)
        ms.label = f"fused kernel {fuse.kernel} ({fuse.cubin})"
        ms.globals = []
        fused_module = len(modules)
        modules.append(ms)
    return modules, fused_module


def _fused_step(core, seq, fuse, fused_module: int | None):
    """A fusion's one launch, at the place of the last launch it replaces."""
    ss = core.SeqStepSpec()
    buf, layout = fuse.param_layout()
    ls = core.LaunchSpec()
    ls.kernel_name = fuse.kernel
    ls.grid, ls.block, ls.shared_mem_bytes = list(fuse.grid), list(fuse.block), fuse.shared_mem_bytes
    ls.attributes, ls.cooperative, ls.extra_form, ls.handles = [], False, False, []
    ls.param_buffer, ls.params = buf, layout
    ss.op, ss.module, ss.launch = "launch", fused_module, ls
    ss.stream = seq.launches[fuse.last].stream
    ss.label = f"fused launch {fuse.kernel} (in place of launches {fuse.first}-{fuse.last})"
    return ss


def _step_spec(core, cap: Capture, i: int, st, objects: dict[int, int]):
    """Step `i` of the captured sequence as the native core replays it."""
    seq = cap.sequence
    ss = core.SeqStepSpec()
    ss.op, ss.stream = st.op, st.stream
    ss.label = f"step {i}: " + (seq.launch_label(st.launch) if st.op == "launch" else st.describe())
    if st.op == "launch":
        ss.module = seq.kernels[seq.launches[st.launch].kernel].module
        ss.launch = _launch_spec(core, seq, st.launch, objects)
    elif st.op == "copy":
        ss.kind, ss.dst, ss.src, ss.bytes = st.kind, st.dst, st.src, st.bytes
        if st.kind == "h2d":
            ss.payload = _payload(cap, st.payload, st.bytes)
    elif st.op == "memset":
        ss.dst, ss.value, ss.element = st.dst, st.value, st.element
        ss.width, ss.height, ss.pitch = st.width, st.height, st.pitch
    elif st.op in ("record", "wait"):
        ss.event = st.event
    elif st.op == "sync":
        ss.scope, ss.event = st.scope, st.event
    return ss


def _notes(seq, order: str, graph_edges: bool, variant) -> list[str]:
    """What the program's result says about how it replayed and what it replaced."""
    notes = []
    fuse = variant.fuse if variant else None
    if order == "serial":
        notes.append("replayed serially: every step on one stream, in the order the app enqueued them")
    elif graph_edges:
        kinds = sorted({_edge_kind(d) for st in seq.steps for d in st.graph_deps})
        notes.append("replayed as one CUDA graph with the app graph's edges (" + (", ".join(kinds) or "none") + ")")
    elif order == "graph":
        notes.append("replayed as one CUDA graph captured from the streams order (no launch gaps)")
    if variant is not None:
        for m, path in variant.modules.items():
            notes.append(f"module {m} replaced by {path}")
        if fuse is not None:
            notes.append(f"launches {fuse.first}-{fuse.last} replaced by {fuse.kernel} ({fuse.cubin})")
            notes.extend(f"not compared: {e.describe()}" for e in fuse.excluded)
    return notes


def _edge_kind(dep: tuple) -> str:
    """An edge's kind as the capture's manifest names it (native graph_model edge_kind)."""
    _, kind, from_port, to_port = dep
    if (kind, from_port, to_port) == (0, 0, 0):
        return "default"
    if kind == 1 and to_port == 0 and from_port in (1, 2):
        return "programmatic" if from_port == 1 else "programmatic (launch order)"
    return f"type {kind}, ports {from_port}->{to_port}"


def mask_spans(items: list, excluded: list[ExcludedSpan]) -> list[tuple[int, int, int]]:
    """(item index, offset, length) of each excluded span, cut to the regions it lies in."""
    out = []
    for e in excluded:
        lo, hi = e.address, e.address + e.bytes
        for i, item in enumerate(items):
            if isinstance(item, Region) and item.base < hi and lo < item.end:
                a, b = max(lo, item.base), min(hi, item.end)
                out.append((i, a - item.base, b - a))
    return out


def freed_note(cap: Capture) -> list[str]:
    return [f"region {r.id} ({r.base:#x}) was freed inside the sequence: its final state is not compared"
            for r in cap.regions if r.sequence_state == "freed"]


PARAM_RE = re.compile(r"parameter (\d+) is (\d+) bytes at offset (\d+), the capture has (\d+) bytes at offset (\d+)")
COUNT_RE = re.compile(r"it takes (\d+) parameters, the capture has (\d+)")


def fused_param_error(message: str, variant: SequenceVariant | None) -> str | None:
    """The native layout check's message for the fused kernel, worded by the skeleton's
    parameter names (None when it is not about the fused kernel's parameters)."""
    fuse = variant.fuse if variant else None
    if fuse is None or fuse.kernel not in message:
        return None
    names = [p.name for p in fuse.params]
    m = PARAM_RE.search(message)
    if m:
        i = int(m.group(1))
        name = names[i] if i < len(names) else f"#{i}"
        return (f"the fused kernel {fuse.kernel}'s parameter {i} ({name} in the skeleton) is {m.group(2)} bytes at "
                f"offset {m.group(3)}; the skeleton passes {m.group(4)} bytes at offset {m.group(5)}")
    m = COUNT_RE.search(message)
    if m:
        got, want = int(m.group(1)), int(m.group(2))
        which = (f"it lacks {', '.join(names[got:want])}" if got < want else
                 f"it has {got - want} more than the skeleton's last, {names[-1] if names else '-'}")
        return f"the fused kernel {fuse.kernel} takes {got} parameters, the skeleton passes {want}: {which}"
    return None
