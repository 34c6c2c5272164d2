"""A SYNTHETIC sequence capture and the simulated replay core's sequence programs, for CPU
tests of what sits above the native core (kerncap.replay.sequence_replay, NativeSession,
the server's operations, the session, the CLI). The GPU suite runs the real core on real
captures of the same shape (tests/gpu/test_sequences.py, testapps/cuda/seq_pipeline.cu).

The capture (hand-made, labelled synthetic in its manifest's provenance): a two-stream
pipeline over float32 buffers at fixed addresses,

    stream 0: scale (tmp = 2 x)   record e0
    stream 1: wait e0, copy tmp -> z (device to device), fill w with 7.0
    stream 0: add (y = tmp + 1), h2d copy of 16 bytes into y (host data as a payload)

Launch steps run the Python kernels of SEQ_KERNELS (by the module's label, which is the
variant's file for a rebuilt module, and the kernel's name), copies and fills act on the
simulated memory by address, and the events order nothing (one thread runs everything).
"""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path
from typing import Callable

import numpy as np
import xxhash

import replay_sim as sim

N = 256                       # float32 elements per buffer
BYTES = 4 * N
BASES = {"x": 0x7F0000000000, "tmp": 0x7F0000100000, "y": 0x7F0000200000, "z": 0x7F0000300000,
         "w": 0x7F0000400000}
PAYLOAD = struct.pack("<4f", 9.0, 8.0, 7.0, 6.0)


def _f32(mem, address: int) -> np.ndarray:
    item, off = mem.at(address)
    return np.frombuffer(memoryview(mem.s.target[item])[off:off + BYTES], dtype=np.float32)


def _ptrs(params: bytes, n: int) -> list[int]:
    return list(struct.unpack_from(f"<{n}Q", params))


def scale(mem, params):
    x, tmp = _ptrs(params, 2)
    _f32(mem, tmp)[:] = np.float32(2) * _f32(mem, x)


def add(mem, params):
    tmp, y = _ptrs(params, 2)
    _f32(mem, y)[:] = _f32(mem, tmp) + np.float32(1)


def add_wrong(mem, params):
    tmp, y = _ptrs(params, 2)
    _f32(mem, y)[:] = _f32(mem, tmp) + np.float32(1.5)


def fused(mem, params):
    """y = 2x + 1 without tmp (what a fusion of scale and add computes), per the skeleton's
    parameters: x, tmp, y (tmp unused)."""
    x, _tmp, y = _ptrs(params, 3)
    _f32(mem, y)[:] = np.float32(2) * _f32(mem, x) + np.float32(1)


# (module label's file name or "captured", kernel name) -> kernel(memory, parameter bytes)
SEQ_KERNELS: dict[tuple[str, str], Callable] = {
    ("captured", "_Z5scalePKfPf"): scale,
    ("captured", "_Z3addPKfPf"): add,
    ("add_wrong.cubin", "_Z5scalePKfPf"): scale,  # the rebuilt module holds both kernels
    ("add_wrong.cubin", "_Z3addPKfPf"): add_wrong,
    ("fused.cubin", "kc_fused"): fused,
}


class SeqMemory:
    def __init__(self, session):
        self.s = session

    def at(self, address: int) -> tuple[int, int]:
        for i, spec in enumerate(self.s.items):
            if spec.label.startswith("region ") and spec.base <= address < spec.base + spec.size:
                return i, address - spec.base
        raise sim.CudaError(f"simulated illegal address {address:#x}", 700)

    def write(self, address: int, data: bytes) -> None:
        item, off = self.at(address)
        self.s.target[item][off:off + len(data)] = data

    def read(self, address: int, n: int) -> bytes:
        item, off = self.at(address)
        return bytes(self.s.target[item][off:off + n])


