"""Triton and torch.compile reproducers end to end on the GPU: the hook's record is
attached, recompiling the unmodified source validates byte-exact, a pinned config that
changes the arithmetic fails byte-exact and passes with a tolerance, and the generated
reproducer.py runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu


def triton_reproducer(captures, app: str) -> Path:
    got = captures.get(app)
    record = json.loads((got.reproducer / "reproducer.json").read_text())
    assert record["sources"] and record["sources"]["kind"] == "triton", record.get("notes")
    assert record["sources"]["confidence"] == "exact", record["sources"]
    return got.reproducer


def mismatches(result) -> int:
    return sum(r.mismatched_bytes for r in result.regions)


@pytest.mark.parametrize("app", ["triton_autotune", "torch_compile"])
def test_unmodified_recompile_validates_byte_exact(captures, app):
    from kerncap.replay.client import ReplayClient
    from kerncap.triton import recompile

    repro = triton_reproducer(captures, app)
    res = recompile(repro)
    assert "parameter layout matches the capture" in res.log, res.log
    with ReplayClient(repro) as rc:
        result = rc.validate(cubin=res.cubin)
    assert result.passed, f"{app}: {mismatches(result)} bytes differ\n{res.log}"


def test_autotuned_kernel_record_holds_the_chosen_config(captures):
    repro = triton_reproducer(captures, "triton_autotune")
    spec = json.loads((repro / "source" / "triton.json").read_text())
    best = captures.get("triton_autotune").report["best"]
    assert spec["autotune_config"]["kwargs"]["BLOCK_SIZE"]["value"] == best["BLOCK_SIZE"]
    assert spec["options"]["num_warps"] == best["num_warps"]
    n = captures.get("triton_autotune").report["n"]
    assert spec["launch"]["grid"] == [-(-n // best["BLOCK_SIZE"]), 1, 1]  # programs, not threads


def test_other_num_warps_changes_the_launch_and_still_validates(captures):
    """An elementwise add is exact whatever num_warps: the variant must validate once
    replay launches it with the block size of its .launch.json."""
    from kerncap.replay.client import ReplayClient
    from kerncap.triton import recompile

    repro = triton_reproducer(captures, "triton_autotune")
    captured = json.loads((repro / "source" / "triton.json").read_text())["options"]["num_warps"]
    other = 8 if captured != 8 else 4
    res = recompile(repro, f"num_warps={other}")
    launch = json.loads(res.cubin.with_suffix(".launch.json").read_text())
    assert launch["block"] == [32 * other, 1, 1] and "block" in launch["changed"]
    with ReplayClient(repro) as rc:
        result = rc.validate(cubin=res.cubin)
    assert result.passed, f"{mismatches(result)} bytes differ with num_warps={other}"


def test_pinned_config_changing_rounding_fails_exact_and_passes_tolerance(captures):
    """gelu(x) * y + 1 compiles to an FMA; without FP fusion the rounding changes."""
    from kerncap.replay.client import ReplayClient
    from kerncap.triton import recompile, region_dtypes

    repro = triton_reproducer(captures, "torch_compile")
    got = captures.get("torch_compile")
    assert set(region_dtypes(repro, got.capture).values()) == {"float32"}
    res = recompile(repro, "enable_fp_fusion=False")
    with ReplayClient(repro) as rc:
        exact = rc.validate(cubin=res.cubin)
        tolerant = rc.validate(cubin=res.cubin, atol=1e-5, rtol=1e-5)
    changed = mismatches(exact)
    print(f"torch_compile without FP fusion: {changed} bytes differ from the captured output")
    assert not exact.passed and changed > 0
    assert tolerant.passed, f"{mismatches(tolerant)} bytes outside atol/rtol 1e-5"


def run_reproducer_py(repro: Path, *args: str) -> subprocess.CompletedProcess:
    import kerncap

    env = dict(os.environ)
    engine = str(Path(kerncap.__file__).resolve().parents[1])
    env["PYTHONPATH"] = engine + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, str(repro / "reproducer.py"), *args], cwd=repro, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("app", ["triton_autotune", "torch_compile"])
def test_reproducer_py_matches_the_capture(captures, app):
    repro = triton_reproducer(captures, app)
    proc = run_reproducer_py(repro, "--iterations", "20")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "DIFFERS" not in proc.stdout and "launches: median" in proc.stdout


def test_reproducer_py_pinned_config_needs_a_tolerance(captures):
    repro = triton_reproducer(captures, "torch_compile")
    exact = run_reproducer_py(repro, "--config", "enable_fp_fusion=False")
    assert exact.returncode == 1 and "DIFFERS" in exact.stdout, exact.stdout + exact.stderr
    tolerant = run_reproducer_py(repro, "--config", "enable_fp_fusion=False", "--atol", "1e-5", "--rtol", "1e-5")
    assert tolerant.returncode == 0, tolerant.stdout + tolerant.stderr
