"""What perturbed validation may redraw and how (kerncap.replay.region_types,
kerncap.replay.perturb), on the committed H200 captures: the demo's smooth kernel
(x, y, w as float const*/float*/float const*), the axpy capture, and the Inductor
RMSNorm record."""

from __future__ import annotations

import json
import shutil
import struct
import types
from pathlib import Path

import numpy as np
import pytest
import xxhash

from kerncap.reproducer.format import Capture, Region
from kerncap.errors import KerncapError
from kerncap.replay import perturb as pt
from kerncap.replay import region_types as rt

ROOT = Path(__file__).parents[1]
DEMO = ROOT / "kerncap_tui" / "demo" / "reproducer"
AXPY = ROOT / "tests" / "fixtures" / "captures" / "axpy_small"
RMSNORM = ROOT / "tests" / "fixtures" / "triton" / "inductor_rmsnorm.triton.json"


@pytest.mark.parametrize("demangled,types_", [
    ("smooth(float const*, float*, float const*, int, int)", ["float const*", "float*", "float const*", "int", "int"]),
    ("void stencil<3>(float const*, float*, int)", ["float const*", "float*", "int"]),
    ("at::native::(anonymous namespace)::k(float*, std::pair<int, int>)", ["float*", "std::pair<int, int>"]),
    ("k()", []),
    ("k(void)", []),
    ("_Z1kv", None),
    (None, None),
])
def test_cxx_parameter_types(demangled, types_):
    assert rt.cxx_parameter_types(demangled) == types_


@pytest.mark.parametrize("text,expected", [
    ("float const*", (1, "float", "float32")),
    ("float* __restrict__", (1, "float", "float32")),
    ("const double*", (1, "float", "float64")),
    ("__half*", (1, "float", "float16")),
    ("__nv_bfloat16 const*", (1, "float", "bfloat16")),
    ("int*", (1, "integer", "int32")),
    ("long const*", (1, "integer", None)),
    ("float**", (2, "pointers", None)),
    ("float const* const*", (2, "pointers", None)),
    ("Params", (0, "unknown", None)),
    ("float", (0, "float", "float32")),
])
def test_classify_cxx_type(text, expected):
    assert rt.classify_cxx_type(text) == expected


def test_demo_plan_redraws_the_three_float_buffers_with_their_statistics():
    plan = pt.plan(Capture.open(DEMO))
    assert [(p.span.region, p.span.dtype, p.span.source) for p in plan.perturbed] == [
        (0, "float32", "argument 0 `float const*`"), (1, "float32", "argument 1 `float*`"),
        (2, "float32", "argument 2 `float const*`")]
    x, y, w = (p.stats for p in plan.perturbed)
    assert 0 <= x.lo < x.hi < 1 and x.finite == 65536 and w.finite == 64
    assert y.zero_fraction == 1.0  # the output starts zeroed
    assert not plan.kept and not plan.untyped


def test_fills_are_per_span_per_perturbation_and_reproducible():
    plan = pt.plan(Capture.open(DEMO))
    f0, f1 = plan.fills(0, 0), plan.fills(0, 1)
    assert len({f["seed"] for f in f0 + f1}) == 6
    assert plan.fills(0, 0) == f0 and plan.fills(1, 0) != f0
    like, wide = f0[0], f1[0]
    assert like["mode"] == "like the capture" and wide["mode"] == "widened"
    assert like["lo"] >= 0 and wide["lo"] < 0 and wide["hi"] == -wide["lo"] and wide["p_zero"] == 0.0
    assert like["count"] == 65536 and like["dtype"] == "float32"
    assert f0[1]["lo"] == -1.0 and f0[1]["hi"] == 1.0  # a constant (zero) buffer is spread around its value


