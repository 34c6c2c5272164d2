"""A sequence capture's launches and steps (capture/sequence.json, docs/capture-format.md
"Sequences"): what `Capture.open` reads beside the manifest when the manifest names one.

The manifest holds the regions (their state before the first launch and after the last)
and the module globals of every module the sequence ran (each with its `module`); the
sequence adds, in the order the app enqueued them, every launch (its kernel, module,
configuration, parameter bytes, stream) and every copy, fill, event record and wait and
host synchronization between them. Read as untrusted input: the schema first, then the
cross references (a launch's kernel, a kernel's module, a step's launch, stream and
event), each refusal naming the file and the field.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kerncap.core.schema import check
from kerncap.errors import CaptureFormatError
from kerncap.reproducer.schemas import SEQUENCE_JSON

SEQUENCE_FILE = "sequence.json"
MAX_SEQUENCE_BYTES = 1 << 30  # 1,000 launches of a 1720-byte nvjet parameter block take ~4 MB
DAMAGED = "the sequence capture is damaged or was edited; extract it again"


@dataclass(frozen=True)
class SeqModule:
    id: int
    cubin: str            # relative to the capture directory: cubins/<sha256>.cubin
    sha256: str
    globals: tuple[int, ...]  # indices into the manifest's globals


@dataclass(frozen=True)
class SeqKernel:
    id: int
    module: int
    name: str
    demangled: str


@dataclass(frozen=True)
class SeqLaunch:
    index: int
    kernel: int
    api: str
    stream: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem_bytes: int
    cooperative: bool
    attributes: tuple[tuple[int, str], ...]  # id, hex of the raw value
    extra_form: bool
    params: tuple  # kerncap.reproducer.format.Param
    param_buffer: bytes
    nvtx: str = ""


@dataclass(frozen=True)
class SeqStep:
    op: str               # launch | copy | memset | record | wait | sync
    api: str = ""
    stream: int = -1      # -1: none (a context-wide sync)
    launch: int = -1
    kind: str = ""        # copy: d2d | h2d | d2h
    dst: int = 0
    src: int = 0
    bytes: int = 0
    payload: tuple = ()   # h2d: chunk hashes of the host bytes
    value: int = 0
    element: int = 1
    width: int = 0
    height: int = 1
    pitch: int = 0
    event: int = -1
    scope: str = ""       # sync: context | stream | event
    # A graph launch's step (--sequence graph): the edges into it in the app's graph, each
    # (earlier step, type, from_port, to_port) as CUgraphEdgeData holds them; None in
    # captures made before kerncap recorded them (replayed with the serial order's edges).
    graph_deps: tuple | None = None

    def describe(self, launches: list[SeqLaunch] | None = None, kernels: list[SeqKernel] | None = None) -> str:
        if self.op == "launch":
            if launches is not None and kernels is not None:
                k = kernels[launches[self.launch].kernel]
                return f"launch {self.launch} ({k.demangled or k.name})"
            return f"launch {self.launch}"
        if self.op == "copy":
            return f"{self.kind} copy of {self.bytes} bytes to {self.dst:#x}"
        if self.op == "memset":
            return f"fill of {self.width}x{self.height} {8 * self.element}-bit values at {self.dst:#x}"
        if self.op in ("record", "wait"):
            return f"event {self.event} {self.op}"
        return f"{self.scope} synchronization"


@dataclass(frozen=True)
class PayloadItem:
    """An h2d copy's host bytes: chunks like a region's (blobs, store, pack, verify see it)."""

    step: int
    size: int
    pre: list
    post: list

    @property
    def label(self) -> str:
        return f"sequence step {self.step} (a host-to-device copy's bytes)"


@dataclass
class Sequence:
    root: Path  # the capture directory
    mode: str
    selection: dict[str, Any]
    graph: dict[str, Any] | None
    modules: list[SeqModule]
    kernels: list[SeqKernel]
    launches: list[SeqLaunch]
    streams: list[dict[str, Any]]
    events: int
    steps: list[SeqStep]
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    dropped_waits: int = 0

    def cubin_path(self, module: int) -> Path:
        return self.root / self.modules[module].cubin

    def kernel_of(self, launch: int) -> SeqKernel:
        return self.kernels[self.launches[launch].kernel]

    def launch_label(self, launch: int) -> str:
        k = self.kernel_of(launch)
        return f"launch {launch} ({k.demangled or k.name})"

    @property
    def payload_items(self) -> list[PayloadItem]:
        return [PayloadItem(i, s.bytes, list(s.payload), list(s.payload)) for i, s in enumerate(self.steps)
                if s.op == "copy" and s.kind == "h2d" and s.bytes]

    def summary(self) -> str:
        parts = [f"{len(self.launches)} launches of {len(self.kernels)} kernels"]
        ops = [s.op for s in self.steps]
        for op, word in (("copy", "copies"), ("memset", "fills"), ("wait", "event waits"), ("sync", "host syncs")):
            if ops.count(op):
                parts.append(f"{ops.count(op)} {word}")
        parts.append(f"{len(self.streams)} stream(s)")
        return ", ".join(parts)


def _steps(raw: list[dict]) -> list[SeqStep]:
    return [SeqStep(op=s["op"], api=s.get("api", ""), stream=s.get("stream", -1), launch=s.get("launch", -1),
                    kind=s.get("kind", ""), dst=s.get("dst", 0), src=s.get("src", 0), bytes=s.get("bytes", 0),
                    payload=tuple(s.get("payload", ())), value=s.get("value", 0), element=s.get("element", 1),
                    width=s.get("width", 0), height=s.get("height", 1), pitch=s.get("pitch", 0),
                    event=s.get("event", -1), scope=s.get("scope", ""), graph_deps=_graph_deps(s))
            for s in raw]


def _graph_deps(raw: dict) -> tuple | None:
    deps = raw.get("graph_deps")
    if deps is None:
        return None
    return tuple((int(d["step"]), int(d.get("type", 0)), int(d.get("from_port", 0)), int(d.get("to_port", 0)))
                 for d in deps)


def parse_sequence(root: Path, raw: Any, chunk_count: Callable[[int], int], globals_count: int,
                   param_of: Callable[[dict], Any]) -> Sequence:
    """The sequence of the capture at `root` from its sequence.json's JSON (`raw`), checked:
    `chunk_count(size)` gives the chunks a payload of that size has, `globals_count` the
    manifest's globals, `param_of` reads one parameter (kerncap.reproducer.format)."""
    path = root / SEQUENCE_FILE
    check(raw, SEQUENCE_JSON, path, DAMAGED)

    def bad(where: str, what: str) -> CaptureFormatError:
        return CaptureFormatError(f"{path}: field {where} {what}", DAMAGED)

    modules = [SeqModule(m["id"], m["cubin"], m.get("sha256", ""), tuple(m.get("globals", ()))) for m in raw["modules"]]
    for i, m in enumerate(modules):
        if m.id != i:
            raise bad(f"modules[{i}].id", f"is {m.id}, expected {i}")
        for j, g in enumerate(m.globals):
            if g >= globals_count:
                raise bad(f"modules[{i}].globals[{j}]", f"names global {g}; the manifest has {globals_count}")
    kernels = [SeqKernel(k["id"], k["module"], k["name"], k.get("demangled") or "") for k in raw["kernels"]]
    for i, k in enumerate(kernels):
        if k.id != i:
            raise bad(f"kernels[{i}].id", f"is {k.id}, expected {i}")
        if k.module >= len(modules):
            raise bad(f"kernels[{i}].module", f"names module {k.module}; there are {len(modules)}")
    streams = raw["streams"]
    for i, s in enumerate(streams):
        if s["id"] != i:
            raise bad(f"streams[{i}].id", f"is {s['id']}, expected {i}")
    launches = [_launch(i, l, len(kernels), len(streams), param_of, bad) for i, l in enumerate(raw["launches"])]
    try:
        steps = _steps(raw["steps"])
    except (KeyError, TypeError, ValueError) as exc:
        raise bad("steps", f"is malformed ({exc})") from None
    _check_steps(steps, launches, len(streams), raw["events"], chunk_count, bad)
    return Sequence(root=root, mode=raw["mode"], selection=dict(raw.get("selection") or {}),
                    graph=raw.get("graph"), modules=modules, kernels=kernels, launches=launches, streams=streams,
                    events=raw["events"], steps=steps, notes=list(raw.get("notes", [])),
                    seconds=dict(raw.get("seconds") or {}), dropped_waits=raw.get("dropped_waits", 0))


