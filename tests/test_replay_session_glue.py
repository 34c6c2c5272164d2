"""The server-side glue (NativeSession) between a capture and the native core, run
against a recording stand-in for kerncap._replay on a tiny hand-made capture. The
GPU suite runs the real core; this checks what the glue hands it and makes of it."""

import json
import struct
import types

import pytest
import xxhash
from kerncap.core import native
from kerncap.errors import KerncapError

BASE = 0x7F12_3460_0000


class Spec(types.SimpleNamespace):
    pass


class CudaError(RuntimeError):
    pass


class ReplayError(RuntimeError):
    pass


class FakeSession:
    load_error = None
    outs = None
    cc = (9, 0)

    def __init__(self, device):
        self.calls = [("init", device)]
        self.device = device

    def granularity(self):
        return 2 << 20

    def compute_capability(self):
        return FakeSession.cc

    def device_name(self):
        return "Fake H200"

    def device_uuid(self):
        return "GPU-00000000-0000-0000-0000-000000000001"

    def ordinal(self):
        return self.device

    def reserve(self, spans):
        self.calls.append(("reserve", [(s.label, s.base, s.size) for s in spans]))

    def map(self, ranges):
        self.calls.append(("map", list(ranges)))

    def load_state(self, blob_dir, chunk_size, items, threads):
        self.calls.append(("load_state", [(i.label, i.global_name, i.base, i.size, i.pre, i.post) for i in items]))

    def load_program(self, key, spec, image, label, global_names=()):
        self.calls.append(("load_program", label, list(global_names)))
        if FakeSession.load_error:
            raise FakeSession.load_error
        self.launch = spec
        return {"num_regs": 16}

    def select_program(self, key):
        self.calls.append(("select_program", key))

    def drop_program(self, key):
        self.calls.append(("drop_program", key))

    def notes(self):
        return []

    def time(self, iterations, warmup, flush_l2, warm_l2=False):
        self.calls.append(("time", iterations, warmup, flush_l2, warm_l2))
        return [1.0] * iterations

    def set_gaps(self, gaps):
        self.calls.append(("set_gaps", list(gaps)))

    def gap_bytes(self):
        return 0

    def set_check(self, on, specs=()):
        self.calls.append(("set_check", on, [s.dtype for s in specs]))

    def last_check(self):
        return [(0, 0)]

    def validate(self, specs):
        self.calls.append(("validate", [(s.dtype, s.atol, s.rtol) for s in specs]))
        return FakeSession.outs


@pytest.fixture
def core(monkeypatch):
    mod = types.SimpleNamespace(Session=FakeSession, SpanSpec=Spec, ItemSpec=Spec, LaunchSpec=Spec,
                                CompareSpec=Spec, CudaError=CudaError, ReplayError=ReplayError)
    monkeypatch.setattr(native, "replay_module", lambda: mod)
    FakeSession.load_error = None
    FakeSession.cc = (9, 0)
    return mod


def out(mismatched=0, first=None, expected=b"", actual=b"", elements=0, max_abs=0.0):
    return {"mismatched_bytes": mismatched, "first_byte": first, "mismatched_elements": elements,
            "first_element": None, "max_abs": max_abs, "max_rel": 0.0, "window_offset": first or 0,
            "expected": expected, "actual": actual}