def test_reference_fill_matches_what_was_asked():
    plan = pt.plan(Capture.open(AXPY))
    for k in range(2):
        f = plan.fills(5, k)[0]
        a = np.frombuffer(pt.reference_fill(**{**f, "count": 20000}), dtype=np.float32)
        assert pt.reference_fill(**{**f, "count": 20000}) == a.tobytes()  # reproducible
        assert a.min() >= f["lo"] and a.max() <= f["hi"]
        assert abs(a.mean() - f["mean"]) < 0.05 * max(1.0, abs(f["mean"]))
        assert abs(a.std() - f["stddev"]) < 0.15 * f["stddev"]
        if k == 1:
            assert (a < 0).mean() > 0.3  # widened: signs the capture never had


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16", "int32", "int8", "uint8"])
def test_reference_fill_dtypes(dtype):
    lo, hi, mean = (-100.0, 100.0, 10.0) if dtype != "uint8" else (0.0, 200.0, 100.0)
    raw = pt.reference_fill(1000, dtype, 3, mean, 40.0, lo, hi, 0.25)
    values = pt.decode(raw, dtype)
    assert len(values) == 1000 and values.min() >= lo and values.max() <= hi
    assert 0.15 < (values == 0).mean() < 0.35
    if dtype == "bfloat16":  # bf16 is float32's top half, rounded to nearest even
        f32 = pt.decode(pt.reference_fill(1000, "float32", 3, mean, 40.0, lo, hi, 0.25), "float32")
        assert np.allclose(values, f32, rtol=2 ** -8)
    if dtype.startswith(("int", "uint")):
        assert np.array_equal(values, np.round(values))


def test_draw_params_keep_integers_in_range():
    stats = pt.Stats(10, 10, 100.0, 80.0, 0.0, 250.0, 0.0, 10)
    p = pt.draw_params(stats, "int8", 1)
    assert p["lo"] == -128.0 and p["hi"] == 127.0
    p = pt.draw_params(stats, "float16", 1)
    assert p["hi"] <= 65504.0


def test_triton_tensors_give_typed_spans(tmp_path):
    spec = json.loads(RMSNORM.read_text())
    args = {a["name"]: a for a in spec["launch"]["args"] if a.get("kind") == "tensor"}
    regions = []
    for i, name in enumerate(("in_out_ptr0", "in_ptr0", "in_ptr1", "out_ptr0")):
        base = args[name]["data_ptr"] - 512
        regions.append(Region(i, base, 64 << 20, "cuMemAlloc_v2", "device", False, 0.0, [], []))
    cap = types.SimpleNamespace(regions=regions, region_of=lambda a: next((r for r in regions if r.contains(a)), None))
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / "triton.json").write_text(RMSNORM.read_text())
    spans = rt.triton_spans(cap, tmp_path)
    got = {s.source: (s.region, s.offset, s.length, s.dtype, s.role) for s in spans}
    assert got["Triton tensor in_ptr0 (bfloat16)"] == (1, 512, 512 * 32768 * 2, "bfloat16", "float")
    assert got["Triton tensor in_out_ptr0 (float32)"] == (0, 512, 512 * 4, "float32", "float")


def test_overlapping_spans_that_disagree_lose_their_type():
    notes = []
    a = rt.TypedSpan(0, 0, 64, "float32", "float", "a")
    b = rt.TypedSpan(0, 32, 64, "int32", "integer", "b")
    c = rt.TypedSpan(0, 200, 8, "float32", "float", "c")
    out = rt._resolve_overlaps([a, b, c], notes)
    assert [(s.offset, s.length, s.role) for s in out] == [(0, 96, "unknown"), (200, 8, "float")]
    assert "overlap with different types" in notes[0]


def rewrite_region(repro: Path, rid: int, data: bytes, demangled: str) -> None:
    """Replace region `rid`'s pre- and post-state with `data` (a new, hashed blob)."""
    cap = repro / "capture"
    m = json.loads((cap / "manifest.json").read_text())
    h = xxhash.xxh64_hexdigest(data)
    (cap / "blobs" / f"{h}.bin").write_bytes(data)
    region = next(r for r in m["regions"] if r["id"] == rid)
    assert region["size"] == len(data)
    region["pre"] = region["post"] = [h]
    m["kernel"]["demangled"] = demangled
    (cap / "manifest.json").write_text(json.dumps(m))


def test_span_holding_device_addresses_is_kept(tmp_path):
    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    y = Capture.open(repro).regions[1]
    table = b"".join(struct.pack("<Q", y.base + 64 * i) for i in range(2048))
    rewrite_region(repro, 0, table, "axpy_inplace(float, double const*, float*, int)")
    plan = pt.plan(Capture.open(repro))
    kept = {p.span.region: p.reason for p in plan.kept}
    assert kept == {0: "holds device addresses of captured regions: kept"}