def _launch(i: int, l: dict, kernels: int, streams: int, param_of: Callable[[dict], Any],
            bad: Callable[[str, str], CaptureFormatError]) -> SeqLaunch:
    """Launch `i` of sequence.json, checked against the `kernels` and `streams` it may name."""
    if l["index"] != i:
        raise bad(f"launches[{i}].index", f"is {l['index']}, expected {i}")
    if l["kernel"] >= kernels:
        raise bad(f"launches[{i}].kernel", f"names kernel {l['kernel']}; there are {kernels}")
    if l["stream_id"] >= streams:
        raise bad(f"launches[{i}].stream_id", f"names stream {l['stream_id']}; there are {streams}")
    try:
        params = tuple(param_of(p) for p in l["params"])
        buffer = bytes.fromhex(l["param_buffer"])
    except (KeyError, TypeError, ValueError) as exc:
        raise bad(f"launches[{i}].params", f"is malformed ({exc})") from None
    for p in params:
        if p.offset + p.size > len(buffer):
            raise bad(f"launches[{i}].params[{p.index}]", f"lies outside the {len(buffer)}-byte parameter buffer")
    grid = tuple(l["grid"]) + (1,) * (3 - len(l["grid"]))
    block = tuple(l["block"]) + (1,) * (3 - len(l["block"]))
    return SeqLaunch(
        index=i, kernel=l["kernel"], api=l.get("launch_api", ""), stream=l["stream_id"], grid=grid, block=block,
        shared_mem_bytes=l.get("shared_mem_bytes", 0), cooperative=bool(l.get("cooperative")),
        attributes=tuple((a["id"], a.get("value", "")) for a in l.get("attributes", [])),
        extra_form=l.get("param_form", "array") == "extra", params=params, param_buffer=buffer,
        nvtx=l.get("nvtx", ""))


