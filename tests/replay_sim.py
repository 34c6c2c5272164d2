"""A numpy stand-in for the native replay core (kerncap._replay), for CPU tests of what
sits above it: NativeSession, the server's operations (session_ops), the client's
orchestration (differential) and the CLI, run in-process on real committed captures.

It restores captured payloads into host buffers at the captured addresses, and "runs"
a kernel by calling a Python function chosen by the cubin's file name (`KERNELS`); the
compare and fill primitives follow the GPU kernels' definitions (fill: perturb's numpy
reference, which the GPU suite checks against the real fill bit for bit). The GPU suite
runs the real core on the same paths (tests/gpu/test_trust_gpu.py).
"""

from __future__ import annotations

import io
import json
import math
import sys
import types
from pathlib import Path
from typing import Callable

import numpy as np

from kerncap.core import native
from kerncap.core import dtypes as dt
from kerncap.replay.perturb import decode, reference_fill
from kerncap.replay import protocol
from kerncap.replay.client import ReplayClient


class CudaError(RuntimeError):
    pass


class ReplayError(RuntimeError):
    pass


class Spec(types.SimpleNamespace):
    pass


# cubin file name -> kernel(memory, session) ; "captured" for the captured cubin.
KERNELS: dict[str, Callable] = {}


class Memory:
    """Region id -> bytearray view of the replay memory, plus the kernel's scalar params."""

    def __init__(self, session: "SimSession"):
        self.s = session

    def f32(self, rid: int) -> np.ndarray:
        return np.frombuffer(self.s.target[self.s.index[rid]], dtype=np.float32)


