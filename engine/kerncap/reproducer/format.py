"""Reading a capture directory (docs/capture-format.md).

`Capture.open(path)` accepts a reproducer directory (holding `capture/`) or the
capture directory itself, checks completeness and the format version, and gives typed
access to the manifest. Payload bytes are read through `Capture.read_chunk`, which
verifies size and hash: a corrupt blob is an error, never replayed.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import xxhash

from kerncap.core.schema import check
from kerncap.errors import CaptureFormatError, UsageError
from kerncap.reproducer import arrays as arrays_mod
from kerncap.reproducer.arrays import CudaArray, MipmappedArray, TextureObject
from kerncap.reproducer.schemas import MANIFEST, MAX_REGIONS
from kerncap.reproducer.sequence import DAMAGED, MAX_SEQUENCE_BYTES, SEQUENCE_FILE, Sequence, parse_sequence
from kerncap.reproducer.store import store_of

FORMAT_NAME = "kerncap-capture"
FORMAT_VERSION = 1
MAX_MANIFEST_BYTES = 256 << 20  # 200k regions take ~40 MB; schemas.MAX_REGIONS (1M) about 200 MB
MAX_MANIFEST_OBJECTS = 4 * MAX_REGIONS  # JSON objects ('{'), counted before anything is parsed


def read_json(path: Path, limit: int, missing_hint: str, damaged_hint: str, *, max_objects: int | None = None) -> Any:
    """The JSON of a regular file of at most `limit` bytes; a FIFO, a device or a
    huge file is refused before it is read (a read of /dev/zero never ends), and with
    `max_objects` one holding more '{' than that before it is parsed (parsing costs
    seconds and gigabytes that the schema's bounds then refuse)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise CaptureFormatError(f"{path} is missing", missing_hint) from None
    except OSError as exc:
        raise CaptureFormatError(f"cannot read {path} ({exc.strerror})", "check its permissions") from None
    if not stat.S_ISREG(st.st_mode):
        raise CaptureFormatError(f"{path} is not a regular file", damaged_hint)
    if st.st_size > limit:
        raise CaptureFormatError(f"{path} is {st.st_size} bytes, more than the {limit} a real one can be", damaged_hint)
    try:
        raw = path.read_bytes()
        if max_objects is not None and raw.count(b"{") > max_objects:
            raise CaptureFormatError(f"{path} holds more than {max_objects} JSON objects, more than a real one can "
                                     "(regions are bounded by the schema)", damaged_hint)
        return json.loads(raw)
    except OSError as exc:
        raise CaptureFormatError(f"cannot read {path} ({exc.strerror})", "check its permissions") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise CaptureFormatError(f"{path} is not valid JSON ({exc})", damaged_hint) from None


def cubin_problem(path: Path, *, read: bool = False) -> str | None:
    """None when `path` is a regular file (that can be read, with `read`); else what it is:
    "is missing", "is not a regular file", "cannot be read (…)". A FIFO never blocks."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC) if read else None
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    try:
        st = os.fstat(fd) if fd is not None else os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return "is not a regular file"
        if fd is not None:
            os.read(fd, 1)
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    finally:
        if fd is not None:
            os.close(fd)
    return None


@dataclass(frozen=True)
class Region:
    id: int
    base: int
    size: int
    api: str
    kind: str
    written: bool
    zero_fraction: float
    pre: list[str | None]
    post: list[str | None]
    sequence_state: str | None = None  # a sequence's region "allocated" or "freed" inside its window
    # (allocation, offset): the physical allocation (cuMemCreate handle, numbered per
    # capture) mapped here that is mapped at another region too, and this region's offset
    # into it (docs/capture-format.md, "Aliased mappings"); None for every other region.
    physical: tuple[int, int] | None = None

    @property
    def end(self) -> int:
        return self.base + self.size

    def contains(self, address: int) -> bool:
        return self.base <= address < self.end


@dataclass(frozen=True)
class HostRegion:
    """A pinned or registered host allocation. Snapshotted ones (pre/post set) replay at
    `base` in the replay process, registered so the device sees them at `device_pointer`
    (docs/replay.md, "Host memory"); others were recorded only (`why_not` says why, or the
    capture predates host snapshots)."""

    id: int
    base: int
    size: int
    api: str
    flags: int
    device_pointer: int | None
    written: bool
    zero_fraction: float
    pre: list[str | None] | None
    post: list[str | None] | None
    why_not: str = ""

    @property
    def end(self) -> int:
        return self.base + self.size

    @property
    def snapshotted(self) -> bool:
        return self.pre is not None and self.post is not None

    def contains(self, address: int) -> bool:
        """Whether the device address `address` (as a kernel sees it) lies in this region."""
        start = self.base if self.device_pointer is None else self.device_pointer
        return start <= address < start + self.size


# What an older kerncap's capture says of a host region it did not snapshot.
NOT_SNAPSHOTTED_OLD = "captured by a kerncap that recorded host memory without snapshotting it"


@dataclass(frozen=True)
class Global:
    name: str
    section: str
    size: int
    address: int
    written: bool
    pre: list[str | None]
    post: list[str | None]
    module: int | None = None  # a sequence's module holding it (sequence.json modules[])


@dataclass(frozen=True)
class Param:
    index: int
    offset: int
    size: int
    value: bytes
    region: int | None = None
    region_offset: int | None = None
    handle_object: int | None = None  # the texture/surface object whose handle it holds
    handle_match: str | None = None   # "signature" | "value": how kerncap knew


def param_of(p: dict[str, Any]) -> Param:
    """One manifest (or sequence launch) parameter."""
    return Param(
        index=p["index"], offset=p["offset"], size=p["size"], value=bytes.fromhex(p["value"]),
        region=(p.get("pointer") or {}).get("region"), region_offset=(p.get("pointer") or {}).get("offset"),
        handle_object=(p.get("handle") or {}).get("object"), handle_match=(p.get("handle") or {}).get("match"),
    )


def reproducer_dir(path: str | Path) -> Path:
    """The reproducer directory of `path`: a reproducer itself, or the reproducer holding
    the capture/ directory `path` names (absolute; a capture/ that is a link to another
    reproducer's belongs to the one holding the link)."""
    p = Path(os.path.abspath(path))
    return p.parent.resolve() if p.name == "capture" and (p / "manifest.json").is_file() else p.resolve()


@dataclass
class Capture:
    root: Path  # the capture directory (holding manifest.json)
    manifest: dict[str, Any]
    regions: list[Region] = field(default_factory=list)
    globals: list[Global] = field(default_factory=list)
    params: list[Param] = field(default_factory=list)
    arrays: list[CudaArray] = field(default_factory=list)
    mipmapped_arrays: list[MipmappedArray] = field(default_factory=list)
    texture_objects: list[TextureObject] = field(default_factory=list)
    host_regions: list[HostRegion] = field(default_factory=list)
    sequence: Sequence | None = None  # a sequence capture's launches and steps (sequence.json)

    @property
    def reproducer_dir(self) -> Path:
        """The reproducer directory (the capture directory itself for a bare capture)."""
        return reproducer_dir(self.root)

    # -- opening -----------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path) -> "Capture":
        """The capture of a reproducer directory (or of a capture directory itself), checked
        against the capture format; payloads are read and verified on demand."""
        path = Path(path)
        if (path / "capture").is_dir() and not (path / "manifest.json").exists():
            path = path / "capture"
        if (path / "set.json").is_file() and not (path / "manifest.json").exists():  # (reproducer.sets.SET_FILE)
            raise UsageError(f"{path} is a reproducer set: this works on one reproducer",
                             f"pass one member, e.g. {path / 'members' / '0'}")
        if not path.exists():
            raise CaptureFormatError(f"no capture at {path}", "check the path; `kerncap extract` writes one")
        if (path / "INCOMPLETE").exists():
            raise CaptureFormatError(
                f"capture {path} did not finish (INCOMPLETE marker present)",
                "the capturing process was interrupted; run `kerncap extract` again",
            )
        mpath = path / "manifest.json"
        manifest = read_json(mpath, MAX_MANIFEST_BYTES, "not a kerncap capture, or the capture did not finish",
                             "the capture is corrupt; extract again", max_objects=MAX_MANIFEST_OBJECTS)
        cap = cls(root=path, manifest=manifest)
        cap._check_header()
        check(manifest, MANIFEST, mpath, "the capture is damaged or was not written by kerncap; extract again")
        cap._parse()
        if manifest.get("sequence"):
            raw = read_json(path / SEQUENCE_FILE, MAX_SEQUENCE_BYTES,
                            "the manifest names a sequence but sequence.json is missing; extract again", DAMAGED,
                            max_objects=16 * (1 << 20))
            cap.sequence = parse_sequence(path, raw, cap.chunk_count, len(cap.globals), param_of)
            for i, g in enumerate(cap.globals):
                if g.module is None or g.module >= len(cap.sequence.modules):
                    raise CaptureFormatError(f"{mpath}: field globals[{i}].module names no module of the sequence",
                                             "the sequence capture is damaged or was edited; extract it again")
        return cap

    def _check_header(self) -> None:
        m = self.manifest
        where = self.root / "manifest.json"
        if not isinstance(m, dict) or m.get("format") != FORMAT_NAME:
            raise CaptureFormatError(f"{where} is not a kerncap capture manifest")
        version = m.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise CaptureFormatError(
                f"{where} has format version {version}; this kerncap reads version {FORMAT_VERSION}",
                "upgrade kerncap to read captures made by a newer version",
            )
        if not m.get("complete"):
            raise CaptureFormatError(f"{where} is marked incomplete", "extract again")

    def _parse(self) -> None:
        m = self.manifest
        try:
            self.regions = [
                Region(
                    id=r["id"], base=r["base"], size=r["size"], api=r.get("api", "?"), kind=r.get("kind", "device"),
                    written=bool(r.get("written")), zero_fraction=float(r.get("zero_fraction", 0.0)),
                    pre=list(r["pre"]), post=list(r["post"]), sequence_state=r.get("sequence_state"),
                    physical=(r["physical"]["allocation"], r["physical"]["offset"]) if r.get("physical") else None,
                )
                for r in m.get("regions", [])
            ]
            self.globals = [
                Global(
                    name=g["name"], section=g.get("section", ""), size=g["size"], address=g.get("address", 0),
                    written=bool(g.get("written")), pre=list(g["pre"]), post=list(g["post"]), module=g.get("module"),
                )
                for g in m.get("globals", [])
            ]
            self.host_regions = [
                HostRegion(
                    id=h.get("id", i), base=h["base"], size=h["size"], api=h.get("api", "?"),
                    flags=h.get("flags", 0), device_pointer=h.get("device_pointer"),
                    written=bool(h.get("written")), zero_fraction=float(h.get("zero_fraction", 0.0)),
                    pre=list(h["pre"]) if "pre" in h else None, post=list(h["post"]) if "post" in h else None,
                    why_not=h.get("why_not") or ("" if "pre" in h else NOT_SNAPSHOTTED_OLD),
                )
                for i, h in enumerate(m.get("host_regions", []))
            ]
            self.params = [param_of(p) for p in m.get("params", [])]
            self.arrays, self.mipmapped_arrays, self.texture_objects = arrays_mod.parse(m)
        except (KeyError, TypeError, ValueError) as exc:
            raise CaptureFormatError(
                f"{self.root / 'manifest.json'} is malformed ({type(exc).__name__}: {exc})", "extract again"
            ) from None
        self._check_layout()

    def _check_layout(self) -> None:
        """What the schema cannot say: chunk counts fit the sizes, region ids are unique,
        regions do not overlap (replay restores each at its base)."""
        where = self.root / "manifest.json"
        for kind, items in (("regions", self.regions), ("globals", self.globals), ("host_regions", self.host_regions)):
            for i, r in enumerate(items):
                n = self.chunk_count(r.size)
                if kind == "host_regions" and (r.pre is None) != (r.post is None):
                    raise CaptureFormatError(f"{where}: field host_regions[{i}] lists only one of pre/post",
                                             "the capture is damaged; extract again")
                if kind == "host_regions" and r.pre is None:
                    continue  # recorded only
                if len(r.pre) != n or len(r.post) != n:
                    raise CaptureFormatError(
                        f"{where}: field {kind}[{i}].pre/post list {len(r.pre)}/{len(r.post)} chunks, expected {n} "
                        f"for {r.size} bytes", "the capture is damaged; extract again")
        if len({r.id for r in self.regions}) != len(self.regions):
            raise CaptureFormatError(f"{where}: field regions lists a region id twice", "the capture is damaged; extract again")
        end = 0
        for r in sorted(self.regions, key=lambda r: r.base):
            if r.base < end or r.end > 1 << 64:
                raise CaptureFormatError(f"{where}: field regions: region {r.id} at {r.base:#x} overlaps another "
                                         "or runs past the 64-bit address space", "the capture is damaged; extract again")
            end = r.end
        arrays_mod.check_layout(where, self.chunk_count, self.arrays, self.mipmapped_arrays, self.texture_objects,
                                {r.id: r for r in self.regions}, self.params)
        if len({h.id for h in self.host_regions}) != len(self.host_regions):
            raise CaptureFormatError(f"{where}: field host_regions lists a host region id twice",
                                     "the capture is damaged; extract again")
        # Replay maps snapshotted host regions at their addresses: they must not overlap
        # each other or a device region (a damaged manifest must not map over anything).
        spans = sorted([(r.base, r.end, f"region {r.id}") for r in self.regions]
                       + [(h.base, h.end, f"host region {h.id}") for h in self.host_regions if h.snapshotted])
        for (a0, a1, a), (b0, _, b) in zip(spans, spans[1:]):
            if b0 < a1:
                raise CaptureFormatError(f"{where}: field host_regions: {b} at {b0:#x} overlaps {a}",
                                         "the capture is damaged; extract again")
        if any(h.end > 1 << 64 for h in self.host_regions):
            raise CaptureFormatError(f"{where}: field host_regions: a host region runs past the 64-bit address space",
                                     "the capture is damaged; extract again")

    # -- accessors -----------------------------------------------------------------
    @property
    def chunk_size(self) -> int:
        return int(self.manifest["chunk_size"])

    @property
    def kernel(self) -> dict[str, Any]:
        return self.manifest["kernel"]

    @property
    def launch(self) -> dict[str, Any]:
        return self.manifest["launch"]

    @property
    def provenance(self) -> dict[str, Any]:
        return self.manifest.get("provenance", {})

    @property
    def warnings(self) -> list[str]:
        return list(self.manifest.get("warnings", []))

    @property
    def payload_items(self) -> list:
        """Everything with pre/post chunks: regions, module globals, captured CUDA arrays,
        snapshotted host regions (the replay's item order), then a sequence's host-to-device
        payloads (carried by store and pack, never replay items)."""
        seq = self.sequence.payload_items if self.sequence is not None else []
        return [*self.regions, *self.globals, *(a for a in self.arrays if a.captured), *self.snapshotted_host_regions,
                *seq]

    @property
    def param_buffer(self) -> bytes:
        return bytes.fromhex(self.manifest.get("param_buffer", ""))

    @property
    def cubin_path(self) -> Path:
        return self.root / self.kernel["module"]["cubin"]

    def chunk_count(self, size: int) -> int:
        return (size + self.chunk_size - 1) // self.chunk_size

    def chunk_length(self, size: int, index: int) -> int:
        return min(self.chunk_size, size - index * self.chunk_size)

    def region_of(self, address: int) -> Region | None:
        for r in self.regions:
            if r.contains(address):
                return r
        return None

    def host_region_of(self, address: int) -> HostRegion | None:
        """The host region a kernel reaches at device address `address`."""
        for h in self.host_regions:
            if h.contains(address):
                return h
        return None

    @property
    def snapshotted_host_regions(self) -> list[HostRegion]:
        return [h for h in self.host_regions if h.snapshotted]

    @property
    def closure(self) -> dict[str, Any]:
        """manifest.closure: parameter words that point at nothing the capture holds
        (empty for captures made before kerncap checked)."""
        return self.manifest.get("closure") or {}

    def blob_path(self, h: str) -> Path:
        return self.root / "blobs" / f"{h}.bin"

    def read_chunk(self, h: str | None, length: int) -> bytes:
        """The bytes of one chunk, verified; `None` is an elided zero chunk."""
        if h is None:
            return bytes(length)
        path = self.blob_path(h)
        try:  # opened, not looked at first: a blob removed meanwhile (`kerncap store`) is in the store
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            store = store_of(self.root)  # payloads moved to the workspace store (`kerncap store`)
            if store is not None:
                return store.get(h, length)  # verified there
            raise CaptureFormatError(f"payload {path} is missing", "the capture is incomplete; extract again") from None
        except OSError as exc:
            raise CaptureFormatError(f"cannot read payload {path} ({exc.strerror})", "check its permissions") from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise CaptureFormatError(f"payload {path} is not a regular file", "extract again")
            if st.st_size != length:  # checked before reading: a damaged size never costs a huge read
                raise CaptureFormatError(
                    f"payload {path} holds {st.st_size} bytes, expected {length} (truncated?)", "extract again"
                )
            try:
                data = f.read(length + 1)
            except OSError as exc:
                raise CaptureFormatError(f"cannot read payload {path} ({exc.strerror})", "check its permissions") from None
        if len(data) != length:
            raise CaptureFormatError(f"payload {path} changed while being read", "extract again")
        if xxhash.xxh64_hexdigest(data) != h:
            raise CaptureFormatError(f"payload {path} does not match its hash (corrupt)", "extract again")
        return data

    def read_bytes(self, chunks: list[str | None], size: int) -> bytes:
        return b"".join(self.read_chunk(h, self.chunk_length(size, i)) for i, h in enumerate(chunks))

    def iter_blobs(self) -> Iterator[str]:
        seen: set[str] = set()
        for item in self.payload_items:
            for h in [*item.pre, *item.post]:
                if h is not None and h not in seen:
                    seen.add(h)
                    yield h

    def verify(self) -> None:
        """Check every payload (size and hash) and the cubin's presence."""
        for item in self.payload_items:
            for state, chunks in (("pre", item.pre), ("post", item.post)):
                for i, h in enumerate(chunks):
                    try:
                        self.read_chunk(h, self.chunk_length(item.size, i))
                    except CaptureFormatError as exc:
                        raise CaptureFormatError(f"{exc.message} ({item_label(item)} {state}-state chunk {i})",
                                                 exc.hint) from None
        cubins = [self.cubin_path] + ([self.root / m.cubin for m in self.sequence.modules] if self.sequence else [])
        for cubin in cubins:
            problem = cubin_problem(cubin, read=True)
            if problem:
                raise CaptureFormatError(f"cubin {cubin} {problem}", "extract again")

    @property
    def logical_bytes(self) -> int:
        return sum(r.size for r in self.regions)

    @property
    def stored_bytes(self) -> int:
        """Bytes of the blob files present (one removed while counting counts 0)."""
        total = 0
        for h in self.iter_blobs():
            try:
                total += self.blob_path(h).stat().st_size
            except OSError:
                pass
        return total


def item_label(item) -> str:
    """"region 3", "host region 0", "global scale", "array 0": how messages (and the
    native core) name a payload's owner."""
    if isinstance(item, HostRegion):
        return f"host region {item.id}"
    if isinstance(item, Region):
        return f"region {item.id}"
    return f"global {item.name}" if isinstance(item, Global) else item.label


def capture_chunks(cap: Capture) -> Iterator[tuple[str, int]]:
    """(hash, length) of every distinct stored chunk of a capture: regions, globals, arrays, host regions."""
    seen: set[str] = set()
    for item in cap.payload_items:
        for chunks in (item.pre, item.post):
            for i, h in enumerate(chunks):
                if h is not None and h not in seen:
                    seen.add(h)
                    yield h, cap.chunk_length(item.size, i)
