"""`kerncap dump`: captured items as .npy files numpy loads with their dtype and shape.

States: `pre` and `post` (the captured pre- and post-state, read from the payloads: no
GPU), `output` (what a variant — or the captured cubin — leaves in the item when it runs
on the captured input or on perturbation K of seed S: needs the replay server) and
`expected` (what `validate` compares `output` with: the captured post-state on the
captured input, the captured kernel's output on a perturbed one). Every file holds the
item's bytes exactly as validate compared them; `<item>.json` beside them says the
dtype, the shape, where a tensor lies in the item (offset and strides) and how kerncap
knew. Files stream through np.lib.format.open_memmap (never the whole item in memory),
are written under temporary names and renamed when complete; a dump bigger than the
free space is refused before anything is written, and a variant that faults leaves no
file behind.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from kerncap.core import dtypes as dt
from kerncap.core.confined import real_dir
from kerncap.core.fsio import fs_error, make_dirs, remove_quietly, write_atomic
from kerncap.core.units import human_bytes
from kerncap.errors import KerncapError, UsageError
from kerncap.replay import perturb as pt
from kerncap.replay.differential import is_fault
from kerncap.replay import tensor_view as tv
from kerncap.reproducer.format import Capture

STATES = ("pre", "post", "output", "expected")
GPU_STATES = ("output",)
HEADER_ROOM = 4096  # bytes per file beyond the data (npy header), for the free-space check
SIDECAR_FORMAT = "kerncap-dump"


@dataclass
class DumpedArray:
    path: str
    item: str            # "region 3"
    state: str
    dtype: str           # numpy's name ("float32", "uint16" for bfloat16 bits, "uint8" for raw bytes)
    kerncap_dtype: str | None
    shape: list[int]
    bytes: int


@dataclass
class DumpResult:
    directory: str
    arrays: list[DumpedArray] = field(default_factory=list)
    sidecars: list[str] = field(default_factory=list)
    input: str = "captured input"
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Target:
    item: tv.Item
    layout: tv.Layout
    argument: str | None


def plan(capture: Capture, items: Sequence[str] = (), *, dtype: str | None = None,
         shape: tuple[int, ...] | None = None) -> list[Target]:
    """What a dump of `items` (names as tensor_view.select_items takes them) writes."""
    picked = tv.select_items(capture, list(items))
    if shape is not None and len(picked) > 1:
        raise UsageError(f"--shape applies to one item; {len(picked)} are selected",
                         "name the item: kerncap dump DIR REGION --shape …")
    return [Target(i, tv.item_layout(capture, i, argument=a, dtype=dtype, shape=shape), a) for i, a in picked]


def array_shape(t: Target) -> tuple[np.dtype, tuple[int, ...], list[str]]:
    """The numpy dtype and shape of a file of the whole item: the tensor's shape when it
    covers the item exactly, else 1-D; raw bytes when elements do not fill the item."""
    lay, size = t.layout, t.item.size
    if lay.dtype is None or size % lay.itemsize:
        note = [] if lay.dtype is None else [f"{t.item.name} is {size} bytes, not a whole number of {lay.dtype} "
                                             "elements: written as raw bytes"]
        return np.dtype(np.uint8), (size,), note
    n = size // lay.itemsize
    contiguous = all(lay.strides[i] == math.prod(lay.shape[i + 1:]) for i in range(len(lay.shape)))
    if lay.offset == 0 and contiguous and math.prod(lay.shape) == n:
        return dt.numpy_dtype(lay.dtype), tuple(lay.shape), []
    return dt.numpy_dtype(lay.dtype), (n,), [f"{t.item.name}: the tensor ({tv.describe(lay)}) does not cover the whole "
                                             "item; the file holds every element of the item, the sidecar says "
                                             "where the tensor lies"]


def check_space(directory: Path, need: int) -> None:
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError as exc:
        raise fs_error(exc, f"check the free space for {directory}") from None
    if need > free:
        raise KerncapError(f"the dump needs {human_bytes(need)} in {directory}; its file system has "
                           f"{human_bytes(free)} free",
                           "dump fewer items (kerncap dump DIR REGION …), or give --output on a larger disk")


def default_output(capture: Capture, cubin: str | Path | None, perturbation: int | None) -> Path:
    name = "captured" if cubin is None else Path(cubin).stem
    if perturbation is not None:
        name += f"-p{perturbation}"
    return capture.reproducer_dir / "dumps" / name


def item_layouts(reproducer: str | os.PathLike | Capture, items: Sequence[str] = (), *, dtype: str | None = None,
                 shape: Sequence[int] | None = None) -> list[tuple[tv.Item, tv.Layout, tv.View]]:
    """What kerncap knows of each item's layout (items: "3", "region:3", "arg:1",
    "global:NAME"; none: every written one): its dtype, tensor shape and strides (Triton
    tensor metadata, the C++ parameter type, or `dtype`/`shape`) and its 2-D view. A
    shape that does not divide the item raises UsageError naming both."""
    cap = reproducer if isinstance(reproducer, Capture) else Capture.open(reproducer)
    chosen = plan(cap, items, dtype=dtype, shape=tuple(shape) if shape is not None else None)
    return [(t.item, t.layout, tv.view_of(t.layout, t.item)) for t in chosen]


def dump(reproducer: str | Path, items: Sequence[str] = (), states: Sequence[str] = ("pre", "post"), *,
         cubin: str | Path | None = None, perturbation: int | None = None, seed: int = 0,
         dtype: str | None = None, shape: tuple[int, ...] | None = None, output: str | Path | None = None,
         client=None, device: int = 0) -> DumpResult:
    """Write the `states` of `items` as .npy files (+ a JSON sidecar per item) into
    `output`. `output`/`expected` of a variant `cubin` need the GPU: an open ReplayClient
    (`client`) or a fresh one on `device`."""
    bad = [s for s in states if s not in STATES]
    if bad or not states:
        raise UsageError(f"unknown state {bad[0] if bad else '(none)'}", f"states: {', '.join(STATES)}")
    capture = Capture.open(reproducer)
    targets = plan(capture, items, dtype=dtype, shape=shape)
    out = Path(output) if output is not None else default_output(capture, cubin, perturbation)
    need = sum(t.item.size + HEADER_ROOM for t in targets for _ in states)
    check_space(out, need)
    if output is None:  # inside the reproducer: never through a link out of it (dumps/ from someone else)
        real_dir(capture.reproducer_dir, out.relative_to(capture.reproducer_dir), create=True)
    make_dirs(out, f"create the dump directory {out}")
    fills, input_label = None, "captured input"
    if perturbation is not None:
        if perturbation < 1:
            raise UsageError(f"--perturbation {perturbation}: they count from 1, as validate reports them",
                             "e.g. --perturbation 3 --seed 0")
        plan_ = pt.plan(capture, (), None)
        if not plan_.perturbed:
            raise KerncapError(f"{capture.root}: no region can be perturbed", "dump the captured input instead")
        fills = plan_.fills(seed, perturbation - 1)
        input_label = f"perturbation {perturbation} ({pt.MODES[(perturbation - 1) % 2]}, seed {seed})"
    result = DumpResult(str(out), input=input_label)
    gpu = [s for s in states if s in GPU_STATES or (s == "expected" and fills is not None)]
    if gpu:
        from kerncap.replay.client import ReplayClient

        own = client is None
        client = client or ReplayClient(capture.reproducer_dir, device=device)
        try:
            _dump_all(capture, targets, states, out, result, client, cubin, fills, input_label)
        finally:
            if own:
                client.close()
    else:
        _dump_all(capture, targets, states, out, result, None, cubin, fills, input_label)
    return result


def _dump_all(capture, targets, states, out, result, client, cubin, fills, input_label) -> None:
    for t in targets:
        npdt, shp, notes = array_shape(t)
        result.notes += notes
        files = {}
        for state in states:
            path = out / f"{t.item.key}.{state}.npy"
            _write(capture, t, state, path, npdt, shp, client, cubin, fills, input_label)
            files[state] = path.name
            result.arrays.append(DumpedArray(str(path), t.item.name, state, npdt.name, t.layout.dtype, list(shp),
                                             t.item.size))
        side = out / f"{t.item.key}.json"
        write_atomic(side, json.dumps(sidecar(capture, t, files, npdt, shp, cubin, input_label, notes), indent=1) + "\n",
                     what=f"write {side}")
        result.sidecars.append(str(side))


def sidecar(capture: Capture, t: Target, files: dict[str, str], npdt: np.dtype, shp: tuple[int, ...],
            cubin, input_label: str, notes: list[str]) -> dict[str, Any]:
    lay = t.layout
    return {
        "format": SIDECAR_FORMAT, "format_version": 1, "reproducer": str(capture.reproducer_dir),
        "kernel": capture.kernel.get("name"), "item": t.item.name, "kind": t.item.kind, "region": t.item.id,
        "base": t.item.base, "size": t.item.size, "written_by_kernel": t.item.written, "argument": t.argument,
        "files": files, "numpy": {"dtype": npdt.str, "shape": list(shp)},
        "dtype": lay.dtype, "raw_bytes": lay.dtype is None,
        "bfloat16_bits": lay.dtype == "bfloat16",
        "tensor": {"offset_bytes": lay.offset, "shape": list(lay.shape),
                   "strides_elements": list(lay.strides), "strides_bytes": [s * lay.itemsize for s in lay.strides]},
        "layout_source": lay.source, "output_of": str(cubin) if cubin else "captured cubin", "input": input_label,
        "notes": list(lay.notes) + notes,
    }


def _write(capture, t: Target, state: str, path: Path, npdt, shp, client, cubin, fills, input_label) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        arr = np.lib.format.open_memmap(tmp, mode="w+", dtype=npdt, shape=shp)
        flat = arr.reshape(-1).view(np.uint8)
        gpu = state == "output" or (state == "expected" and fills is not None)
        if not gpu:
            _from_capture(capture, t.item, state, flat)
            arr.flush()
            del flat, arr
        else:
            arr.flush()
            del flat, arr
            _from_replay(client, t.item, state, tmp, cubin, fills, input_label)
        os.replace(tmp, path)
    except OSError as exc:
        remove_quietly(tmp)
        raise fs_error(exc, f"write {path}") from None
    except BaseException:
        remove_quietly(tmp)
        raise


def _from_capture(capture: Capture, item: tv.Item, state: str, flat: np.ndarray) -> None:
    """pre, post, or expected on the captured input (post where written, else pre), a
    verified chunk at a time."""
    chunks = item.pre if state == "pre" or (state == "expected" and item.pre == item.post) else item.post
    for i, h in enumerate(chunks):
        n = capture.chunk_length(item.size, i)
        at = i * capture.chunk_size
        if h is None:
            flat[at:at + n] = 0
        else:
            flat[at:at + n] = np.frombuffer(capture.read_chunk(h, n), np.uint8)


def data_offset(path: Path) -> int:
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        read(f)
        return f.tell()


def _from_replay(client, item: tv.Item, state: str, path: Path, cubin, fills, input_label) -> None:
    against = "captured" if fills is None else "baseline"
    try:
        client.request("dump", item=item.index, which="actual" if state == "output" else "expected",
                       path=str(path.resolve()), data_offset=data_offset(path), cubin=_abs(cubin), fills=fills,
                       against=against, input=input_label)
    except KerncapError as exc:
        if is_fault(exc):  # the launch faulted (other CUDA errors are not the kernel's)
            who = cubin or "the captured cubin"
            raise KerncapError(f"{who} faulted on the {input_label}, so its output of {item.name} is not dumped: "
                               f"{exc.message}", "check its indexing with `kerncap validate --sanitize`") from None
        raise


def _abs(cubin) -> str | None:
    return None if cubin is None else str(Path(cubin).resolve())


def format_result(r: DumpResult) -> str:
    """The text `kerncap dump` prints."""
    lines = [f"dumped {len(r.arrays)} array{'s' if len(r.arrays) != 1 else ''} into {r.directory} ({r.input})"]
    for a in r.arrays:
        what = f"{a.kerncap_dtype}" if a.kerncap_dtype else "raw bytes"
        if a.kerncap_dtype == "bfloat16":
            what = "bfloat16 bits as uint16"
        lines.append(f"  {Path(a.path).name:<28} {a.item:<12} {a.state:<9} {what}[{'×'.join(map(str, a.shape))}] "
                     f"{human_bytes(a.bytes)}")
    lines += [f"note: {n}" for n in dict.fromkeys(r.notes)]
    lines.append("load: numpy.load(path, mmap_mode='r'); the .json beside each item says its layout")
    return "\n".join(lines)