@pytest.mark.parametrize("addresses,kept", [(pt.ADDRESS_WORDS, True), (pt.ADDRESS_WORDS - 1, False)])
def test_a_span_with_exactly_the_threshold_of_address_words_is_kept(tmp_path, addresses, kept):
    """A float span of 2,048 words, `addresses` of them device addresses into y (the rest
    1.0f pairs, which point nowhere): ADDRESS_WORDS of them (the threshold, above
    len // 1000 = 2) keep it as a table of addresses; one fewer is float data, redrawn."""
    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    y = Capture.open(repro).regions[1]
    words = [y.base + 64 * i for i in range(addresses)] + [0x3F8000003F800000] * (2048 - addresses)
    rewrite_region(repro, 0, struct.pack("<2048Q", *words), "axpy_inplace(float, float const*, float*, int)")
    plan = pt.plan(Capture.open(repro))
    reasons = {p.span.region: p.reason for p in plan.spans}
    if kept:
        assert reasons[0] == "holds device addresses of captured regions: kept"
        assert [p.span.region for p in plan.perturbed] == [1]
    else:
        assert [p.span.region for p in plan.perturbed] == [0, 1], reasons


def test_integer_and_pointer_arguments_are_kept(tmp_path):
    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    m = json.loads((repro / "capture" / "manifest.json").read_text())
    m["kernel"]["demangled"] = "axpy_inplace(float, int const*, float**, int)"
    (repro / "capture" / "manifest.json").write_text(json.dumps(m))
    plan = pt.plan(Capture.open(repro))
    assert not plan.perturbed
    reasons = [p.reason for p in plan.kept]
    assert reasons[0].startswith("integer elements (indices, offsets or ids?): kept; --region-dtype 0=int32")
    assert reasons[1] == "holds pointers: kept"
    explicit = pt.plan(Capture.open(repro), region_dtypes={0: "int32"})
    assert [p.span.region for p in explicit.perturbed] == [0]


def test_region_dtype_for_a_missing_region_is_named():
    with pytest.raises(KerncapError, match="--region-dtype 5=…: the capture has no region 5"):
        pt.plan(Capture.open(AXPY), region_dtypes={5: "float32"})


def test_pointers_at_touching_spans_of_one_region_keep_their_own_types(tmp_path):
    """A float* at the start of a region and an int* at its middle (one pool, two arrays):
    the float span ends where the int span starts; spans that touch do not overlap, so the
    float half is redrawn and the integer half kept, neither left untyped."""
    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    m = json.loads((repro / "capture" / "manifest.json").read_text())
    x = next(r for r in m["regions"] if r["id"] == 0)
    half = x["size"] // 2
    p = m["params"][2]
    p["pointer"] = {"region": 0, "offset": half}
    p["value"] = struct.pack("<Q", x["base"] + half).hex()
    m["kernel"]["demangled"] = "axpy_inplace(float, float const*, int*, int)"
    (repro / "capture" / "manifest.json").write_text(json.dumps(m))
    cap = Capture.open(repro)
    spans, notes = rt.typed_spans(cap, repro)
    assert [(s.region, s.offset, s.length, s.role, s.dtype) for s in spans] == [
        (0, 0, half, "float", "float32"), (0, half, half, "integer", "int32")]
    assert not any("overlap" in n for n in notes)
    plan = pt.plan(cap)
    assert [(p.span.region, p.span.offset) for p in plan.perturbed] == [(0, 0)]
    assert [(p.span.offset, p.span.role) for p in plan.kept if p.span.region == 0] == [(half, "integer")]


def test_the_count_of_perturbed_inputs_takes_both_ends_of_its_range():
    """--perturb K accepts 1 … MAX_PERTURBATIONS, both ends included, and refuses one past each."""
    from kerncap.errors import UsageError
    from kerncap.replay import perturb as pt

    assert pt.check_count(1) == 1
    assert pt.check_count(pt.MAX_PERTURBATIONS) == pt.MAX_PERTURBATIONS
    for bad in (0, pt.MAX_PERTURBATIONS + 1):
        with pytest.raises(UsageError, match=f"--perturb {bad}:"):
            pt.check_count(bad)
