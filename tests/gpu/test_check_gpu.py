"""`kerncap check --junit` on the GPU: a corpus of ≥ 10 reproducers of the test apps plus
the axpy reproducer with a recorded best variant. The first run writes the baseline
(every case passes, byte-exact); then that variant is replaced by a deliberately slow
one (byte-exact, spinning before its store) and the second run reports exactly that
case as a regression (exit status 1, one <failure> in the JUnit XML). Also: the new
reproducers record their stack (driver, GPU UUID and clocks) and check sees no
difference on the machine that made them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

# With axpy: 10 reproducers (CUDA C++, cuBLAS, Triton, PyTorch eager), each extracted once per session.
CORPUS_APPS = ("pointer_table", "template_multi", "dyn_smem", "multistream", "torch_matmul", "triton_autotune",
               "triton_flash_attn", "triton_moe", "torch_expandable")
SLOW_AXPY = r"""
// Deliberately regressed axpy: the same bytes (fmaf like the original), after a spin.
__global__ void axpy_inplace(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  long long t0 = clock64();
  while (clock64() - t0 < 4000) {}
  y[i] = fmaf(a, x[i], y[i]);
}
"""


def _nvcc() -> str:
    for c in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if c and os.path.exists(c):
            return c
    pytest.skip("no nvcc")


def _history(variant_median_ms: float) -> dict:
    return {"version": 1, "variants": [
        {"id": 0, "time": "2026-01-01T00:00:00Z", "median_ms": 0.05, "validation": "pass", "cubin": None},
        {"id": 1, "time": "2026-01-01T00:00:01Z", "median_ms": variant_median_ms, "validation": "pass",
         "cubin": "variants/1.cubin", "note": "float4 loads"}]}


def _check(corpus: Path, *extra: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "kerncap", "check", str(corpus), "--json", "--iterations", "100",
                           *extra], capture_output=True, text=True, timeout=900)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    from kerncap import api

    print(api.format_check(api.CheckReport(
        cases=[api.CheckCase(**c) for c in report["cases"]], threshold_pct=report["threshold_pct"],
        baseline=report["baseline"], fanout=report["fanout"], seconds=report["seconds"], warnings=report["warnings"])))
    return proc.returncode, report


def test_check_corpus_baseline_then_a_regressed_variant(captures, vector_capture, variant_cubins, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in CORPUS_APPS:
        (corpus / name).symlink_to(captures.get(name).reproducer)  # read-only use: no copy of the big ones
    axpy = corpus / "axpy"
    shutil.copytree(vector_capture, axpy, ignore=shutil.ignore_patterns("variants"))
    (axpy / "variants").mkdir()
    shutil.copy(variant_cubins / "axpy_fast.cubin", axpy / "variants" / "1.cubin")
    (axpy / "history.json").write_text(json.dumps(_history(0.04)))

    base, junit1, junit2 = tmp_path / "base.json", tmp_path / "j1.xml", tmp_path / "j2.xml"
    status, first = _check(corpus, "--write-baseline", str(base), "--junit", str(junit1))
    assert len(first["cases"]) == 11  # 10 reproducers + axpy's recorded best variant
    assert status == 0, [(c["key"], c["message"]) for c in first["cases"] if c["status"] != "pass"]
    assert all(c["validation"]["mode"] == "exact" for c in first["cases"])
    axpy_cases = [c for c in first["cases"] if c["key"].startswith("axpy#")]
    assert [c["label"] for c in axpy_cases] == ["baseline", "v1"]
    assert not [w for c in axpy_cases for w in c["warnings"]], "a reproducer made here warns of another stack"

    slow_src = tmp_path / "axpy_slow.cu"
    slow_src.write_text(SLOW_AXPY)
    subprocess.run([_nvcc(), "-cubin", "-arch=sm_90", "-O3", "-o", str(axpy / "variants" / "1.cubin"), str(slow_src)],
                   check=True, capture_output=True)
    status, second = _check(corpus, "--baseline", str(base), "--threshold", "50", "--junit", str(junit2))
    assert status == 1
    bad = [c for c in second["cases"] if c["status"] != "pass"]
    assert [(c["key"], c["status"]) for c in bad] == [("axpy#v1", "regressed")], bad
    print(f"regressed variant: {bad[0]['message']}")
    failures = [tc for tc in ET.parse(junit2).getroot().iter("testcase") if tc.find("failure") is not None]
    assert [(tc.get("classname"), tc.get("name")) for tc in failures] == [("axpy", "v1")]


def test_new_reproducers_record_their_stack(vector_capture):
    from kerncap import api

    rec = json.loads((vector_capture / "reproducer.json").read_text())["provenance"]
    print("recorded stack:", json.dumps({k: rec[k] for k in ("kerncap", "driver", "cuda_driver", "gpu")}))
    assert rec["gpu"]["uuid"].startswith("GPU-") and rec["driver"] and rec["cuda_driver"] >= 12000
    assert rec["gpu"]["clocks"].get("max_sm_mhz")
    assert api.stack_differences(vector_capture) == []
    assert "stack       kerncap" in api.format_info(api.info(vector_capture))