@pytest.fixture
def capture(tmp_path):
    root = tmp_path / "capture"
    (root / "blobs").mkdir(parents=True)
    (root / "cubins").mkdir()
    pre = struct.pack("<4f", 1, 2, 3, 4)
    post = struct.pack("<4f", 2, 4, 6, 8)
    hashes = []
    for data in (pre, post):
        h = xxhash.xxh64_hexdigest(data)
        (root / "blobs" / f"{h}.bin").write_bytes(data)
        hashes.append(h)
    (root / "cubins" / "k.cubin").write_bytes(b"\x7fELF" + bytes(60))
    manifest = {
        "format": "kerncap-capture", "format_version": 1, "complete": True, "chunk_size": 4194304, "hash": "xxh64",
        "provenance": {"synthetic": True, "gpu": {"name": "synthetic sm_90", "cc": [9, 0], "ordinal": 1}},
        "kernel": {"name": "_Z1kPfi", "launch_api": "cuLaunchCooperativeKernel", "module": {"cubin": "cubins/k.cubin"}},
        "launch": {"grid": [2, 1, 1], "block": [128, 1, 1], "shared_mem_bytes": 65536,
                   "attributes": [{"id": 4, "value": "01" * 64}], "param_form": "array"},
        "params": [{"index": 0, "offset": 0, "size": 8, "value": "00" * 8, "pointer": {"region": 1, "offset": 0},
                    "dtype": "fp16"},
                   {"index": 1, "offset": 8, "size": 4, "value": "04000000"}],
        "param_buffer": "00" * 12,
        "regions": [
            {"id": 0, "base": BASE, "size": 16, "written": False, "pre": [hashes[0]], "post": [hashes[0]]},
            {"id": 1, "base": BASE + 4096, "size": 16, "written": True, "pre": [hashes[0]], "post": [hashes[1]]},
        ],
        "globals": [{"name": "scale", "section": ".nv.constant3", "size": 16, "address": 0x1000, "written": False,
                     "pre": [hashes[0]], "post": [hashes[0]]}],
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def test_open_hands_the_core_spans_maps_items_and_launch(core, capture):
    from kerncap.replay.native_session import NativeSession

    s = NativeSession(capture)
    calls = dict((c[0], c[1:]) for c in s.session.calls)
    assert calls["reserve"] == ([("0 (regions 0, 1)", BASE - BASE % (32 << 20), 64 << 20)],)
    assert calls["map"] == ([(BASE - BASE % (2 << 20), 2 << 20)],)
    labels = [i[0] for i in calls["load_state"][0]]
    assert labels == ["region 0", "region 1", "global scale"]
    assert calls["load_state"][0][2][1] == "scale"
    launch = s.session.launch
    assert launch.kernel_name == "_Z1kPfi" and launch.grid == [2, 1, 1] and launch.shared_mem_bytes == 65536
    assert launch.cooperative and not launch.extra_form and launch.attributes == [(4, b"\x01" * 64)]
    assert launch.params == [(0, 8), (8, 4)] and launch.param_buffer == bytes(12)
    assert [c[0] for c in s.session.calls] == ["init", "reserve", "map", "load_state", "set_gaps", "load_program",
                                                    "select_program"]
    # the mapped page's bytes outside regions 0 and 1 (BASE starts the page): between and after them
    assert BASE % (2 << 20) == 0
    assert calls["set_gaps"] == ([(BASE + 16, 4096 - 16), (BASE + 4096 + 16, (2 << 20) - 4096 - 16)],)
    assert s.info()["gpu"] == {"name": "Fake H200", "cc": [9, 0]}
    assert s.info()["device"]["ordinal"] == 0 and s.replay(None, 1, 0, False).device["name"] == "Fake H200"


def test_replay_on_another_device_of_the_same_architecture_says_which(core, capture):
    from kerncap.replay.native_session import NativeSession

    s = NativeSession(capture, device=1)
    assert s.session.calls[0] == ("init", 1)
    FakeSession.outs = [out(), out(), out()]
    v = s.validate(None, None, None, None, None)
    assert v.device == {"ordinal": 1, "name": "Fake H200", "uuid": "GPU-00000000-0000-0000-0000-000000000001",
                        "cc": [9, 0]}
    from kerncap.replay.results import format_validation

    assert "on device 1 (Fake H200, sm_90, GPU-" in format_validation(v).splitlines()[0]


def test_a_device_of_another_architecture_is_refused_before_anything_is_restored(core, capture):
    from kerncap.replay.native_session import NativeSession

    FakeSession.cc = (8, 0)
    with pytest.raises(ReplayError) as exc:
        NativeSession(capture, device=1)
    message, kind = exc.value.args
    assert kind == "device"
    assert "made on sm_90 (synthetic sm_90)" in message and "device 1 (Fake H200, sm_80" in message


def test_exact_validation_builds_checks(core, capture):
    from kerncap.replay.native_session import NativeSession

    s = NativeSession(capture)
    FakeSession.outs = [out(2, 4, b"\x01\x02", b"\x09\x02"), out(), out(1, 0, b"\x05", b"\x06")]
    v = s.validate(None, None, None, None, None)
    assert s.session.calls[-1] == ("validate", [("", 0.0, 0.0)] * 3)
    assert v.mode == "exact" and not v.passed
    r0, r1, g = v.regions
    assert r0.unexpected_write and r0.first_mismatches == [(4, 1, 9)] and r0.base == BASE
    assert r1.passed and not r1.unexpected_write
    assert g.kind == "global" and g.name == "scale" and g.id is None and g.unexpected_write


def test_tolerance_dtypes_come_from_caller_then_hints_then_default(core, capture):
    from kerncap.replay.native_session import NativeSession

    s = NativeSession(capture)
    FakeSession.outs = [out(), out(elements=0, max_abs=0.0), out()]
    v = s.validate(None, 1e-3, None, None, None)
    assert s.session.calls[-1][1] == [("float32", 1e-3, 0.0), ("float16", 1e-3, 0.0), ("", 1e-3, 0.0)]
    assert v.mode == "tolerance" and v.passed and v.regions[1].dtype == "float16" and v.regions[2].dtype is None
    s.validate(None, None, 0.1, "bf16", {0: "int8"})
    assert s.session.calls[-1][1] == [("int8", 0.0, 0.1), ("float16", 0.0, 0.1), ("", 0.0, 0.1)]


def test_a_region_dtype_keyed_by_its_id_as_a_string_is_used(core, capture):
    """Region ids arrive as JSON object keys ("0"): NativeSession.region_dtypes takes them
    as given, like int keys, and never falls back to the hint or the default for that region."""
    from kerncap.replay.native_session import NativeSession

    s = NativeSession(capture)
    FakeSession.outs = [out(), out(elements=0, max_abs=0.0), out()]
    s.validate(None, 1e-3, None, None, {"0": "int8"})
    assert s.session.calls[-1][1] == [("int8", 1e-3, 0.0), ("float16", 1e-3, 0.0), ("", 1e-3, 0.0)]
    assert s.region_dtypes(None, {"0": "bf16"}, []) == s.region_dtypes(None, {0: "bf16"}, [])
    assert s.region_dtypes(None, {"0": "bf16"}, [])[0] == "bfloat16"


def test_same_cubin_bytes_are_not_reloaded(core, capture, tmp_path):
    from kerncap.replay.native_session import NativeSession

    s = NativeSession(capture)
    same = tmp_path / "same.cubin"
    same.write_bytes((capture / "cubins" / "k.cubin").read_bytes())
    s.replay(str(same), 2, 0, False)
    assert [c for c in s.session.calls if c[0] == "load_program"] == [("load_program", f"captured cubin {capture / 'cubins' / 'k.cubin'}", [])]


def test_arch_load_failure_names_both_architectures(core, capture, tmp_path):
    from kerncap.replay.native_session import NativeSession

    s = NativeSession(capture)
    variant = tmp_path / "v.cubin"
    header = b"\x7fELF" + bytes([2, 1, 1, 0x41, 8]) + bytes(39) + struct.pack("<I", 0x6005004) + bytes(16)
    variant.write_bytes(header)
    FakeSession.load_error = CudaError(f"cuModuleLoadData on {variant} failed: CUDA_ERROR_NO_BINARY_FOR_GPU (209)", 209)
    with pytest.raises(ReplayError) as err:
        s.load(str(variant))
    message, kind = err.value.args
    assert kind == "arch" and "built for sm_80; this GPU is sm_90" in message


def test_missing_variant_file(core, capture, tmp_path):
    from kerncap.replay.native_session import NativeSession

    s = NativeSession(capture)
    with pytest.raises(KerncapError, match="cannot read cubin .*nope.cubin"):
        s.load(str(tmp_path / "nope.cubin"))


def test_missing_captured_cubin_is_a_capture_error(core, capture):
    from kerncap.errors import CaptureFormatError
    from kerncap.replay.native_session import NativeSession

    (capture / "cubins" / "k.cubin").unlink()
    with pytest.raises(CaptureFormatError, match="k.cubin is missing"):
        NativeSession(capture)


def test_tolerance_dtypes_of_a_triton_reproducer_come_from_its_tensor_arguments(core, capture):
    """A Triton reproducer's source/triton.json names each tensor's dtype: it beats the
    manifest's hint (fp16 here) but not the caller's choice."""
    from kerncap.replay.native_session import NativeSession
    from kerncap.triton.pinned import SPEC_FORMAT

    source = capture.parent / "source"
    source.mkdir()
    args = [{"name": "x", "kind": "tensor", "dtype": "bfloat16", "shape": [8], "strides": [1],
             "data_ptr": BASE + 4096, "element_size": 2}]
    (source / "triton.json").write_text(json.dumps({"format": SPEC_FORMAT, "launch": {"args": args}}))
    s = NativeSession(capture)
    FakeSession.outs = [out(), out(), out()]
    s.validate(None, 1e-3, None, None, None)
    assert s.session.calls[-1][1] == [("float32", 1e-3, 0.0), ("bfloat16", 1e-3, 0.0), ("", 1e-3, 0.0)]
    s.validate(None, 1e-3, None, None, {1: "float16"})
    assert s.session.calls[-1][1][1] == ("float16", 1e-3, 0.0)


def test_a_capture_larger_than_the_gpu_is_refused_before_any_reservation(core, capture, monkeypatch):
    from kerncap.replay.native_session import NativeSession

    monkeypatch.setattr(FakeSession, "memory", lambda self: (1 << 20, 80 << 30), raising=False)  # 1 MiB free
    calls = []
    real_init = FakeSession.__init__

    def init(self, device):
        real_init(self, device)
        calls.append(self.calls)

    monkeypatch.setattr(FakeSession, "__init__", init)
    with pytest.raises(KerncapError, match="needs 2 MiB of device memory") as err:
        NativeSession(capture)
    assert "only 1 MiB of its 81920 MiB are free" in err.value.message
    assert [c[0] for c in calls[0]] == ["init"]  # nothing reserved or mapped


def test_programs_stay_loaded_up_to_a_limit_and_the_oldest_goes(core, capture, tmp_path, monkeypatch):
    from kerncap.replay import native_session
    from kerncap.replay.native_session import NativeSession

    monkeypatch.setattr(native_session, "MAX_PROGRAMS", 2)
    s = NativeSession(capture)
    a, b = tmp_path / "a.cubin", tmp_path / "b.cubin"
    a.write_bytes(b"\x7fELF a")
    b.write_bytes(b"\x7fELF b")
    s.load(str(a))
    s.load(None)  # captured: loaded already, only selected
    assert [c[0] for c in s.session.calls].count("load_program") == 2
    s.load(str(b))  # a third: the least recently used (a) is dropped
    dropped = [c for c in s.session.calls if c[0] == "drop_program"]
    assert len(dropped) == 1 and len(s._programs) == 2
    s.load(str(a))
    assert [c[0] for c in s.session.calls].count("load_program") == 4


def test_a_variant_gets_each_global_under_its_own_name(core, capture, tmp_path, monkeypatch):
    """Issue 18 through the program cache of issue 14: load_program receives, per captured
    module global, its name in the variant ("" when the variant does not define it)."""
    from kerncap.replay import native_session
    from kerncap.replay.native_session import NativeSession

    s = NativeSession(capture)

    def last_load():
        return [c for c in s.session.calls if c[0] == "load_program"][-1]

    assert last_load() == ("load_program", f"captured cubin {capture / 'cubins' / 'k.cubin'}", [])
    same, gone = tmp_path / "same.cubin", tmp_path / "gone.cubin"
    same.write_bytes(b"\x7fELF same")
    gone.write_bytes(b"\x7fELF gone")
    monkeypatch.setattr(native_session, "object_names", lambda image: {"scale"} if b"same" in image else {"other"})
    s.load(str(same))
    assert last_load()[2] == []  # the captured names: nothing to pass
    s.load(str(gone))
    assert last_load()[2] == [""]  # the variant does not define `scale`


def test_a_variants_launch_json_sets_its_block_and_shared_memory(core, capture, tmp_path):
    """A Triton recompile with another num_warps/num_stages writes <stem>.launch.json beside
    the cubin: the variant launches with its block and dynamic shared memory (the grid and
    the rest stay the captured ones); the captured cubin keeps its own again."""
    from kerncap.replay.native_session import NativeSession

    s = NativeSession(capture)
    v = tmp_path / "v.cubin"
    v.write_bytes(b"\x7fELF v")
    v.with_suffix(".launch.json").write_text(json.dumps({"block": [64, 1, 1], "shared_mem_bytes": 98304,
                                                         "kernel_name": "other"}))
    s.load(str(v))
    launch = s.session.launch
    assert (launch.block, launch.shared_mem_bytes, launch.grid) == ([64, 1, 1], 98304, [2, 1, 1])
    assert launch.kernel_name == "_Z1kPfi" and launch.cooperative
    plain = tmp_path / "plain.cubin"
    plain.write_bytes(b"\x7fELF plain")
    s.load(str(plain))
    assert (s.session.launch.block, s.session.launch.shared_mem_bytes) == ([128, 1, 1], 65536)