class SimSession:
    def __init__(self, device):
        self.device = device
        self.items = []
        self.pre, self.post, self.target, self.ref = [], [], [], []
        self.refs: dict[int, list] = {}  # reference slots other than 0 (slot 0 is self.ref)
        self.programs: dict[str, tuple[str, object]] = {}
        self.current = None
        self.runs = 0
        self.index: dict[int, int] = {}
        # What the real core's check after every timed launch needs (session.cpp).
        self.time_inputs: list[list] = [[]]
        self.check_on, self.check_specs, self._last_check = True, [], []
        # A program's own module globals, modelled as a dict its kernel may keep state in:
        # the real core restores them to their load-time bytes before every launch.
        self.own: dict = {}

    def granularity(self):
        return 2 << 20

    def compute_capability(self):
        return (9, 0)

    def device_name(self):
        return "Simulated H200"

    def pci_bus_id(self):
        return "0000:00:00.0"

    def device_uuid(self):
        return "GPU-00000000-0000-0000-0000-00000000000%d" % self.device

    def ordinal(self):
        return self.device

    def reserve(self, spans):
        pass

    def map(self, ranges):
        self.maps = list(ranges)

    def map_shared(self, groups):
        # The real core maps one physical allocation at every base of a group (resources.cpp).
        self.shared = [(size, list(bases)) for size, bases in groups]

    def view(self, address: int, length: int) -> memoryview:
        """The replay memory at a device address, as a kernel reaches it: an address in an
        alias of a shared allocation (map_shared) reaches its first mapping's bytes."""
        for size, bases in getattr(self, "shared", []):
            for b in bases[1:]:
                if b <= address < b + size:
                    address = bases[0] + (address - b)
        for n, spec in enumerate(self.items):
            if not getattr(spec, "host", False) and spec.base <= address and address + length <= spec.base + spec.size:
                return memoryview(self.target[n])[address - spec.base:address - spec.base + length]
        raise CudaError(f"simulated kernel: {length} bytes at {address:#x} lie in no restored item: "
                        "CUDA_ERROR_ILLEGAL_ADDRESS (700)")

    def map_zero(self, ranges, chunk):
        self.zero_maps, self.zero_chunk = list(ranges), chunk

    def register_host(self, ranges, regions):
        # The real core registers the server's mappings and checks each device pointer.
        self.host_ranges = [(r.base, r.size) for r in ranges]
        self.host_regions = [(h.label, h.base, h.size, h.device_pointer) for h in regions]
        for h in regions:
            if h.device_pointer != h.base:
                raise ReplayError(f"{h.label} is mapped at its captured host address, but the device sees it at "
                                  f"{h.base:#x} instead of the captured {h.device_pointer:#x}", "address")

    def load_state(self, blob_dir, chunk_size, items, threads):
        for n, spec in enumerate(items):
            def read(chunks):
                out = bytearray()
                for i, h in enumerate(chunks):
                    length = min(chunk_size, spec.size - i * chunk_size)
                    out += bytes(length) if h is None else (Path(blob_dir) / f"{h}.bin").read_bytes()
                return out
            self.items.append(spec)
            self.pre.append(read(spec.pre))
            self.post.append(read(spec.post) if spec.pre != spec.post else None)
            self.target.append(bytearray(self.pre[-1]))
            self.ref.append(None)
            if spec.label.startswith("region "):
                self.index[int(spec.label.split()[1])] = n

    def load_program(self, key, spec, image, label, global_names=()):
        name = Path(label.removeprefix("captured cubin ")).name if not label.startswith("captured") else "captured"
        if name not in KERNELS:
            raise ReplayError(f"variant {label} has no kernel {spec.kernel_name}", "variant")
        self.programs[key] = (label, KERNELS[name])
        return {"num_regs": 10}

    def select_program(self, key):
        self.current = key

    def drop_program(self, key):
        self.programs.pop(key)

    def notes(self):
        return []

    def health(self):
        return ""

    # -- primitives ------------------------------------------------------------------------
    def restore(self):
        self.target = [bytearray(p) for p in self.pre]
        self.own = {}
        self.padding = 0

    def fill(self, fills):
        for f in fills:
            raw = reference_fill(f.count, f.dtype, f.seed, f.mean, f.stddev, f.lo, f.hi, f.p_zero)
            self.target[f.item][f.offset : f.offset + len(raw)] = raw

    def run(self):
        label, kernel = self.programs[self.current]
        self.runs += 1
        kernel(Memory(self), self)
        self._check_zero_backing(label)

    def _check_zero_backing(self, label):
        """The real core maps a sparse region's never-written zeros read-only: a write there
        faults (a sticky illegal address), modelled here after the run."""
        for spec, target in zip(self.items, self.target):
            if not getattr(spec, "sparse", False):
                continue
            backed = bytearray(len(target))
            for off, n in spec.segments:
                backed[off:off + n] = b"\x01" * n
            data = np.frombuffer(bytes(target), np.uint8)
            if np.any(data[np.frombuffer(bytes(backed), np.uint8) == 0]):
                raise CudaError(f"cuStreamSynchronize on kernel of {label} failed: CUDA_ERROR_ILLEGAL_ADDRESS (700): "
                                "an illegal memory access was encountered", 700)

    def keep_reference(self, items, slot=0):
        refs = self.ref if slot == 0 else self.refs.setdefault(slot, [None] * len(self.items))
        for i in items:
            refs[i] = bytes(self.target[i])

    def clear_references(self):
        self.ref = [None] * len(self.items)
        self.refs = {}

    def expected(self, i, against):
        if against == "captured":
            return self.post[i] if self.post[i] is not None else self.pre[i]
        if against == "reference":
            refs = self.ref
        elif against.startswith("reference:"):
            refs = self.ref if int(against[10:]) == 0 else self.refs.get(int(against[10:]), [None] * len(self.items))
        else:
            raise ReplayError(f"compare against {against}: expected \"captured\", \"reference\" or "
                              "\"reference:N\"", "input")
        return refs[i] if refs[i] is not None else self.pre[i]

    def compare(self, specs, against):
        return [compare(bytes(self.target[i]), bytes(self.expected(i, against)), spec) for i, spec in enumerate(specs)]

    def validate(self, specs):
        self.restore()
        self.run()
        return self.compare(specs, "captured")

    def read(self, item, offset, length):
        return bytes(self.target[item][offset : offset + length])

    def set_gaps(self, gaps):
        """The padding of mapped pages; a kernel writes there through `s.padding` (bytes
        left in it after its run), which a restore zeroes as the real core does."""
        self.gaps = list(gaps)

    def gap_bytes(self):
        return getattr(self, "padding", 0)

    def set_time_inputs(self, inputs):
        self.time_inputs = [list(i) for i in inputs] or [[]]

    def set_check(self, on, specs=()):
        self.check_on, self.check_specs = on, list(specs)

    def last_check(self):
        return list(self._last_check)

    def time(self, iterations, warmup, flush_l2, warm_l2=False, kernel_timer=False):
        """Runs every launch like the real core: written memory restored (here: all of it),
        own state reset, the input of the rotation filled, the launch checked after it. A
        kernel's time is its `ms`, or what it returns (a "fast path" it took). The L2
        state asked for is kept in `l2_states` (the core refuses both at once, as here)."""
        if flush_l2 and warm_l2:
            raise RuntimeError("flush_l2 and warm_l2 ask for opposite L2 states: choose one")
        self.l2_states = getattr(self, "l2_states", []) + [(bool(flush_l2), bool(warm_l2))]
        label, kernel = self.programs[self.current]
        # a warm L2 makes the stand-in's kernels 10 % faster: tests see the state reach it
        base = getattr(kernel, "ms", 0.05) * (0.9 if warm_l2 else 1.0)
        rng = np.random.default_rng(self.runs)
        self.runs += 1
        times, self._last_check = [], []
        written = [i for i, p in enumerate(self.post) if p is not None]
        redrawn = sorted({f.item for fills in self.time_inputs for f in fills})  # by any input
        for it in range(warmup + iterations):
            j = it % len(self.time_inputs)
            fills = self.time_inputs[j]
            for i in written + redrawn:
                self.target[i] = bytearray(self.pre[i])
            self.own = {} if not getattr(kernel, "persists", False) else self.own
            self.fill(fills)
            took = kernel(Memory(self), self)
            if it < warmup:
                continue
            times.append(float(took) if isinstance(took, (int, float)) else base * float(np.exp(rng.normal(0, 0.02))))
            if self.check_on:
                against = "captured" if not fills else f"reference:{j}"
                items = set(written) | {f.item for f in fills}
                bad = 0
                for i in sorted(items):
                    spec = self.check_specs[i] if self.check_specs else Spec(dtype="", atol=0.0, rtol=0.0)
                    if spec.dtype == "none":
                        continue
                    out = compare(bytes(self.target[i]), bytes(self.expected(i, against)), spec)
                    bad += out["mismatched_elements"] if spec.dtype else out["mismatched_bytes"]
                self._last_check.append((j, bad))
        # the kernel timer: the events add the floor (and a kernel's `unseen_ms`: work its records miss)
        unseen = getattr(kernel, "unseen_ms", 0.0)
        self._last_events = [t + 0.002 + unseen for t in times] if kernel_timer else []
        return times if kernel_timer else [t + unseen for t in times]

    def last_events_ms(self):
        return list(getattr(self, "_last_events", []))

    def time_empty(self, iterations):
        return [0.002] * iterations


