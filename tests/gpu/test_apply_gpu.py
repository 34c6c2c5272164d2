"""`kerncap apply` on the GPU (issue 46, docs/apply.md): axpy_inplace run whole with a
variant standing in for its captured kernel. A faster correct variant (axpy_fast) passes
--check on all 10 launches and is timed; a variant planted to differ from its third
launch on (axpy_late3) is named at launch 2 (the 3rd), parameter 2 (y), 4 bytes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu


def _apply(repro, cubin, command, *extra: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "kerncap", "apply", str(repro), "--cubin", str(cubin), "--json",
                           *extra, "--", *command], capture_output=True, text=True, timeout=600)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_a_faster_correct_variant_passes_check_on_every_launch_and_is_timed(captures, variant_cubins,
                                                                            testapps_build):
    app = captures.get("axpy_inplace")
    rc, doc = _apply(app.reproducer, variant_cubins / "axpy_fast.cubin", app.spec.command(testapps_build),
                     "--check", "--runs", "5")
    print(json.dumps(doc, indent=1))
    assert rc == 0, doc
    assert doc["launches"] == 10 and doc["substituted"] == 10
    assert doc["check"]["mismatch"] is None and doc["check"]["compared"] == 10
    t = doc["timing"]
    assert len(t["kernel_ms"][0]) == 5 and len(t["kernel_ms"][1]) == 5
    assert t["kernel_speedup"] is not None and t["app_speedup"] is not None
    assert 0.0 < t["share"][0] <= 1.0


def test_a_variant_that_differs_from_its_third_launch_is_named_there(captures, variant_cubins, testapps_build):
    app = captures.get("axpy_inplace")
    rc, doc = _apply(app.reproducer, variant_cubins / "axpy_late3.cubin", app.spec.command(testapps_build),
                     "--check", "--runs", "0")
    print(json.dumps(doc, indent=1))
    assert rc == 1, doc
    m = doc["check"]["mismatch"]
    assert (m["launch"], m["param"]) == (2, 2)
    assert 1 <= m["bytes_differing"] <= 4  # y[0] alone: one float
