"""Issue 30 on the GPU: where a variant's output differs, and its arrays.

tile2d (testapps/cuda/tile2d, 1024 x 1024 float32 in 64 x 64 tiles) with three planted
bugs (variants/tile2d_*.cu): the last row never written (an off-by-one in the last
tile), rows 256-319 scaled by 2 (one row block), NaN in every 64th column (0 / 0).
For each: validate's report names the pattern; the arrays `dump` writes reproduce
validate's byte count exactly; the GPU's mismatch map equals the numpy reference
computed from those arrays, field for field. Also: two variants compared with each
other, a perturbed input's output, a faulting variant that is not dumped.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from .apps import TILE2D, app_env

pytestmark = pytest.mark.gpu

PLANTED = {
    "tile2d_last_tile": ("row 1,023 only", "never written"),
    "tile2d_row_scale": ("rows 256–319 only", "got = 2 × expected"),
    "tile2d_nan_div": ("every 64th column", "NaN in got where expected is finite"),
}


def say(capsys, text: str) -> None:
    with capsys.disabled():
        print(f"\n[mismatch] {text}", flush=True)


@pytest.fixture(scope="module")
def tile2d(testapps_build, tmp_path_factory) -> Path:
    from kerncap.capture.extract import extract

    work = tmp_path_factory.mktemp("tile2d")
    result = extract(TILE2D.kernel, TILE2D.command(testapps_build), output=work / "reproducer",
                     timeout=TILE2D.timeout, env=app_env(TILE2D, work))
    return Path(result.reproducer_dir)


@pytest.fixture(scope="module")
def client(tile2d):
    """The reproducer's open session (its replay server resident for the module)."""
    from kerncap import api

    with api.open_session(tile2d) as session:
        yield session


def failing_region(report):
    checks = report.reproducers[0].inputs[0].checks
    bad = [c for c in checks if not c.passed]
    assert len(bad) == 1, [c.name for c in bad]
    return bad[0]


@pytest.mark.parametrize("variant", sorted(PLANTED))
def test_planted_bug_named_dumped_and_mapped_alike(variant, tile2d, client, variant_cubins, tmp_path, capsys):
    from kerncap import api

    cubin = variant_cubins / f"{variant}.cubin"
    capture = api.open_capture(tile2d)
    out_region = capture.params[0].region
    report = client.validate(api.ValidateRequest(cubin=str(cubin), runs=1, region_shapes={out_region: (1024, 1024)}))
    assert report.verdict == "fail"
    check = failing_region(report)
    assert check.report is not None, check.report_error
    summary = check.report["summary"]
    say(capsys, f"{variant}: {check.mismatched_bytes} bytes differ; {summary}")
    for words in PLANTED[variant]:
        assert words in summary, summary
    text = api.format_trust_report(report)
    assert "where:" in text and "first: [" in text

    # The arrays: byte for byte what validate compared.
    out = client.dump(["arg:0"], ["pre", "output", "expected"], cubin=cubin, shape=(1024, 1024),
                      output=tmp_path / "dump")
    arrays = {a.state: np.load(a.path, mmap_mode="r") for a in out.arrays}
    assert arrays["output"].shape == (1024, 1024) and arrays["output"].dtype == np.float32
    differ = int(np.count_nonzero(arrays["output"].view(np.uint8) != arrays["expected"].view(np.uint8)))
    assert differ == check.mismatched_bytes
    sidecar = json.loads((tmp_path / "dump" / f"region{check.id}.json").read_text())
    assert sidecar["dtype"] == "float32" and sidecar["tensor"]["shape"] == [1024, 1024]

    # The GPU's map equals numpy's on the dumped arrays.
    gpu, = client.mismatch_maps(cubin=cubin, items=["arg:0"], shape=(1024, 1024), grid=(64, 128))
    cpu = api.mismatch_map_arrays(gpu.name, np.asarray(arrays["output"]), np.asarray(arrays["expected"]),
                                  np.asarray(arrays["pre"]), dtype="float32", view=gpu.view, grid=(64, 128))
    assert_same_map(gpu, cpu)
    assert gpu.computed == "gpu"
    say(capsys, f"{variant}: GPU map == numpy map ({gpu.notes[-1]})")


