"""The replay server's side of a capture: opens it, drives the native replay core
(`kerncap._replay`) and turns its outputs into result objects.

Imported only inside the replay server process: constructing a NativeSession
reserves the captured virtual addresses, which must happen before anything else in
the process allocates GPU memory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import statistics
import time
from pathlib import Path
from typing import Any

from kerncap.core import dtypes as dt
from kerncap.core import native
from kerncap.errors import CaptureFormatError, KerncapError
from kerncap.recompile.devcompile.module_id import compiler_constant, global_names_for, object_names
from kerncap.replay.cubin import describe_arch_mismatch
from kerncap.replay.devices import arch_refusal
from kerncap.replay import host_memory, sparse
from kerncap.replay.plan import AddressPlan, MiB, SpanConflict, padding, shared_maps
from kerncap.replay import sequence_replay
from kerncap.replay.region_types import known_dtypes, triton_region_dtypes
from kerncap.replay.launch_check import LaunchCheck
from kerncap.replay.results import (
    RegionCheck,
    ReplayResult,
    ValidationResult,
    first_mismatches,
)
from kerncap.reproducer.arrays import CudaArray, replayed_arrays
from kerncap.reproducer.closure_report import cause_text
from kerncap.reproducer.format import Capture, Global, HostRegion, Region, item_label
from kerncap.reproducer.info import lacks

log = logging.getLogger("kerncap.replay.server")

# CUresult codes a module load returns for an image this GPU cannot run.
ARCH_LOAD_ERRORS = {200, 209, 218, 222}  # INVALID_IMAGE, NO_BINARY_FOR_GPU, INVALID_PTX, UNSUPPORTED_PTX_VERSION
COOPERATIVE_APIS = ("cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz")
# Cubins kept loaded at once (the captured one and recent variants).
MAX_PROGRAMS = 8



_NOT_RESTORED = re.compile(r"module global (\S+) is not defined by (.+?): nothing in it can reach the global")


def fold_constant_notes(notes: list[str]) -> list[str]:
    """The core's "module global X is not defined by V …" for each of the compiler's own
    constants (`$str`, `__unnamed_N`: never restored into a variant, module_id.compiler_constant)
    as one note: a ggml module has up to 18 of them."""
    kept, folded, label = [], [], ""
    for n in notes:
        m = _NOT_RESTORED.match(n)
        if m and compiler_constant(m.group(1)):
            folded.append(m.group(1))
            label = m.group(2)
        else:
            kept.append(n)
    if folded:
        shown = ", ".join(folded[:3]) + (f" and {len(folded) - 3} more" if len(folded) > 3 else "")
        kept.append(f"{label} keeps its own compiler constants ({shown}: string literals and unnamed "
                    "constants, numbered per build), not the captured module's")
    return kept

class NativeSession:
    def __init__(self, capture_dir: str | Path, device: int = 0, reader_threads: int = 4,
                 sequence_order: str = "streams"):
        t0 = time.perf_counter()
        self.capture = cap = Capture.open(capture_dir)
        if cap.manifest.get("sequence_member"):
            raise CaptureFormatError(
                f"{cap.reproducer_dir} is a kernel entry of a sequence (its first launch, with no memory): it is "
                "rebuilt, not replayed alone", f"replay the sequence: {cap.reproducer_dir.parent.parent}")
        self._tensor_dtypes: dict[int, str] | None = None
        # A sequence capture replays as one program (kerncap.replay.sequence_replay).
        self.sequence_order = sequence_order
        self._seq: dict[str, sequence_replay.SeqProgram] = {}   # native key -> program
        self._seq_keys: dict[tuple, str] = {}                   # (cubin, its stat) -> native key
        for cubin in [cap.cubin_path] + ([cap.root / m.cubin for m in cap.sequence.modules] if cap.sequence else []):
            if not cubin.is_file():
                raise CaptureFormatError(f"cubin {cubin} is missing", "the capture is incomplete; extract again")
        self.core = native.replay_module()
        self._open_device(device)
        self._map_memory()
        self._array_index = self._load_arrays()  # after map: objects over linear memory need it mapped
        # The replay's item order (Capture.payload_items): regions, globals, arrays, host regions.
        # An alias of another region's physical memory is restored and compared as that region.
        aliases = self.plan.aliases
        self.items = ([r for r in cap.regions if r.size > 0 and r.id not in aliases]
                      + [g for g in cap.globals if g.size > 0]
                      + [a for a in cap.arrays if a.id in self._array_index] + self.host_items)
        self.captured_key: str | None = None
        self.session.load_state(str(cap.root / "blobs"), cap.chunk_size, [self._item_spec(i) for i in self.items],
                                reader_threads)
        # Mapped bytes outside every region (a region's last page): zeroed before every launch.
        device_items = [(r.base, r.size) for r in cap.regions] + \
            [(h.device_pointer or h.base, h.size) for h in cap.host_regions if h.id in self.device_backed]
        self.gaps = padding(self.plan.maps, device_items)
        self.session.set_gaps(self.gaps)
        self.captured_gap_bytes: int | None = None  # what the captured kernel leaves there (op_reference)
        # program key -> (label, function attributes), least recently used first
        self._programs: dict[str, tuple[str, dict[str, int]]] = {}
        self.current_key: str | None = None
        self.kernel_attributes: dict[str, int] = {}
        self.load(None)
        self.captured_key = self.current_key
        self.open_seconds = time.perf_counter() - t0
        log.info("opened %s: %d spans (%d MiB reserved), %d MiB mapped, state resident in %.2f s",
                 cap.root, len(self.plan.spans), self.plan.reserved_bytes >> 20, self.plan.mapped_bytes >> 20,
                 self.open_seconds)

    def _open_device(self, device: int) -> None:
        """The address plan, with the captured host memory placed first (before CUDA starts in
        this process: host_memory.py), then the CUDA session on `device` and its granularity;
        which ranges lie among device spans is decided with 2 MiB pages."""
        cap = self.capture
        live = sparse.sparse_regions(cap.regions, cap.chunk_size, sparse.min_bytes_from_env())
        try:
            _, self.host_ranges, backed = host_memory.plan_replay(cap, 2 * MiB, live=live)
            host_memory.place(self.host_ranges)
            self.session = self.core.Session(device)  # cuInit + primary context, nothing allocated yet
            self.cc: tuple[int, int] = tuple(self.session.compute_capability())
            self.device = {"ordinal": self.session.ordinal(), "name": self.session.device_name(),
                           "uuid": self.session.device_uuid(), "cc": list(self.cc)}
            refusal = arch_refusal(cap.provenance.get("gpu") or {}, self.device)
            if refusal:
                raise self.core.ReplayError(refusal, "device")
            self.plan: AddressPlan
            self.plan, placed, backed = host_memory.plan_replay(cap, self.session.granularity(), live=live,
                                                                backed=backed)
        except SpanConflict as exc:
            raise KerncapError(f"{cap.root}: the captured host memory and device memory cannot both be restored "
                               f"at their addresses: {exc}",
                               "the driver needs 32 MiB-aligned, 64 MiB spans for device memory; this capture's "
                               "host memory sits too close to it to replay") from None
        if [r.index for r in placed] != [r.index for r in self.host_ranges]:  # only with a granularity > 2 MiB
            raise KerncapError(f"{cap.root}: with this GPU's {self.session.granularity() >> 20} MiB allocation "
                               "granularity a device span covers captured host memory already mapped",
                               "replay on a GPU with a 2 MiB granularity (the H200's)")
        # Host regions among device regions: device memory at their device addresses (plan.py).
        self.device_backed = {h for r in host_memory.plan_host_ranges(cap.host_regions) if r.index in backed
                              for h in r.regions}
        if self.device_backed:
            log.warning("host region(s) %s restored in device memory at their addresses: they lie among device "
                        "regions, inside the driver's 32 MiB spans (same bytes; the kernel reaches them over HBM, "
                        "not the bus)", ", ".join(str(h) for h in sorted(self.device_backed)))

    def _map_memory(self) -> None:
        """Reserve the plan's spans, map its allocations (shared, zero-backed) and register the
        captured host memory: nothing of the state is loaded yet."""
        cap = self.capture
        self._check_fits()
        self.session.reserve([self._span_spec(s) for s in self.plan.spans])  # first, before any allocation
        self.session.map(self.plan.maps)
        if self.plan.shared:  # one physical allocation at several addresses, as the app mapped it
            self.session.map_shared([(m.size, list(m.bases)) for m in self.plan.shared])
        if self.plan.zero_maps:
            self.session.map_zero(self.plan.zero_maps, max(sparse.ZERO_CHUNK, self.plan.granularity))
            log.info("sparse replay: %s", "; ".join(sparse.describe(self.plan.segments,
                                                                    {r.id: r.size for r in cap.regions})))
        self.host_items = [h for h in cap.snapshotted_host_regions if h.size > 0]
        if self.host_ranges:
            self.session.register_host([self._host_range_spec(r) for r in self.host_ranges],
                                       [self._host_spec(h) for h in self.host_items if h.id not in self.device_backed])

    def _check_fits(self) -> None:
        """Refuse, before anything is reserved, a capture whose mapped memory exceeds the GPU's."""
        memory = getattr(self.session, "memory", None)
        if memory is None:
            return
        free, total = memory()
        need = self.plan.mapped_bytes + (sparse.ZERO_CHUNK if self.plan.zero_maps else 0)
        if need > free:
            where = f"the GPU has {total >> 20} MiB" if need > total else f"only {free >> 20} MiB of its {total >> 20} MiB are free"
            raise KerncapError(
                f"{self.capture.root} needs {need >> 20} MiB of device memory at its captured addresses; {where}",
                "replay on a GPU with more memory, free the GPU, or prune the reproducer (`kerncap prune`)"
                if need <= total else "a manifest claiming more memory than any GPU has is damaged or was not "
                "written by kerncap; `kerncap prune` shrinks a real one to what the kernel reaches")

    # -- specs for the native core ---------------------------------------------------------
    def _span_spec(self, span):
        s = self.core.SpanSpec()
        s.label, s.base, s.size = span.label, span.base, span.size
        return s

    def _item_spec(self, item):
        s = self.core.ItemSpec()
        s.label = item_label(item)
        s.global_name = item.name if isinstance(item, Global) else ""
        s.base = item.base if isinstance(item, Region) else 0
        if isinstance(item, HostRegion):
            s.base, s.host = item.device_pointer, item.id not in self.device_backed
        elif isinstance(item, Region) and item.id in self.plan.segments:
            s.sparse, s.segments = True, list(self.plan.segments[item.id])
        s.size = item.size
        s.pre, s.post = list(item.pre), list(item.post)
        if isinstance(item, CudaArray):
            s.array = self._array_index[item.id]
        return s

    # -- CUDA arrays and texture/surface objects (docs/replay.md) ----------------------------
    def _load_arrays(self) -> dict[int, int]:
        """Recreates the capture's arrays and objects; array id -> its index in the native
        core. Only captured arrays exist in the replay (an object over another one is
        not recreated: the capture said why)."""
        cap = self.capture
        if not cap.arrays and not cap.texture_objects:
            return {}
        arrays, mipmaps = replayed_arrays(cap.arrays, cap.mipmapped_arrays)
        mipmap_index = {m.id: i for i, m in enumerate(mipmaps)}
        array_index = {a.id: i for i, a in enumerate(arrays)}

        def desc(x):
            d = self.core.ArrayDescSpec()
            d.format, d.channels, d.flags = x.format, x.channels, x.flags
            d.width, d.height, d.depth = x.width, x.height, x.depth
            return d

        mspecs = []
        for m in mipmaps:
            s = self.core.MipmapSpec()
            s.label, s.desc, s.levels = f"mipmapped array {m.id}", desc(m), m.levels
            mspecs.append(s)
        aspecs = []
        for a in arrays:
            s = self.core.ArraySpec()
            s.label, s.desc = f"array {a.id} ({a.dims})", desc(a)
            s.mipmap, s.level = (mipmap_index[a.mipmap], a.level) if a.mipmap is not None else (-1, 0)
            aspecs.append(s)
        ospecs = [self._object_spec(o, array_index, mipmap_index) for o in cap.texture_objects]
        self.session.load_arrays(mspecs, aspecs, ospecs)
        return array_index

    def _object_spec(self, o, array_index: dict[int, int], mipmap_index: dict[int, int]):
        s = self.core.ObjectSpec()
        s.label, s.surface = o.label, o.kind == "surface"
        r = o.resource
        kind = r.get("type")
        s.resource = kind if o.restorable else "none"
        s.why = o.why
        if o.restorable and kind == "array" and r.get("array") not in array_index:
            s.resource, s.why = "none", f"its array {r.get('array')} was not captured"
        if o.restorable and kind == "mipmapped_array" and r.get("mipmapped_array") not in mipmap_index:
            s.resource, s.why = "none", f"its mipmapped array {r.get('mipmapped_array')} was not captured"
        if s.resource == "none":
            return s
        s.array = array_index.get(r.get("array"), -1)
        s.mipmap = mipmap_index.get(r.get("mipmapped_array"), -1)
        s.address, s.size = r.get("address", 0), r.get("size", 0)
        s.width, s.height, s.pitch = r.get("width", 0), r.get("height", 0), r.get("pitch", 0)
        s.format, s.channels, s.resource_flags = r.get("format", 0), r.get("channels", 1), r.get("flags", 0)
        t = o.texture
        if t:
            s.address_mode, s.filter_mode, s.flags = list(t["address_mode"]), t["filter_mode"], t["flags"]
            s.max_anisotropy, s.mipmap_filter_mode = t["max_anisotropy"], t["mipmap_filter_mode"]
            s.mipmap_level_bias = _f32(t["mipmap_level_bias"])
            s.min_mipmap_level_clamp = _f32(t["min_mipmap_level_clamp"])
            s.max_mipmap_level_clamp = _f32(t["max_mipmap_level_clamp"])
            s.border_color = [_f32(v) for v in t["border_color"]]
        v = o.view
        if v:
            s.has_view, s.view_format = True, v["format"]
            s.view_width, s.view_height, s.view_depth = v["width"], v["height"], v["depth"]
            s.first_mipmap_level, s.last_mipmap_level = v["first_mipmap_level"], v["last_mipmap_level"]
            s.first_layer, s.last_layer = v["first_layer"], v["last_layer"]
        return s

    def _host_range_spec(self, r):
        s = self.core.SpanSpec()
        s.label, s.base, s.size = r.label, r.base, r.size
        return s

    def _host_spec(self, h: HostRegion):
        s = self.core.HostSpec()
        s.label, s.base, s.size, s.device_pointer = f"host region {h.id}", h.base, h.size, h.device_pointer
        return s

    def fault_context(self) -> str:
        """What the capture says about a fault or a mismatch of the selected program: the
        likely causes from the manifest for the captured cubin (closure_report), the
        read-only zero backing of sparse regions for any program."""
        text = cause_text(self.capture) if self.current_key == self.captured_key else ""
        if self.plan.zero_maps:
            ids = ", ".join(str(r) for r in sorted(self.plan.segments))
            who = ("the captured kernel wrote over never-changed zeros (a write that changes nothing is not seen "
                   "at capture): replay with KERNCAP_SPARSE=0 on a GPU with the memory"
                   if self.current_key == self.captured_key else
                   "the variant writes outside what the captured kernel wrote")
            text += (f" Region(s) {ids} replay sparsely: their never-written zeros are mapped read-only, and a "
                     f"write there faults; if that is what happened, {who}.")
        return text

    def _launch_spec(self, overrides: dict[str, Any] | None = None):
        """The captured launch; `overrides` (a variant's .launch.json: grid, block,
        shared_mem_bytes) replace what a recompile with another config changed."""
        cap, kernel = self.capture, self.capture.kernel
        launch = {**cap.launch, **{k: v for k, v in (overrides or {}).items()
                                   if k in ("grid", "block", "shared_mem_bytes")}}
        s = self.core.LaunchSpec()
        try:
            s.kernel_name = kernel["name"]
            s.grid, s.block = list(launch["grid"]), list(launch["block"])
            s.shared_mem_bytes = int(launch.get("shared_mem_bytes", 0))
            s.attributes = [(int(a["id"]), bytes.fromhex(a["value"])) for a in launch.get("attributes", [])]
            s.cooperative = bool(launch.get("cooperative")) or kernel.get("launch_api") in COOPERATIVE_APIS
            s.extra_form = launch.get("param_form", "array") == "extra"
            s.param_buffer = cap.param_buffer
            s.params = [(p.offset, p.size) for p in cap.params]
            objects = {o.id: i for i, o in enumerate(cap.texture_objects)}
            s.handles = [(p.offset, objects[p.handle_object]) for p in cap.params if p.handle_object is not None]
        except (KeyError, TypeError, ValueError) as exc:
            raise CaptureFormatError(
                f"{cap.root / 'manifest.json'}: launch description is malformed ({type(exc).__name__}: {exc})",
                "extract again",
            ) from None
        return s

    # -- module ----------------------------------------------------------------------------------
    def load(self, cubin: str | Path | None) -> dict[str, int]:
        """Loads the captured cubin (None) or a variant, unless those bytes (with that
        launch) are loaded already, and selects it. Up to MAX_PROGRAMS stay loaded, so
        that comparisons switch between them without reloading."""
        self.select(self.program_key(cubin))
        return self.kernel_attributes

    def program_key(self, cubin: str | Path | None) -> str:
        """Loads (if needed) and returns the key of the captured cubin or a variant."""
        if self.capture.sequence is not None:
            return self._sequence_key(cubin)
        path = Path(cubin) if cubin else self.capture.cubin_path
        label = str(path) if cubin else f"captured cubin {path}"
        try:
            image = path.read_bytes()
        except OSError as exc:
            raise KerncapError(f"cannot read cubin {path}: {exc.strerror}", "check the --cubin path") from None
        overrides = self._variant_launch(path) if cubin else None
        key = hashlib.sha256(image + json.dumps(overrides, sort_keys=True).encode()).hexdigest()
        if key in self._programs:
            self._programs[key] = self._programs.pop(key)  # most recently used last
            return key
        names = self._variant_global_names(image) if cubin else None
        try:
            attrs = dict(self.session.load_program(key, self._launch_spec(overrides), image, label, names or []))
        except self.core.CudaError as exc:
            message, code = exc.args
            if code in ARCH_LOAD_ERRORS:
                raise self.core.ReplayError(
                    f"{message}. {describe_arch_mismatch(path if cubin else None, image, self.cc)}", "arch"
                ) from None
            raise
        self._programs[key] = (label, attrs)
        while len(self._programs) > MAX_PROGRAMS:
            oldest = next(k for k in self._programs if k != key)
            del self._programs[oldest]
            self.session.drop_program(oldest)
            if oldest == self.current_key:
                self.current_key = None
        return key

    # -- sequences -----------------------------------------------------------------------------
    def _sequence_key(self, cubin: str | Path | None) -> str:
        """The key of the captured sequence program (None) or a variant (a sequence variant
        file, or a cubin replacing the modules whose kernels it defines), loaded once."""
        try:
            st = Path(cubin).stat() if cubin else None
        except OSError as exc:
            raise KerncapError(f"cannot read {cubin}: {exc.strerror}", "check the --cubin path") from None
        cache = (str(cubin), st.st_mtime_ns if st else 0, st.st_size if st else 0)
        key = self._seq_keys.get(cache)
        if key in self._programs:
            self._programs[key] = self._programs.pop(key)
            return key
        spec, program = sequence_replay.build(self.core, self.capture, self.items, cubin, self.sequence_order)
        key = program.key
        if key not in self._programs:
            try:
                attrs = dict(self.session.load_sequence(key, spec, program.label))
            except self.core.ReplayError as exc:
                message, kind = exc.args
                better = sequence_replay.fused_param_error(message, program.variant)
                if better:
                    raise KerncapError(better, "make the fused kernel's parameters those of its skeleton "
                                               "(fusions/<name>/fused.cu), in that order") from None
                raise
            self._programs[key] = (program.label, attrs)
            while len(self._programs) > MAX_PROGRAMS:
                oldest = next(k for k in self._programs if k != key)
                del self._programs[oldest]
                self._seq.pop(oldest, None)
                self.session.drop_program(oldest)
                if oldest == self.current_key:
                    self.current_key = None
        self._seq[key] = program
        self._seq_keys[cache] = key
        return key

    def sequence_program(self, cubin: str | Path | None) -> "sequence_replay.SeqProgram":
        """Loads and selects the captured sequence program (None) or a variant of it."""
        if self.capture.sequence is None:
            raise KerncapError(f"{self.capture.root} is not a sequence capture", "pass a reproducer made with --sequence")
        key = self._sequence_key(cubin)
        self.select(key)
        return self._seq[key]

    def excluded_spans(self) -> list[tuple[int, int, int]]:
        """The selected program's masked spans (a fusion's intermediates), as the native core takes them."""
        program = self._seq.get(self.current_key or "")
        return sequence_replay.mask_spans(self.items, program.excluded) if program else []

    def not_compared(self) -> list[str]:
        """What the selected program leaves out of the comparison (a fusion's intermediates), each named."""
        program = self._seq.get(self.current_key or "")
        return [e.describe() for e in program.excluded] if program else []

    def after_run(self, against: str) -> None:
        """After the selected program ran and before its state is compared: mask what a
        fused variant legitimately leaves unwritten."""
        spans = self.excluded_spans()
        if spans:
            self.session.mask(spans, against)

    def select(self, key: str) -> None:
        if key != self.current_key:
            self.session.select_program(key)
            self.current_key = key
        self.kernel_attributes = self._programs[key][1]

    def _variant_global_names(self, image: bytes) -> list[str] | None:
        """Each captured module global's name in a variant ("" when the variant does not
        define it), or None when they are the captured names. Internal-linkage globals
        (thrust/CUB/libcu++) embed a per-TU module id that a variant built from another
        copy of the file may not share (kerncap.recompile.devcompile.module_id)."""
        captured = [g.name for g in self.items if isinstance(g, Global)]
        available = object_names(image) if captured else None
        if available is None:
            return None
        mapping = global_names_for(captured, available)
        names = [mapping[n] or "" for n in captured]
        return None if names == captured else names

    @staticmethod
    def _variant_launch(path: Path) -> dict[str, Any] | None:
        """A Triton recompile with another num_warps/num_stages writes <stem>.launch.json
        beside the cubin: the block size and shared memory that variant needs."""
        spec = path.with_suffix(".launch.json")
        if not spec.is_file():
            return None
        try:
            return json.loads(spec.read_text())
        except (OSError, ValueError) as exc:
            raise KerncapError(f"cannot read {spec}: {exc}", "recompile the variant again") from None

    # -- requests --------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return {
            "capture": str(self.capture.root),
            "kernel": self.capture.kernel.get("name"),
            "gpu": {"name": self.session.device_name(), "cc": list(self.cc)},
            "device": self.device,
            "spans": [{"index": s.index, "base": s.base, "size": s.size, "regions": list(s.regions)} for s in self.plan.spans],
            "maps": [list(m) for m in self.plan.maps],
            "zero_maps": [list(m) for m in self.plan.zero_maps],
            "sparse": {str(k): [list(x) for x in v] for k, v in self.plan.segments.items()},
            "shared": [{"size": m.size, "bases": list(m.bases), "regions": list(m.regions)} for m in self.plan.shared],
            "host_ranges": [{"index": r.index, "base": r.base, "size": r.size, "host_regions": list(r.regions)}
                            for r in self.host_ranges],
            "device_backed_host_regions": sorted(self.device_backed),
            "granularity": self.plan.granularity,
            "open_seconds": self.open_seconds,
            "kernel_attributes": self.kernel_attributes,
            "notes": self.notes(),
            "sequence": self._sequence_info(),
        }

    def _sequence_info(self) -> dict[str, Any] | None:
        seq = self.capture.sequence
        if seq is None:
            return None
        return {"launches": len(seq.launches), "steps": len(seq.steps), "streams": len(seq.streams),
                "order": self.sequence_order, "mode": seq.mode}

    def notes(self) -> list[str]:
        """The native core's notes, and what an older capture does not hold."""
        out = fold_constant_notes(list(self.session.notes()))
        out += [f"this capture lacks {what}" for what in lacks(self.capture)]
        out += [m.note for m in self.plan.shared]
        out += shared_maps(self.capture.regions, self.plan.granularity)[1]
        if self.device_backed:
            out.append(f"host region(s) {', '.join(str(h) for h in sorted(self.device_backed))} replayed in device "
                       "memory at their addresses (they lie among device regions): same bytes, HBM instead of the "
                       "bus, so their accesses time faster than in the app")
        if self.capture.sequence is not None:
            program = self._seq.get(self.current_key or "")
            out += (program.notes if program else []) + sequence_replay.freed_note(self.capture)
        return out

    def replay(self, cubin: str | None, iterations: int, warmup: int, flush_l2: bool, check: bool = True,
               warm_l2: bool = False, timer: str = "events") -> ReplayResult:
        """`check` False only for bench/check_cost.py (the unchecked baseline of the check's
        cost; the result then says the launches were not checked). `timer` "kernel": the
        times are CUPTI's records of each launch's kernels; the events around the same
        launches are kept beside them (ReplayResult.event_median_ms)."""
        if iterations < 1 or warmup < 0:
            raise KerncapError(f"--iterations must be >= 1 and --warmup >= 0 (got {iterations}, {warmup})")
        self.load(cubin)
        self.configure_check(check)
        kernel = timer == "kernel"
        times = list(self.session.time(iterations, warmup, flush_l2, warm_l2, **({"kernel_timer": True} if kernel
                                                                                 else {})))
        result = ReplayResult.from_times(times, warmup=warmup, flush_l2=flush_l2, cubin=cubin, notes=self.notes(),
                                         warm_l2=warm_l2)
        if kernel:
            result.timer = timer
            result.event_median_ms = statistics.median(float(t) for t in self.session.last_events_ms())
        result.check = LaunchCheck.from_rounds([self.session.last_check()], 1).to_dict()
        result.device = self.device
        return result

    def configure_check(self, on: bool = True) -> None:
        self.session.set_check(on, self.check_specs())

    def check_specs(self) -> list:
        """How the selected program's timed launches are checked (launch_check.py): byte-exact,
        element-wise within the tolerance class of a region the captured kernel itself varies
        in (determinism.json, written by validation), not at all where that cannot be judged
        (a varying region of unknown dtype) or where a fused variant legitimately leaves
        memory unwritten (its intermediates)."""
        from kerncap.replay.differential import load_record

        record = load_record(self.capture.reproducer_dir) or {}
        varying = {int(r["region"]): r for r in record.get("regions", [])}
        excluded = {index for index, _offset, _length in self.excluded_spans()}
        specs = []
        for i, item in enumerate(self.items):
            spec = self.core.CompareSpec()
            spec.dtype, spec.atol, spec.rtol = "", 0.0, 0.0
            spread = varying.get(item.id) if isinstance(item, Region) else None
            if i in excluded or (spread is not None and not spread.get("dtype")):
                spec.dtype = "none"
            elif spread is not None:
                spec.dtype, spec.atol, spec.rtol = spread["dtype"], float(spread.get("atol") or 0.0), 0.0
            specs.append(spec)
        return specs

    def validate(self, cubin: str | None, atol: float | None, rtol: float | None, dtype: str | None,
                 dtypes: dict[int, str] | None) -> ValidationResult:
        self.load(cubin)
        tolerance = atol is not None or rtol is not None or dtype is not None
        a, r = float(atol or 0.0), float(rtol or 0.0)
        notes = self.notes()
        region_dtypes = self.region_dtypes(dtype, dtypes or {}, notes) if tolerance else {}
        specs = []
        for item in self.items:
            spec = self.core.CompareSpec()
            spec.dtype = region_dtypes.get(item.id, "") if isinstance(item, Region) else ""
            if isinstance(item, CudaArray) and tolerance:
                spec.dtype = item.dtype or ""  # the array's format; byte-exact where kerncap has no dtype for it
            spec.atol, spec.rtol = a, r
            specs.append(spec)
        if self.capture.sequence is not None:  # masked spans go between the run and the compare
            self.session.restore()
            self.session.run()
            self.after_run("captured")
            outs = self.session.compare(specs, "captured")
        else:
            outs = self.session.validate(specs)
        checks = [self._check(item, spec.dtype or None, out, a, r) for item, spec, out in zip(self.items, specs, outs)]
        return ValidationResult(
            passed=all(c.passed for c in checks), mode="tolerance" if tolerance else "exact", regions=checks,
            atol=a if tolerance else None, rtol=r if tolerance else None, cubin=cubin, notes=notes,
            device=self.device,
        )

    def region_dtypes(self, default: str | None, explicit: dict[int, str], notes: list[str]) -> dict[int, str]:
        """Per region: the caller's choice, else what kerncap knows of it
        (region_types.known_dtypes), else `default`, else float32."""
        hints = known_dtypes(self.capture, self._triton_dtypes(), notes)
        fallback = dt.normalize(default) if default else "float32"
        out = {}
        for item in self.items:
            if isinstance(item, Region):
                chosen = explicit.get(item.id) or explicit.get(str(item.id))
                out[item.id] = dt.normalize(chosen) if chosen else hints.get(item.id, fallback)
        return out

    def _triton_dtypes(self) -> dict[int, str]:
        """Region dtypes from a Triton reproducer's tensor arguments, computed once."""
        if self._tensor_dtypes is None:
            self._tensor_dtypes = triton_region_dtypes(self.capture)
        return self._tensor_dtypes

    def _check(self, item, dtype: str | None, out: dict, atol: float, rtol: float) -> RegionCheck:
        is_region, is_array = isinstance(item, Region), isinstance(item, CudaArray)
        is_host = isinstance(item, HostRegion)
        check = RegionCheck(
            kind="region" if is_region else "array" if is_array else "host" if is_host else "global",
            id=item.id if is_region or is_array or is_host else None,
            name=(f"region {item.id}" if is_region else f"array {item.id} ({item.dims})" if is_array
                  else f"host region {item.id}" if is_host else item.name),
            base=item.base if is_region or is_host else 0 if is_array else item.address,
            size=item.size,
            dtype=dtype,
            mismatched_bytes=out["mismatched_bytes"],
            mismatched_elements=out["mismatched_elements"] if dtype else None,
            max_abs_err=out["max_abs"] if dtype else None,
            max_rel_err=out["max_rel"] if dtype else None,
            first_mismatches=first_mismatches(out["window_offset"], out["expected"], out["actual"], dtype, atol, rtol),
            unexpected_write=False,
        )
        check.unexpected_write = not item.written and not check.passed
        if is_region and item.sequence_state == "freed":
            check.excluded = "freed inside the sequence: its final state cannot be compared"
        return check


def _f32(v) -> float:
    """A float field of a texture descriptor (numbers, or "nan" / "inf" / "-inf")."""
    return float(v)
