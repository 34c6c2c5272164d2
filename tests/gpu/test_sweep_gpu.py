"""`kerncap sweep` on the GPU: ≥ 32 Triton configs of the autotuned add kernel on one GPU
and on two (bench/sweep_scaling.py with a shorter timing), identical verdicts, the
throughput ratio printed; and the CLI on one GPU with the process-pool fan-out.
The two-GPU part needs two GPUs and Dask (the `cluster` extra's wheels)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .apps import REPO

pytestmark = pytest.mark.gpu


@pytest.fixture
def add_repro(captures, tmp_path) -> Path:
    repro = tmp_path / "add"
    shutil.copytree(captures.get("triton_autotune").reproducer, repro, ignore=shutil.ignore_patterns("variants"))
    return repro


def _gpus() -> list[str]:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    return [str(i) for i, line in enumerate(l for l in out.splitlines() if l.startswith("GPU "))]


def test_sweep_cli_on_one_gpu_with_processes(add_repro, tmp_path):
    junit = tmp_path / "sweep.xml"
    proc = subprocess.run([sys.executable, "-m", "kerncap", "sweep", str(add_repro), "--autotune", "--config",
                           "num_warps=2", "--gpus", "0", "--backend", "processes", "--iterations", "50", "--json",
                           "--junit", str(junit)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    print("\n".join(f"{e['status']:5} {e['label']:45} {e['timing']['median_ms'] * 1000 if e['timing'] else 0:8.2f} us"
                    for e in report["entries"]))
    assert len(report["entries"]) == 5  # captured + 3 autotune configs + num_warps=2
    assert all(e["status"] == "pass" for e in report["entries"]), report["entries"]  # an add is exact in any config
    assert "process pool" in report["fanout"]
    assert junit.is_file()


def test_sweep_of_32_configs_on_one_and_two_gpus(add_repro, tmp_path):
    pytest.importorskip("distributed")
    gpus = _gpus()
    if len(gpus) < 2:
        pytest.skip("needs two GPUs")
    out = tmp_path / "scaling.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "sweep_scaling.py"), "--reproducer", str(add_repro),
                           "--configs", "32", "--iterations", "3000", "--gpus", ",".join(gpus[:2]), "--json",
                           str(out)], capture_output=True, text=True, timeout=900)
    print(proc.stdout[-4000:], proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["verdicts_identical"]
    assert len(data["one"]["verdicts"]) == 33 and set(data["one"]["verdicts"].values()) == {"pass"}
    assert len(data["two"]["per_worker"]) == 2  # both GPU workers took entries
    print(f"sweep throughput ratio 2/1 GPUs: {data['ratio']:.2f}x (goal >= 1.8x)")
    assert data["ratio"] > 1.2
