"""Variants of a sequence (docs/sequences.md): `variants/<name>.json`, format
kerncap-sequence-variant. A variant replaces whole modules of the sequence by cubins
rebuilt from source (`modules`: module id -> cubin) and/or one contiguous range of
launches by one new kernel (`fuse`: its cubin, kernel, launch configuration, parameter
values, and the spans a comparison leaves out because only the replaced launches used
them). Read as untrusted input: the schema, then every path stays inside the reproducer.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kerncap.core.fsio import write_atomic
from kerncap.core.schema import check
from kerncap.errors import CaptureFormatError, KerncapError
from kerncap.reproducer.format import read_json
from kerncap.reproducer.schemas import SEQUENCE_VARIANT_JSON
from kerncap.reproducer.sequence import Sequence

FORMAT = "kerncap-sequence-variant"
DAMAGED = "write the variant again (kerncap fuse / kerncap recompile), or pass a .cubin"


@dataclass(frozen=True)
class FusedParam:
    name: str
    size: int
    value: bytes
    kind: str = "scalar"  # buffer | scalar


@dataclass(frozen=True)
class ExcludedSpan:
    name: str
    address: int
    bytes: int
    why: str     # inferred | declared
    detail: str = ""

    def describe(self) -> str:
        return f"{self.name} [{self.address:#x}, +{self.bytes} B) ({self.why}{': ' + self.detail if self.detail else ''})"


@dataclass(frozen=True)
class Fusion:
    first: int  # launch indices of the sequence, inclusive
    last: int
    cubin: Path
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem_bytes: int
    params: tuple[FusedParam, ...]
    excluded: tuple[ExcludedSpan, ...] = ()
    name: str = ""

    def param_layout(self) -> tuple[bytes, list[tuple[int, int]]]:
        """The packed parameter buffer and (offset, size) of each parameter: natural
        alignment (min(size, 8)), as nvcc lays out pointers and scalars."""
        buf = bytearray()
        layout = []
        for p in self.params:
            align = min(8, 1 << (p.size - 1).bit_length()) if p.size else 1
            buf += bytes(-len(buf) % align)
            layout.append((len(buf), p.size))
            buf += p.value[: p.size].ljust(p.size, b"\0")
        return bytes(buf), layout


@dataclass
class SequenceVariant:
    path: Path
    modules: dict[int, Path] = field(default_factory=dict)
    fuse: Fusion | None = None
    note: str = ""

    @property
    def label(self) -> str:
        return str(self.path)


def _inside(root: Path, rel: str, path: Path, where: str) -> Path:
    target = (root / rel).resolve()
    if not target.is_relative_to(root.resolve()):
        raise CaptureFormatError(f"{path}: field {where} leads out of the reproducer ({rel!r})", DAMAGED)
    return target


def read_variant(root: Path, path: Path, sequence: Sequence) -> SequenceVariant:
    """The variant at `path` of the sequence reproducer `root`, checked against `sequence`."""
    raw = read_json(path, 64 << 20, f"no sequence variant at {path}", DAMAGED)
    check(raw, SEQUENCE_VARIANT_JSON, path, DAMAGED)
    out = SequenceVariant(path=path, note=raw.get("note", ""))
    for key, rel in (raw.get("modules") or {}).items():
        if not key.isdigit() or int(key) >= len(sequence.modules):
            raise CaptureFormatError(f"{path}: field modules.{key} names no module of the sequence "
                                     f"(it has {len(sequence.modules)})", DAMAGED)
        out.modules[int(key)] = _inside(root, rel, path, f"modules.{key}")
    f = raw.get("fuse")
    if f:
        if not f["first"] <= f["last"] < len(sequence.launches):
            raise CaptureFormatError(f"{path}: field fuse.first/last ({f['first']}-{f['last']}) is no range of the "
                                     f"sequence's {len(sequence.launches)} launches", DAMAGED)
        grid = tuple(f["grid"]) + (1,) * (3 - len(f["grid"]))
        block = tuple(f["block"]) + (1,) * (3 - len(f["block"]))
        params = []
        for i, p in enumerate(f["params"]):
            value = bytes.fromhex(p["value"])
            if len(value) != p["size"]:
                raise CaptureFormatError(f"{path}: field fuse.params[{i}].value holds {len(value)} bytes, its size "
                                         f"is {p['size']}", DAMAGED)
            params.append(FusedParam(p["name"], p["size"], value, p.get("kind", "scalar")))
        out.fuse = Fusion(
            first=f["first"], last=f["last"], cubin=_inside(root, f["cubin"], path, "fuse.cubin"), kernel=f["kernel"],
            grid=grid, block=block, shared_mem_bytes=f.get("shared_mem_bytes", 0), params=tuple(params),
            excluded=tuple(ExcludedSpan(e["name"], e["address"], e["bytes"], e["why"], e.get("detail", ""))
                           for e in f.get("excluded", [])),
            name=f.get("name", ""))
    if not out.modules and out.fuse is None:
        raise CaptureFormatError(f"{path}: the variant changes nothing (no modules, no fuse)", DAMAGED)
    return out


def is_sequence_variant(path: str | Path) -> bool:
    p = Path(path)
    if p.suffix != ".json" or not p.is_file():
        return False
    try:
        with open(p, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return FORMAT.encode() in head


def write_variant(root: Path, name: str, *, modules: dict[int, str] | None = None,
                  fuse: dict[str, Any] | None = None, note: str = "") -> Path:
    """Writes variants/<name>.json (paths relative to the reproducer) and returns its path."""
    if not name or "/" in name or name.startswith(".") or len(name) > 128:
        raise KerncapError(f"variant name {name!r} is not a plain file name", "pass a name such as fuse-1")
    doc: dict[str, Any] = {"format": FORMAT, "format_version": 1, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if note:
        doc["note"] = note
    if modules:
        doc["modules"] = {str(k): v for k, v in modules.items()}
    if fuse:
        doc["fuse"] = fuse
    path = root / "variants" / f"{name}.json"
    os.makedirs(path.parent, exist_ok=True)
    write_atomic(path, json.dumps(doc, indent=1) + "\n")
    return path
