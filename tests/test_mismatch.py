"""Issue 30 on the CPU: where an output differs and its arrays, on committed H200
captures. The "variant outputs" here are synthetic: the bundled demo's captured
post-state (smooth, 65,536 float32 = 256 x 256) with a planted bug copied in (the
last row never written, one row block scaled by 2, NaN from a division in every 64th
column); the numpy map is the reference the GPU suite checks the kernels against
(tests/gpu/test_mismatch_gpu.py). Replay runs on tests/replay_sim.py (the axpy
capture), whose mismatch_map is this same numpy reference."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from kerncap import api
from kerncap.core import dtypes as dt
from kerncap.errors import KerncapError, UsageError
from kerncap.replay import mismatch as mm

import replay_sim as sim

FIXTURES = Path(__file__).parent / "fixtures" / "captures"
DEMO = Path(__file__).parents[1] / "kerncap_tui" / "demo" / "reproducer"


def demo_states():
    """(capture, region 1's pre and post as 256 x 256 float32): smooth's output."""
    cap = api.open_capture(DEMO)
    r = next(r for r in cap.regions if r.id == 1)
    pre = np.frombuffer(cap.read_bytes(r.pre, r.size), np.float32).reshape(256, 256).copy()
    post = np.frombuffer(cap.read_bytes(r.post, r.size), np.float32).reshape(256, 256).copy()
    return cap, pre, post


def planted(kind: str) -> np.ndarray:
    """A synthetic variant output: the captured post-state with one planted bug."""
    _cap, pre, post = demo_states()
    got = post.copy()
    if kind == "last_tile":
        got[255, :] = pre[255, :]           # off by one in the last tile: the last row never written
    elif kind == "row_scale":
        got[64:80, :] *= np.float32(2.0)    # one row block with a wrong scale
    elif kind == "nan_div":
        with np.errstate(invalid="ignore"):
            got[:, ::64] = got[:, ::64] * 0 / np.float32(0.0)  # 0 / 0
    return got


SUMMARIES = {
    "last_tile": ("row 255 only", "never written"),
    "row_scale": ("rows 64–79 only (one block of 16 rows)", "got = 2 × expected"),
    "nan_div": ("every 64th column (columns 0, 64, 128, …, 192)", "NaN in got where expected is finite"),
}


@pytest.mark.parametrize("kind", sorted(SUMMARIES))
def test_planted_patterns_are_named(kind):
    _cap, pre, post = demo_states()
    got = planted(kind)
    m = api.mismatch_map_arrays("region 1", got, post, pre, dtype="float32", grid=(32, 32),
                                actual_label="synthetic", expected_label="captured post-state")
    for words in SUMMARIES[kind]:
        assert words in m.summary(), m.summary()
    assert m.mismatched_bytes == np.count_nonzero(got.view(np.uint8) != post.view(np.uint8))
    assert m.first and m.first[0].coords is not None
    rows = np.flatnonzero(m.row_profile)
    if kind == "last_tile":
        assert rows.tolist() == [255] and m.cell_count[31].all() and not m.cell_count[:31].any()
    if kind == "row_scale":
        assert rows.tolist() == list(range(64, 80)) and m.cell_count[8:10].all()
    if kind == "nan_div":
        assert m.nan_errors == m.mismatched_elements == 4 * 256 and m.nonfinite("actual")[0] == 1024
        assert np.flatnonzero(m.col_profile).tolist() == [0, 64, 128, 192]
    again = api.MismatchMap.from_dict(json.loads(json.dumps(m.to_dict())))  # through JSON, like the wire
    assert again.summary() == m.summary() and np.array_equal(again.cell_worst, m.cell_worst)


def test_a_column_pattern_that_stops_short_of_the_last_column_is_not_every_nth():
    """Every 64th column up to the last, and the same pattern stopping one period short:
    the second is three columns, not "every 64th" (a NaN from a division that stopped at
    column 128 is not one that reaches every column block)."""
    _cap, pre, post = demo_states()
    for cols, said in (((0, 64, 128, 192), "every 64th column"), ((0, 64, 128), "column 0, column 64, column 128")):
        got = post.copy()
        got[:, list(cols)] = np.float32(np.nan)
        m = api.mismatch_map_arrays("region 1", got, post, pre, dtype="float32", grid=(32, 32))
        assert np.flatnonzero(m.col_profile).tolist() == list(cols)
        assert said in m.summary(), m.summary()
        assert ("every" in m.summary()) == (len(cols) == 4), m.summary()


def test_histograms_ulps_and_keys():
    e = np.array([1.0, 1.0, 0.0, 2.0, np.inf, 3.0, 5.0, -1.5], np.float32)
    a = e.copy()
    a[0] = np.nextafter(np.float32(1.0), np.float32(2.0))  # 1 ULP
    a[2] = -0.0                                              # equal value, other bits
    a[3] = np.nan
    a[4] = -np.inf
    a[5] = 3.5                                               # |err| 0.5
    view = api.TensorView(0, 1, 8, 8, (8,), (1,), "one row")
    m = api.mismatch_map_arrays("t", a, e, np.zeros_like(e), dtype="float32", view=view, grid=(1, 8))
    assert m.mismatched_elements == 5 and m.nan_errors == 1 and m.inf_errors == 1
    assert m.ulp_hist[0] == 1 and m.ulp_hist[1] == 1 and m.err_hist[0] == 1
    assert m.err_hist[1 + (-1 - mm.LOG_MIN)] == 1                                  # 0.5 = 2^-1
    assert m.err_hist[1 + (-23 - mm.LOG_MIN)] == 1                                 # 2^-23
    assert m.worst_error(0, 3) == "nan" and m.worst_error(0, 4) == "inf" and m.worst_error(0, 5) == 0.5
    assert m.worst_index(0, 5) == 5 and m.cell_values[5] == (5, 0.0, 3.0, 3.5)
    assert m.nonfinite("expected") == (0, 1) and m.nonfinite("actual") == (1, 1)
    assert m.max_abs == 0.5 and math.isclose(m.max_rel, 0.5 / 3.0)


def test_tolerance_predicate_is_the_scalar_one():
    rng = np.random.default_rng(3)
    e = rng.normal(size=4096).astype(np.float32)
    a = (e + rng.normal(scale=1e-3, size=4096)).astype(np.float32)
    a[::97] = np.nan
    e[::89] = np.nan
    a[5], e[5] = np.inf, np.inf
    for dtype in ("float32", "float16", "bfloat16"):
        conv = {"float32": lambda x: x, "float16": lambda x: x.astype(np.float16),
                "bfloat16": lambda x: (x.view(np.uint32) >> 16).astype(np.uint16)}[dtype]
        aa, ee = conv(a), conv(e)
        fa, fe = dt.as_float64(dtype, aa), dt.as_float64(dtype, ee)
        mask = dt.mismatch_mask(dtype, fa, fe, 1e-3, 1e-3)
        assert mask.tolist() == [dt.mismatches(dtype, x, y, 1e-3, 1e-3) for x, y in zip(fa, fe)]
        m = api.mismatch_map_arrays("t", aa, ee, dtype=dtype, atol=1e-3, rtol=1e-3)
        assert m.mismatched_elements == int(mask.sum()) and m.mode == "tolerance"


def test_sampled_map_says_so():
    n = mm.BLOCK_ELEMENTS * 8
    e = np.zeros(n, np.uint8)
    a = e.copy()
    a[-10:] = 1
    view = api.TensorView(0, 8, mm.BLOCK_ELEMENTS, mm.BLOCK_ELEMENTS, (8, mm.BLOCK_ELEMENTS), (mm.BLOCK_ELEMENTS, 1), "t")
    rd = lambda b: (lambda o, k: b[o:o + k])  # noqa: E731
    m = mm.compute("r", n, view, None, rd(a.tobytes()), rd(e.tobytes()), rd(e.tobytes()), max_bytes=2 * mm.BLOCK_ELEMENTS)
    assert m.computed.startswith("cpu, sampled 2 of 8 blocks") and m.covered_rows == [(0, 1), (7, 8)]
    assert "sampled" in m.summary() and m.mismatched_elements == 10


# -- layouts and the dump (no GPU) -------------------------------------------------------


def test_dump_of_captured_states(tmp_path):
    out = api.dump(DEMO, ["arg:1"], ["pre", "post"], shape=(256, 256), output=tmp_path / "d")
    arrays = {a.state: np.load(a.path, mmap_mode="r") for a in out.arrays}
    _cap, pre, post = demo_states()
    assert arrays["post"].shape == (256, 256) and arrays["post"].dtype == np.float32
    assert np.array_equal(arrays["post"], post) and np.array_equal(arrays["pre"], pre)
    side = json.loads((tmp_path / "d" / "region1.json").read_text())
    assert side["dtype"] == "float32" and side["tensor"]["shape"] == [256, 256]
    assert side["layout_source"].startswith("argument 1 `float*`") and not list((tmp_path / "d").glob(".*"))
    text = api.format_dump(out)
    assert "region1.post.npy" in text and "float32[256×256]" in text


def test_validate_byte_count_is_reproduced_by_the_dump(tmp_path, monkeypatch):
    """The simulated replay of a planted variant: validate's byte count equals the
    count of differing bytes between the dumped output and expected arrays."""
    def last(m, s):
        sim.axpy(m, s)
        m.f32(1)[-64:] = 0
    repro = sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": sim.axpy, "last.cubin": last})
    with api.open(repro, compile_worker=False) as s:
        report = s.validate(api.ValidateRequest(cubin=str(tmp_path / "last.cubin"), runs=1,
                                                region_shapes={1: (64, 64)}))
    check = next(c for c in report.reproducers[0].inputs[0].checks if not c.passed)
    assert "row 63 only" in check.report["summary"] and check.report["first"][0]["coords"] == [63, 0]
    assert "where: " in api.format_trust_report(report)
    out = api.dump(repro, ["1"], ["output", "expected"], cubin=tmp_path / "last.cubin", output=tmp_path / "d")
    a = {x.state: np.load(x.path) for x in out.arrays}
    assert int(np.count_nonzero(a["output"].view(np.uint8) != a["expected"].view(np.uint8))) == check.mismatched_bytes
    with api.open_session(repro) as session:
        maps = session.mismatch_maps(cubin=tmp_path / "last.cubin", items=["1"], shape=(64, 64), grid=(8, 8))
    assert maps[0].summary() == check.report["summary"]



def test_a_map_on_a_perturbed_input_compares_with_the_captured_cubin_on_that_same_input(tmp_path, monkeypatch):
    """On a perturbed input the map's default reference ("baseline") is the captured
    cubin run on the same perturbed input: a variant computing what the captured kernel
    computes differs nowhere, one that leaves the last 64 elements unwritten differs in
    exactly those, and one right only for the captured input's x >= 0 differs where the
    perturbed x is negative (the second perturbation is the widened one, of either sign)."""
    def last(m, s):
        sim.axpy(m, s)
        m.f32(1)[-64:] = 0
    repro = sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": sim.axpy, "same.cubin": sim.axpy,
                                                        "last.cubin": last, "abs.cubin": sim.axpy_abs})
    with api.open_session(repro) as session:
        def mismatched(cubin, **options):
            (m,) = session.mismatch_maps(cubin=tmp_path / cubin, items=["1"], perturbation=2, seed=3, **options)
            return m
        same, cut, absolute = mismatched("same.cubin"), mismatched("last.cubin"), mismatched("abs.cubin")
        assert same.expected_label == "captured cubin on perturbation 2 (seed 3)"
        assert same.mismatched_elements == 0
        assert cut.mismatched_elements == 64 and cut.first[0].index == 4096 - 64
        assert 0 < absolute.mismatched_elements < 4096
        # against the captured post-state, the perturbed run differs almost everywhere
        assert mismatched("same.cubin", against="captured").mismatched_elements > 4000


# -- bad input ------------------------------------------------------------------------------


def test_shape_that_does_not_divide_the_region_is_named():
    with pytest.raises(UsageError) as err:
        api.item_layouts(DEMO, ["1"], shape=(255, 256))
    assert "shape 255×256 does not fit region 1" in err.value.message and "65,536 float32" in err.value.message
    with pytest.raises(UsageError) as err:
        api.item_layouts(DEMO, ["1"], shape=(-1, 1000))
    assert "65,536 is not a multiple of 1,000" in err.value.message
    with pytest.raises(UsageError):
        api.parse_shape("12,a")
    (_i, layout, view), = api.item_layouts(DEMO, ["1"], shape=(-1, 128))
    assert layout.shape == (512, 128) and (view.rows, view.cols) == (512, 128)


def test_region_of_unknown_dtype_is_raw_bytes(tmp_path):
    # graph_explicit's regions 2, 3, 5 are reached by no typed argument.
    (_i, layout, view), = api.item_layouts(FIXTURES / "graph_explicit", ["2"])
    assert layout.dtype is None and layout.source.startswith("raw bytes: no dtype known for region 2")
    out = api.dump(FIXTURES / "graph_explicit", ["2"], ["pre"], output=tmp_path / "raw")
    side = json.loads((tmp_path / "raw" / "region2.json").read_text())
    assert side["raw_bytes"] is True and side["numpy"]["dtype"] == "|u1"
    assert "raw bytes" in api.format_dump(out)
    raw = np.load(out.arrays[0].path)
    m = api.mismatch_map_arrays("region 2", raw ^ np.uint8(1), raw, dtype=None, view=view)
    assert m.summary().startswith("65,536 of 65,536 bytes") and "raw bytes" in api.format_mismatch(m)


def test_huge_region_to_a_small_disk_is_refused_up_front(tmp_path):
    """Synthetic: the axpy capture with region 1 claiming 16 TiB (all-zero chunks of 256
    MiB, as a huge sparse arena captures); no disk here holds that much."""
    repro = tmp_path / "huge"
    shutil.copytree(FIXTURES / "axpy_small", repro)
    manifest = repro / "capture" / "manifest.json"
    m = json.loads(manifest.read_text())
    m["chunk_size"] = 256 << 20
    r = m["regions"][1]
    r["size"] = 16 << 40
    r["pre"] = r["post"] = [None] * ((16 << 40) // (256 << 20))
    m["regions"][0]["pre"] = m["regions"][0]["post"] = [None]
    manifest.write_text(json.dumps(m))
    with pytest.raises(KerncapError) as err:
        api.dump(repro, ["1"], ["pre"], output=tmp_path / "out")
    assert "the dump needs 16.0 TiB" in err.value.message and "free" in err.value.message
    assert not (tmp_path / "out").exists()


def test_the_free_space_check_counts_every_state_of_every_item(tmp_path, monkeypatch):
    """A disk with room for one state of axpy's region 1 (16 KiB and a header) but not
    two: `pre` alone is written, `pre` and `post` together are refused up front, naming
    what both need, and nothing is written. Mutation caught: the check counting one
    state per item."""
    import collections

    usage = collections.namedtuple("usage", "total used free")
    one = 16384 + 4096  # the item and its header room
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: usage(1 << 30, (1 << 30) - (one + 1000), one + 1000))
    out = api.dump(FIXTURES / "axpy_small", ["1"], ["pre"], output=tmp_path / "one")
    assert [a.state for a in out.arrays] == ["pre"]
    with pytest.raises(KerncapError) as err:
        api.dump(FIXTURES / "axpy_small", ["1"], ["pre", "post"], output=tmp_path / "two")
    assert "the dump needs 40.0 KiB" in err.value.message
    assert not (tmp_path / "two").exists()


def test_a_perturbed_inputs_dump_goes_to_a_directory_of_its_own_by_default(tmp_path, monkeypatch):
    """Without --output a dump lands in the reproducer's dumps/<cubin>[-pK]: the captured
    cubin's output on the captured input, on perturbation 2 and a variant's on perturbation
    1 each keep their own files (the perturbed output is not the captured one's). Mutation
    caught: the -pK suffix dropped, each perturbed dump overwriting the captured input's."""
    repro = sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": sim.axpy, "v.cubin": sim.axpy})
    plain = api.dump(repro, ["1"], ["output"])
    perturbed = api.dump(repro, ["1"], ["output"], perturbation=2, seed=3)
    variant = api.dump(repro, ["1"], ["output"], cubin=tmp_path / "v.cubin", perturbation=1)
    dumps = repro.resolve() / "dumps"
    assert [Path(r.directory).resolve() for r in (plain, perturbed, variant)] == [
        dumps / "captured", dumps / "captured-p2", dumps / "v-p1"]
    cap = api.open_capture(repro)
    region = next(r for r in cap.regions if r.id == 1)
    captured_out = np.load(plain.arrays[0].path)
    assert captured_out.tobytes() == cap.read_bytes(region.post, region.size)  # still the captured input's output
    assert np.load(perturbed.arrays[0].path).tobytes() != captured_out.tobytes()


def test_a_typed_argument_at_an_offset_into_its_region_stops_at_the_regions_end(tmp_path):
    """axpy's `float* y` edited to point 4 KiB into region 1 (16 KiB): its tensor is the
    3,072 floats from +0x1000 to the region's end, in the layout, the view and the dump's
    sidecar. Mutation caught: the element count taken over the whole region (4,096 floats
    from +0x1000, running 4 KiB past its end)."""
    repro = tmp_path / "offset"
    shutil.copytree(FIXTURES / "axpy_small", repro)
    manifest = repro / "capture" / "manifest.json"
    m = json.loads(manifest.read_text())
    base = m["regions"][1]["base"] + 4096
    m["params"][2]["pointer"]["offset"] = 4096
    m["params"][2]["value"] = base.to_bytes(8, "little").hex()
    manifest.write_text(json.dumps(m))
    (_i, layout, view), = api.item_layouts(repro, ["arg:2"])
    assert (layout.dtype, layout.offset, layout.shape) == ("float32", 4096, (3072,))
    assert layout.offset + math.prod(layout.shape) * 4 == 16384
    assert view.start == 1024 and view.rows * view.cols == 3072
    api.dump(repro, ["arg:2"], ["post"], output=tmp_path / "d")
    side = json.loads((tmp_path / "d" / "region1.json").read_text())
    assert side["tensor"]["offset_bytes"] == 4096 and side["tensor"]["shape"] == [3072]
    assert side["numpy"]["shape"] == [4096]  # the file holds the whole item; the sidecar says where the tensor lies


def test_faulting_variant_is_not_dumped(tmp_path, monkeypatch):
    def fault(_m, _s):
        raise sim.sticky("cuStreamSynchronize on kernel _Z12axpy_inplacefPKfPfi of f.cubin failed: "
                         "CUDA_ERROR_ILLEGAL_ADDRESS (700)")
    repro = sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": sim.axpy, "f.cubin": fault})
    with pytest.raises(KerncapError) as err:
        api.dump(repro, ["1"], ["output"], cubin=tmp_path / "f.cubin", output=tmp_path / "d")
    assert "faulted on the captured input" in err.value.message and "ILLEGAL_ADDRESS" in err.value.message
    assert list((tmp_path / "d").iterdir()) == []
    with pytest.raises(KerncapError) as err:
        with api.open_session(repro) as session:
            session.mismatch_maps(cubin=tmp_path / "f.cubin")
    assert "faulted" in err.value.message


def test_cli_dump_usage_and_refusals(tmp_path, capsys):
    from kerncap.cli import main

    assert main(["dump", str(FIXTURES / "axpy_small"), "1", "--shape", "64,63"]) == 2
    assert "does not fit region 1" in capsys.readouterr().err
    assert main(["dump", str(FIXTURES / "axpy_small"), "9"]) == 2
    assert "names no item" in capsys.readouterr().err
    assert main(["dump", str(FIXTURES / "axpy_small"), "1", "-o", str(tmp_path / "o"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [Path(a["path"]).name for a in data["arrays"]] == ["region1.pre.npy", "region1.post.npy"]


# -- a sixteenth fresh audit (part ak): bytes past the last element, a strided view's padding,
# -- the GPU map's byte count, the perturbation's lower bound ------------------------------------


def test_a_difference_only_in_the_bytes_past_the_last_whole_element_fails():
    """Ten bytes read as float32: two whole elements and two bytes past them. Got differs
    from expected only in the last byte: no element mismatches, but the map does not pass
    and its summary names the byte. Mutation caught: `passed` ignoring the tail bytes
    (such an item reported "no mismatch")."""
    expected = np.arange(10, dtype=np.uint8)
    got = expected.copy()
    got[9] ^= 0xFF
    m = mm.map_of_arrays("region 1", got, expected, dtype="float32")
    assert (m.mismatched_elements, m.tail_bytes, m.mismatched_bytes) == (0, 1, 1)
    assert not m.passed
    assert m.summary() == "0 of 2 float32 elements (0%); 1 differing bytes past the last whole element"
    assert mm.MismatchMap.from_dict(m.to_dict()).passed is False
    same = mm.map_of_arrays("region 1", expected, expected, dtype="float32")
    assert same.passed and same.summary() == "no mismatch"


def test_the_gpu_map_counts_the_differing_tail_bytes_as_the_numpy_map_does(monkeypatch):
    """The replay core's answer counts the differing bytes of whole elements and the tail
    bytes apart (totals[1], tail_bytes); the map built from it (mismatch_ops.from_native)
    holds their sum, as the numpy reference does. Mutation caught: the tail bytes left out
    of mismatched_bytes (the GPU map said 1 differing byte where 3 differ)."""
    from kerncap.replay import mismatch_ops
    from kerncap.replay.tensor_view import View

    pre = np.zeros(10, np.uint8)
    expected = np.arange(10, dtype=np.uint8)
    got = expected.copy()
    got[1] ^= 1      # inside element 0
    got[8] ^= 1      # both bytes past the two whole float32 elements
    got[9] ^= 1
    reference = mm.map_of_arrays("region 1", got, expected, pre, dtype="float32")
    assert (reference.mismatched_bytes, reference.tail_bytes) == (3, 2)
    states = {"actual": got.tobytes(), "expected": expected.tobytes(), "pre": pre.tobytes()}
    monkeypatch.setattr(sim, "_states", lambda _session, _item, _against: states)
    view = View(0, 1, 2, 2, (2,), (1,), "test", wrapped=True)
    spec = sim.Spec()
    spec.item, spec.against, spec.dtype, spec.tolerance, spec.atol, spec.rtol = 0, "captured", "float32", False, 0.0, 0.0
    spec.view_start, spec.view_rows, spec.view_cols, spec.row_stride = 0, 1, 2, 2
    spec.grid_rows, spec.grid_cols, spec.first_k = 1, 2, mm.FIRST_K
    raw = sim.mismatch_map(None, spec)
    assert raw["totals"][1] == 1 and raw["tail_bytes"] == 2  # the core's split
    m = mismatch_ops.from_native(raw, "region 1", 10, view, "float32", False, 0.0, 0.0, 1, 2, "got", "expected")
    assert (m.mismatched_elements, m.tail_bytes, m.mismatched_bytes) == (1, 2, 3)
    assert m.mismatched_bytes == reference.mismatched_bytes


def test_an_element_in_a_strided_views_padding_is_outside_the_view():
    """A 3×3 tensor whose rows are 4 elements apart (one padding column): element 3 lies
    between rows 0 and 1, in no cell of the view. A mismatch there is counted outside the
    view, and its first-mismatch entry has no tensor coordinates (shown by its index).
    Mutation caught: View.coords checking the row only (the padding element got the
    coordinates (0, 3) of a fourth column the tensor does not have)."""
    from kerncap.replay.tensor_view import View

    view = View(0, 3, 3, 4, (3, 3), (4, 1), "strided 3×3")
    assert view.coords(3) is None and view.tensor_coords(3) is None
    assert view.coords(4) == (1, 0) and view.tensor_coords(6) == (1, 2)
    expected = np.arange(12, dtype=np.float32)
    got = expected.copy()
    got[3] = -1.0
    m = mm.map_of_arrays("region 1", got, expected, dtype="float32", view=view, grid=(3, 3))
    assert m.mismatched_elements == 1 and m.outside_view == 1 and not m.cell_count.any()
    assert m.first[0].index == 3 and m.first[0].coords is None
    assert "first: [3] expected 3 got -1" in mm.format_text(m)


def test_a_dump_of_perturbation_zero_is_refused(tmp_path, monkeypatch):
    """Perturbations count from 1, as validate reports them: --perturbation 0 is refused
    before the replay runs, and nothing is written. Mutation caught: the bound at 0
    (perturbation 0 dumped as the "perturbation -1" of the plan)."""
    repro = sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": sim.axpy})
    with pytest.raises(UsageError) as err:
        api.dump(repro, ["1"], ["output"], perturbation=0, output=tmp_path / "d")
    assert "they count from 1" in err.value.message
    assert not list((tmp_path / "d").glob("*.npy"))
    out = api.dump(repro, ["1"], ["output"], perturbation=1, output=tmp_path / "d")
    assert out.input.startswith("perturbation 1 (")