class SimSeqProgram:
    def __init__(self, spec, label):
        self.spec, self.label = spec, label
        self.kernels = []
        for st in spec.steps:
            if st.op != "launch":
                self.kernels.append(None)
                continue
            m = spec.modules[st.module]
            name = "captured" if m.label.startswith("module ") else Path(m.label.split(" (")[-1].rstrip(")")).name
            fn = SEQ_KERNELS.get((name, st.launch.kernel_name))
            if fn is None:
                raise sim.ReplayError(f"variant {m.label} has no kernel {st.launch.kernel_name}", "variant")
            self.kernels.append(fn)

    def run(self, session, begin, end):
        mem = SeqMemory(session)
        for st, fn in list(zip(self.spec.steps, self.kernels))[begin:end]:
            if st.op == "launch":
                fn(mem, bytes(st.launch.param_buffer))
            elif st.op == "copy" and st.kind == "d2d":
                mem.write(st.dst, mem.read(st.src, st.bytes))
            elif st.op == "copy" and st.kind == "h2d":
                mem.write(st.dst, bytes(st.payload))
            elif st.op == "memset":
                mem.write(st.dst, struct.pack(f"<{st.width}I", *([st.value] * st.width)) if st.element == 4
                          else bytes([st.value]) * st.width)


class SimSeqSession(sim.SimSession):
    """SimSession with the sequence primitives of the native core."""

    def load_sequence(self, key, spec, label):
        self.programs[key] = (label, SimSeqProgram(spec, label))
        return {"num_regs": 10}

    def _seq(self):
        label, prog = self.programs[self.current]
        return prog if isinstance(prog, SimSeqProgram) else None

    def run(self):
        prog = self._seq()
        if prog is None:
            return super().run()
        self.runs += 1
        prog.run(self, 0, len(prog.spec.steps))

    def run_steps(self, begin, end):
        self._seq().run(self, begin, end)

    def sequence_steps(self):
        return len(self._seq().spec.steps)

    def time(self, iterations, warmup, flush_l2, warm_l2=False):
        prog = self._seq()
        if prog is None:
            return super().time(iterations, warmup, flush_l2, warm_l2)
        launches = sum(st.op == "launch" for st in prog.spec.steps)
        return [0.01 * launches] * iterations

    def time_steps(self, iterations, warmup):
        prog = self._seq()
        launches = [st for st in prog.spec.steps if st.op == "launch"]
        return [[0.01 * len(launches)] + [0.01] * len(launches) for _ in range(iterations)]

    def mask(self, spans, against):
        for item, offset, length in spans:
            expected = self.ref[item] if against == "reference" and self.ref[item] is not None else (
                self.post[item] if self.post[item] is not None else self.pre[item])
            self.target[item][offset:offset + length] = expected[offset:offset + length]


class SeqClient(sim.InProcessClient):
    """The in-process client with the sequence requests of the real one; the order it
    opens the capture in reaches the server as the real client's does."""

    def __init__(self, capture_dir, device=0, sequence_order=None, **_ignored):
        super().__init__(capture_dir, device)
        self.sequence_order = sequence_order

    def _start(self):
        from kerncap.replay.server import Server

        self.server = Server(io.StringIO())
        self.starts += 1
        self.info = self._send({"op": "open", "capture": str(self.capture_dir),
                                **({"sequence_order": self.sequence_order} if self.sequence_order else {})})

    localize = sim.ReplayClient.localize
    sequence_time = sim.ReplayClient.sequence_time


def install(monkeypatch):
    core = sim.install(monkeypatch)
    core.Session = SimSeqSession
    for name in ("SeqSpec", "SeqModuleSpec", "SeqStepSpec", "SeqGlobalSpec"):
        setattr(core, name, sim.Spec)
    return core


# -- the synthetic capture ------------------------------------------------------------------------


def _blob(root: Path, data: bytes) -> str | None:
    if not any(data):
        return None
    h = xxhash.xxh64_hexdigest(data)
    (root / "blobs" / f"{h}.bin").write_bytes(data)
    return h


def _arr(values) -> bytes:
    return np.asarray(values, dtype=np.float32).tobytes()