def compare(actual: bytes, expected: bytes, spec) -> dict:
    """native/replay/compare_kernels.cu in numpy: a mismatch is what the engine's own
    predicate (kerncap.core.dtypes.mismatches, the GPU kernel's definition) says, element
    by element; the tail bytes that fill no whole element compare exactly, each differing
    byte one mismatch at index n_elems; max_abs / max_rel over the unequal elements that
    involve no NaN, as the kernel reduces them."""
    a8, e8 = np.frombuffer(actual, np.uint8), np.frombuffer(expected, np.uint8)
    diff = np.nonzero(a8 != e8)[0]
    out = {"mismatched_bytes": len(diff), "first_byte": int(diff[0]) if len(diff) else None,
           "mismatched_elements": 0, "first_element": None, "max_abs": 0.0, "max_rel": 0.0, "window_offset": 0,
           "expected": b"", "actual": b""}
    first = out["first_byte"]
    if spec.dtype:
        size = dt.itemsize(spec.dtype)
        n = len(actual) // size
        a = decode(actual[: n * size], spec.dtype).astype(np.float64)
        e = decode(expected[: n * size], spec.dtype).astype(np.float64)
        differ = np.unique(diff[diff < n * size] // size)  # equal bytes are never a mismatch
        bad = [int(i) for i in differ if dt.mismatches(spec.dtype, float(a[i]), float(e[i]), spec.atol, spec.rtol)]
        tail = int(np.count_nonzero(diff >= n * size))
        for i in differ:
            x, y = float(a[i]), float(e[i])
            if x == y or math.isnan(x) or math.isnan(y):
                continue
            d = abs(x - y)
            out["max_abs"] = max(out["max_abs"], d)
            out["max_rel"] = max(out["max_rel"], d / abs(y) if y != 0 else math.inf)
        out["mismatched_elements"] = len(bad) + tail
        idx = bad + ([n] if tail else [])
        out["first_element"] = idx[0] if idx else None
        first = None if not idx else idx[0] * size
    if first is not None:
        out["window_offset"] = first
        out["expected"], out["actual"] = expected[first : first + 64], actual[first : first + 64]
    return out




def _states(session, item, against):
    ref = session.ref[item] if against == "reference" else None
    expected = ref if ref is not None else (session.post[item] if session.post[item] is not None and against == "captured"
                                            else session.pre[item])
    return {"actual": bytes(session.target[item]), "expected": bytes(expected), "pre": bytes(session.pre[item])}


def _order_key(v: float) -> int:
    import struct

    b = struct.unpack("<Q", struct.pack("<d", v))[0]
    return (~b & (2 ** 64 - 1)) if b >> 63 else b | (1 << 63)


def mismatch_map(session, spec):
    """kerncap._replay.mismatch_map over the numpy reference (kerncap.replay.mismatch)."""
    import struct

    from kerncap.replay import mismatch as mm
    from kerncap.replay.tensor_view import View

    st = _states(session, spec.item, spec.against)
    view = View(spec.view_start, spec.view_rows, spec.view_cols, spec.row_stride, (), (), "sim")
    rd = {k: (lambda b: lambda o, n: b[o:o + n])(v) for k, v in st.items()}
    m = mm.compute("sim", len(st["actual"]), view, spec.dtype or None, rd["actual"], rd["expected"], rd["pre"],
                   atol=spec.atol, rtol=spec.rtol, tolerance=spec.tolerance, grid_rows=spec.grid_rows,
                   grid_cols=spec.grid_cols)
    bits = lambda d: struct.unpack("<Q", struct.pack("<d", d))[0]  # noqa: E731
    totals = [m.mismatched_elements, m.mismatched_bytes - m.tail_bytes, m.nan_errors, m.inf_errors, m.outside_view,
              m.stale, bits(m.max_abs), bits(m.max_rel),
              2 ** 64 - 1 if m.ratio_min == np.inf else _order_key(m.ratio_min),
              0 if m.ratio_max == -np.inf else _order_key(m.ratio_max)]
    return {"totals": totals, "err_hist": list(m.err_hist), "ulp_hist": list(m.ulp_hist),
            "value_hist": [int(x) for s in mm.SIDES for x in m.value_hist[s]],
            "cell_count": [int(x) for x in m.cell_count.reshape(-1)], "cell_worst": [int(x) for x in m.cell_worst.reshape(-1)],
            "row_profile": list(m.row_profile), "col_profile": list(m.col_profile),
            "first": [f.index for f in m.first], "tail_bytes": m.tail_bytes, "seconds": 0.0}


def gather(session, item, which, against, element_size, indices):
    data = _states(session, item, against)[which]
    return b"".join(data[i * element_size:(i + 1) * element_size] for i in indices)


def read_state(session, item, which, against, offset, length):
    return _states(session, item, against)[which][offset:offset + length]


def core_module():
    return types.SimpleNamespace(Session=SimSession, SpanSpec=Spec, ItemSpec=Spec, LaunchSpec=Spec, CompareSpec=Spec,
                                 FillSpec=Spec, MapSpec=Spec, HostSpec=Spec, CudaError=CudaError, ReplayError=ReplayError,
                                 mismatch_map=mismatch_map, gather=gather, read_state=read_state)


def install(monkeypatch):
    core = core_module()
    monkeypatch.setattr(native, "replay_module", lambda: core)
    monkeypatch.setitem(sys.modules, "kerncap._replay", core)
    return core


class InProcessClient:
    """The ReplayClient interface (request, info, capture_dir) over an in-process Server
    on the simulated core; a fatal answer starts a new one for the next request, like
    the real client's fresh server process."""

    def __init__(self, capture_dir, device=0, **_ignored):
        self.capture_dir = Path(capture_dir)
        self.server = None
        self.info = None
        self.starts = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self):
        if self.server is None:
            self._start()
        return self

    def close(self):
        self.server = None

    kill = close
    server_pid = None  # no process of its own

    def _start(self):
        from kerncap.replay.server import Server

        self.server = Server(io.StringIO())
        self.starts += 1
        self.info = self._send({"op": "open", "capture": str(self.capture_dir)})

    def request(self, op, **args):
        if self.server is None:
            self._start()
        return self._send({"op": op, **args})

    def _send(self, req):
        out = io.StringIO()
        self.server.out = out
        req = json.loads(protocol.encode({"id": 1, **req}))  # through JSON, like the wire
        self.server.serve([json.dumps(req) + "\n"])
        resp = protocol.decode(out.getvalue().splitlines()[-1])
        if resp.get("ok"):
            return json.loads(json.dumps(resp["result"], default=_bytes))
        if resp.get("fatal"):
            self.server = None
        raise protocol.error_to_exception(resp)

    # the real client's API, over request()
    compare_timing = ReplayClient.compare_timing
    replay = ReplayClient.replay
    validate = ReplayClient.validate