def _check_steps(steps: list, launches: list[SeqLaunch], streams: int, events: int, chunk_count: Callable[[int], int],
                 bad: Callable[[str, str], CaptureFormatError]) -> None:
    """Every step names what exists (streams, events, launches, chunks), and the steps run
    each launch once, in order."""
    seen_launches = []
    for i, s in enumerate(steps):
        at = f"steps[{i}]"
        for d in s.graph_deps or ():
            if not 0 <= d[0] < i:
                raise bad(f"{at}.graph_deps", f"names step {d[0]}; a graph edge comes from an earlier step")
        if s.op != "sync" and not 0 <= s.stream < streams:
            raise bad(f"{at}.stream", f"is {s.stream}; there are {streams} streams")
        if s.op == "launch":
            if not 0 <= s.launch < len(launches):
                raise bad(f"{at}.launch", f"names launch {s.launch}; there are {len(launches)}")
            if launches[s.launch].stream != s.stream:
                raise bad(f"{at}.stream", f"is {s.stream}, its launch ran on stream {launches[s.launch].stream}")
            seen_launches.append(s.launch)
        elif s.op in ("record", "wait") or (s.op == "sync" and s.scope == "event"):
            if not 0 <= s.event < events:
                raise bad(f"{at}.event", f"names event {s.event}; there are {events}")
        elif s.op == "sync" and s.scope == "stream" and not 0 <= s.stream < streams:
            raise bad(f"{at}.stream", f"is {s.stream}; there are {streams} streams")
        elif s.op == "copy" and s.kind == "h2d" and len(s.payload) != chunk_count(s.bytes):
            raise bad(f"{at}.payload", f"lists {len(s.payload)} chunks for {s.bytes} bytes")
        elif s.op == "memset" and s.element not in (1, 2, 4):
            raise bad(f"{at}.element", f"is {s.element}; fills are of 1, 2 or 4 bytes")
        elif s.op == "copy" and not s.kind:
            raise bad(f"{at}.kind", "is missing")
    if seen_launches != list(range(len(launches))):
        raise bad("steps", f"run the launches in the order {seen_launches[:8]}…; expected each launch once, in order")


def is_sequence(path: str | Path) -> bool:
    """Whether `path` (a reproducer or its capture/) holds a sequence capture (a cheap look)."""
    p = Path(path)
    return (p / "capture" / SEQUENCE_FILE).is_file() or (p / SEQUENCE_FILE).is_file()