def _launch(index: int, kernel: int, stream: int, ptrs: list[int]) -> dict:
    buf = struct.pack(f"<{len(ptrs)}Q", *ptrs)
    params = []
    for i, p in enumerate(ptrs):
        region = sorted(BASES.values()).index(p)
        params.append({"index": i, "offset": 8 * i, "size": 8, "value": buf[8 * i:8 * i + 8].hex(),
                       "pointer": {"region": region, "offset": 0}})
    return {"index": index, "kernel": kernel, "launch_api": "cuLaunchKernel", "stream_id": stream,
            "grid": [1, 1, 1], "block": [256, 1, 1], "shared_mem_bytes": 0, "stream": "user",
            "cooperative": False, "attributes": [], "param_form": "array", "params": params,
            "param_buffer": buf.hex()}


def synthetic_sequence(dest: Path) -> Path:
    """Writes the SYNTHETIC reproducer described above at `dest` and returns it."""
    cap = dest / "capture"
    (cap / "blobs").mkdir(parents=True)
    (cap / "cubins").mkdir()
    cubin = "cubins/" + "ab" * 32 + ".cubin"
    (cap / cubin).write_bytes(b"synthetic cubin, run by tests/sequence_sim.py")
    x = np.arange(N, dtype=np.float32) * np.float32(0.25)
    tmp = np.float32(2) * x
    y = tmp + np.float32(1)
    y_final = y.tobytes()
    y_final = PAYLOAD + y_final[len(PAYLOAD):]
    pre = {"x": x.tobytes(), "tmp": bytes(BYTES), "y": bytes(BYTES), "z": bytes(BYTES), "w": bytes(BYTES)}
    post = {"x": x.tobytes(), "tmp": tmp.tobytes(), "y": y_final, "z": tmp.tobytes(),
            "w": struct.pack(f"<{N}f", *([7.0] * N))}
    regions = []
    for i, name in enumerate(sorted(BASES, key=BASES.get)):
        a, b = _blob(cap, pre[name]), _blob(cap, post[name])
        regions.append({"id": i, "base": BASES[name], "size": BYTES, "api": "cuMemAlloc_v2", "kind": "device",
                        "written": a != b, "zero_fraction": 0.0, "pre": [a], "post": [b]})
    sequence = {
        "format": "kerncap-sequence", "format_version": 1, "mode": "run",
        "selection": {"mode": "run", "kernel": "scale", "dispatch": 0, "count": 2}, "device": 0,
        "modules": [{"id": 0, "cubin": cubin, "sha256": "ab" * 32, "selection": "handle", "candidates": 1,
                     "globals": []}],
        "kernels": [{"id": 0, "module": 0, "name": "_Z5scalePKfPf", "demangled": "scale(float const*, float*)"},
                    {"id": 1, "module": 0, "name": "_Z3addPKfPf", "demangled": "add(float const*, float*)"}],
        "launches": [_launch(0, 0, 0, [BASES["x"], BASES["tmp"]]), _launch(1, 1, 0, [BASES["tmp"], BASES["y"]])],
        "streams": [{"id": 0, "kind": "user", "blocking": True}, {"id": 1, "kind": "user", "blocking": False}],
        "events": 1, "dropped_waits": 0,
        "steps": [
            {"op": "launch", "api": "cuLaunchKernel", "stream": 0, "launch": 0},
            {"op": "record", "api": "cuEventRecord", "stream": 0, "event": 0},
            {"op": "wait", "api": "cuStreamWaitEvent", "stream": 1, "event": 0},
            {"op": "copy", "api": "cuMemcpyDtoDAsync_v2", "stream": 1, "kind": "d2d", "dst": BASES["z"],
             "src": BASES["tmp"], "bytes": BYTES},
            {"op": "memset", "api": "cuMemsetD32Async", "stream": 1, "dst": BASES["w"],
             "value": struct.unpack("<I", struct.pack("<f", 7.0))[0], "element": 4, "width": N, "height": 1,
             "pitch": 0},
            {"op": "launch", "api": "cuLaunchKernel", "stream": 0, "launch": 1},
            {"op": "copy", "api": "cuMemcpyHtoDAsync_v2", "stream": 0, "kind": "h2d", "dst": BASES["y"], "src": 0,
             "bytes": len(PAYLOAD), "payload": [_blob(cap, PAYLOAD)]},
        ],
        "notes": [], "seconds": {"pre": 0.01, "window": 0.001, "post": 0.01}, "payload_bytes": len(PAYLOAD),
    }
    first = sequence["launches"][0]
    manifest = {
        "format": "kerncap-capture", "format_version": 1, "complete": True, "chunk_size": 4 << 20, "hash": "xxh64",
        "provenance": {"tool_version": "synthetic", "command": ["synthetic: tests/sequence_sim.py"],
                       "gpu": {"name": "NVIDIA H200", "cc": [9, 0], "ordinal": 0}, "dispatch_index": 0,
                       "match": {"pattern": "scale", "mode": "substring"}},
        "kernel": {"name": "_Z5scalePKfPf", "demangled": "scale(float const*, float*)", "handle_kind": "CUkernel",
                   "launch_api": "cuLaunchKernel", "module": {"cubin": cubin, "sha256": "ab" * 32}},
        "launch": {k: first[k] for k in ("grid", "block", "shared_mem_bytes", "stream", "cooperative", "attributes",
                                         "param_form")},
        "params": first["params"], "param_buffer": first["param_buffer"],
        "regions": regions, "host_regions": [], "globals": [],
        "sequence": {"file": "sequence.json", "mode": "run", "launches": 2, "steps": 7, "kernels": 2, "modules": 1},
        "warnings": ["SYNTHETIC capture written by tests/sequence_sim.py"], "triton": None,
    }
    (cap / "sequence.json").write_text(json.dumps(sequence, indent=1))
    (cap / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return dest


def pipeline_kernels_sequence(dest: Path, cubin: bytes) -> Path:
    """The synthetic sequence with a real module: `cubin` (testapps/cuda/seq_pipeline.cu,
    compiled here) and two of its kernels, sp_scale(const float*, float*, int) and
    sp_add(const float*, float*, int), for the kernel entries and their rebuild."""
    import hashlib

    repro = synthetic_sequence(dest)
    cap = repro / "capture"
    sha = hashlib.sha256(cubin).hexdigest()
    for old in (cap / "cubins").iterdir():
        old.unlink()
    (cap / "cubins" / f"{sha}.cubin").write_bytes(cubin)
    seq = json.loads((cap / "sequence.json").read_text())
    seq["modules"][0].update(cubin=f"cubins/{sha}.cubin", sha256=sha)
    seq["kernels"] = [{"id": 0, "module": 0, "name": "_Z8sp_scalePKfPfi", "demangled": "sp_scale(float const*, float*, int)"},
                      {"id": 1, "module": 0, "name": "_Z6sp_addPKfPfi", "demangled": "sp_add(float const*, float*, int)"}]
    for launch in seq["launches"]:
        buf = bytes.fromhex(launch["param_buffer"]) + struct.pack("<i", N)
        launch["param_buffer"] = buf.hex()
        launch["params"].append({"index": 2, "offset": 16, "size": 4, "value": buf[16:20].hex()})
    (cap / "sequence.json").write_text(json.dumps(seq, indent=1))
    manifest = json.loads((cap / "manifest.json").read_text())
    manifest["kernel"].update(name="_Z8sp_scalePKfPfi", demangled="sp_scale(float const*, float*, int)",
                              module={"cubin": f"cubins/{sha}.cubin", "sha256": sha})
    manifest["params"], manifest["param_buffer"] = seq["launches"][0]["params"], seq["launches"][0]["param_buffer"]
    (cap / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return repro