def _bytes(o):
    if isinstance(o, (bytes, bytearray)):
        return o.hex()
    raise TypeError(type(o))


def sticky(message="cuStreamSynchronize on kernel k of captured cubin failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)"):
    return CudaError(message, 700)


AXPY = Path(__file__).parent / "fixtures" / "captures" / "axpy_small"


# Kernels of the committed axpy capture (y += 0.5·x, in place; region 0 is x, 1 is y).
def axpy(m, _s):
    y = m.f32(1)
    y[:] = y + np.float32(0.5) * m.f32(0)


def axpy_abs(m, _s):
    """Relies on x >= 0, which the captured input happens to have: exact on the captured
    input, wrong on a perturbed one."""
    y = m.f32(1)
    y[:] = y + np.float32(0.5) * np.abs(m.f32(0))


def axpy_reproducer(tmp_path: Path, monkeypatch, kernels: dict[str, Callable]) -> Path:
    """A copy of the committed axpy capture replayed by the simulated core: `kernels`
    maps "captured" and variant file names to kernels; every variant named gets a
    (dummy) cubin file beside the copy. The ReplayClient of the engine is the in-process
    one for the test's duration."""
    import shutil

    install(monkeypatch)
    monkeypatch.setattr(sys.modules[__name__], "KERNELS", dict(kernels))
    monkeypatch.setattr("kerncap.replay.client.ReplayClient", InProcessClient)  # what every session opens
    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    for name in kernels:
        if name != "captured":
            (tmp_path / name).write_bytes(name.encode())  # the simulator picks the kernel by name
    return repro