def assert_same_map(gpu, cpu) -> None:
    for name in ("mismatched_elements", "mismatched_bytes", "tail_bytes", "nan_errors", "inf_errors",
                 "outside_view", "stale", "max_abs", "max_rel", "grid_rows", "grid_cols"):
        assert getattr(gpu, name) == getattr(cpu, name), name
    for name in ("ratio_min", "ratio_max"):
        assert getattr(gpu, name) == getattr(cpu, name), name
    for name in ("err_hist", "ulp_hist", "cell_count", "cell_worst", "row_profile", "col_profile"):
        assert np.array_equal(getattr(gpu, name), getattr(cpu, name)), name
    for side in ("pre", "expected", "actual"):
        assert np.array_equal(gpu.value_hist[side], cpu.value_hist[side]), side
    assert [f.index for f in gpu.first] == [f.index for f in cpu.first]
    assert [f.coords for f in gpu.first] == [f.coords for f in cpu.first]
    assert gpu.cell_values.keys() == cpu.cell_values.keys()
    for k, v in cpu.cell_values.items():
        assert repr(gpu.cell_values[k]) == repr(v), k
    assert gpu.summary() == cpu.summary()


def test_tolerance_map_matches_numpy(tile2d, client, variant_cubins, tmp_path):
    from kerncap import api

    cubin = variant_cubins / "tile2d_row_scale.cubin"
    gpu, = client.mismatch_maps(cubin=cubin, items=["arg:0"], grid=(32, 32), atol=100.0, rtol=0.5)
    out = client.dump(["arg:0"], ["pre", "output", "expected"], cubin=cubin, output=tmp_path / "d")
    a = {x.state: np.load(x.path) for x in out.arrays}
    cpu = api.mismatch_map_arrays(gpu.name, a["output"], a["expected"], a["pre"], dtype="float32", view=gpu.view,
                                  grid=(32, 32), atol=100.0, rtol=0.5)
    assert gpu.mode == "tolerance" and 0 < gpu.mismatched_elements < 64 * 1024
    assert_same_map(gpu, cpu)


def test_two_variants_compared(tile2d, client, variant_cubins, capsys):
    from kerncap import api

    m, = client.mismatch_maps(cubin=variant_cubins / "tile2d_row_scale.cubin",
                           against=variant_cubins / "tile2d_last_tile.cubin", items=["arg:0"], shape=(1024, 1024))
    say(capsys, f"row_scale vs last_tile: {m.summary()}")
    assert "rows 256–319, row 1,023" in m.summary()
    assert m.expected_label.endswith("tile2d_last_tile.cubin")


def test_perturbed_output_of_the_captured_cubin(tile2d, client, tmp_path):
    from kerncap import api

    out = client.dump(["arg:0"], ["output", "expected"], perturbation=1, seed=0, output=tmp_path / "p")
    a = {x.state: np.load(x.path) for x in out.arrays}
    post = np.load(api.dump(tile2d, ["arg:0"], ["post"], output=tmp_path / "post").arrays[0].path)
    assert np.array_equal(a["output"].view(np.uint8), a["expected"].view(np.uint8))
    assert not np.array_equal(a["output"].view(np.uint8), post.view(np.uint8))  # colscale was redrawn
    assert "perturbation 1" in out.input


def test_faulting_variant_is_not_dumped(vector_capture, variant_cubins, tmp_path, capsys):
    from kerncap import api
    from kerncap.errors import KerncapError

    with pytest.raises(KerncapError) as err:
        api.dump(vector_capture, ["arg:2"], ["output"], cubin=variant_cubins / "axpy_oob.cubin",
                 output=tmp_path / "oob")
    say(capsys, f"axpy_oob: {err.value.message}")
    assert "faulted" in err.value.message and "ILLEGAL_ADDRESS" in err.value.message
    assert not list((tmp_path / "oob").glob("*.npy")) and not list((tmp_path / "oob").glob(".*tmp*"))


def test_cli_dump_and_validate_json(tile2d, variant_cubins, tmp_path):
    import subprocess
    import sys

    from kerncap import api

    cubin = variant_cubins / "tile2d_nan_div.cubin"
    rid = api.open_capture(tile2d).params[0].region
    v = subprocess.run([sys.executable, "-m", "kerncap", "validate", str(tile2d), "--cubin", str(cubin), "--runs", "1",
                        "--region-shape", f"{rid}=1024,1024", "--json"], capture_output=True, text=True, timeout=300)
    assert v.returncode == 1, v.stderr
    data = json.loads(v.stdout)
    bad = [r for r in data["regions"] if not r["passed"]]
    assert bad and bad[0]["report"]["nan"]["actual"] == 1024 * 16, bad[0].get("report_error")
    assert bad[0]["report"]["first"][0]["coords"] == [0, 0]
    d = subprocess.run([sys.executable, "-m", "kerncap", "dump", str(tile2d), "arg:0", "--cubin", str(cubin),
                        "-o", str(tmp_path / "cli"), "--json"], capture_output=True, text=True, timeout=300)
    assert d.returncode == 0, d.stderr
    files = {Path(a["path"]).name for a in json.loads(d.stdout)["arrays"]}
    assert files == {f"region{rid}.{s}.npy" for s in ("pre", "post", "output", "expected")}
    assert "every 64th column" in bad[0]["report"]["summary"]
