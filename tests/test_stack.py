"""Provenance of the stack (kerncap.core.stack): what extract records in reproducer.json,
what info shows, and what check compares. On the CPU the GPU facts are unknown (None),
never guessed; the GPU suite checks them on the H200 (tests/gpu/test_check_gpu.py)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from kerncap import __version__, api
from kerncap.core import stack

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "captures"


def test_app_python_is_recognised():
    assert stack.app_python(["python3", "app.py"]) is not None
    assert stack.app_python([sys.executable, "-m", "x"]) == sys.executable
    assert stack.app_python(["python3.12", "x.py"]) is not None
    assert stack.app_python(["./build/axpy"]) is None
    assert stack.app_python(["pythonista"]) is None
    assert stack.app_python([]) is None


def _no_gpu_facts(monkeypatch):
    """This machine as one without NVML or nvidia-smi, whatever it has, and no cached look."""
    monkeypatch.setattr(stack, "_recent_stacks", {})
    monkeypatch.setattr(stack, "gpu_facts", lambda uuid=None, index=None: {
        "name": None, "uuid": uuid, "driver": None, "cuda_driver": None, "clocks": {}, "source": None})


def test_capture_provenance_records_versions_env_and_the_gpu(monkeypatch):
    """Without NVML or nvidia-smi the capture's own GPU facts fill in (mutation caught:
    capture_provenance's fill from the manifest removed)."""
    _no_gpu_facts(monkeypatch)
    monkeypatch.setenv("TORCHINDUCTOR_MAX_AUTOTUNE", "1")
    monkeypatch.setenv("UNRELATED", "x")
    prov = stack.capture_provenance([sys.executable, "app.py"],
                                    {"name": "NVIDIA H200", "uuid": "GPU-123", "driver_version": 13000},
                                    {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert prov["kerncap"] == __version__
    assert prov["python_executable"] == sys.executable
    assert set(prov["packages"]) == {"torch", "triton", "numpy"}
    assert prov["env_changes"] == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert prov["env"]["TORCHINDUCTOR_MAX_AUTOTUNE"] == "1" and "UNRELATED" not in prov["env"]
    assert prov["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    # the capture's own facts fill in; nothing is invented
    assert prov["gpu"]["name"] == "NVIDIA H200" and prov["gpu"]["uuid"] == "GPU-123"
    assert prov["cuda_driver"] == 13000 and prov["driver"] is None and prov["gpu"]["source"] is None
    json.dumps(prov)


def test_capture_provenance_prefers_what_the_running_gpu_says(monkeypatch):
    monkeypatch.setattr(stack, "_recent_stacks", {})
    monkeypatch.setattr(stack, "gpu_facts", lambda uuid=None, index=None: {
        "name": "NVIDIA H200 NVL", "uuid": uuid, "driver": "580.159", "cuda_driver": 13010, "clocks": {},
        "source": "nvml"})
    prov = stack.capture_provenance(["./app"], {"name": "NVIDIA H200", "uuid": "GPU-123", "driver_version": 13000}, {})
    assert prov["gpu"]["name"] == "NVIDIA H200 NVL" and prov["cuda_driver"] == 13010 and prov["driver"] == "580.159"


def test_differences_compare_only_what_both_know():
    recorded = {"kerncap": "0.1.0", "driver": "580.159", "cuda_driver": 13000, "gpu": {"name": "NVIDIA H200"},
                "packages": {"torch": "2.11.0", "triton": None}}
    running = {"kerncap": "0.1.0", "driver": "575.51", "cuda_driver": None, "gpu": {"name": "NVIDIA H200"},
               "packages": {"torch": "2.10.0", "triton": "3.6.0"}}
    assert stack.differences(recorded, running) == ["NVIDIA driver: recorded 580.159, running 575.51",
                                                    "torch: recorded 2.11.0, running 2.10.0"]
    assert stack.differences(recorded, recorded) == []


def test_info_shows_the_recorded_stack(tmp_path):
    repro = tmp_path / "r"
    shutil.copytree(FIXTURES / "axpy_small", repro)
    rec = json.loads((repro / "reproducer.json").read_text())
    rec["provenance"] = {"kerncap": "0.1.0", "python": "3.12.3", "packages": {"torch": "2.11.0+cu130", "triton": "3.6.0"},
                         "driver": "580.159", "cuda_driver": 13000,
                         "gpu": {"name": "NVIDIA H200", "uuid": "GPU-8ec6", "clocks": {"sm_mhz": 1980, "max_sm_mhz": 1980,
                                                                                     "mem_mhz": 3201, "max_mem_mhz": 3201}},
                         "env_changes": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}}
    (repro / "reproducer.json").write_text(json.dumps(rec))
    summary = api.info(repro)
    assert summary["stack"]["packages"]["torch"] == "2.11.0+cu130"
    assert summary["stack"]["gpu"]["uuid"] == "GPU-8ec6"
    text = api.format_info(summary)
    assert "stack       kerncap 0.1.0, torch 2.11.0+cu130, triton 3.6.0, python 3.12.3; NVIDIA driver 580.159 (CUDA 13.0)" in text
    assert "gpu uuid    GPU-8ec6; clocks after the run: SM 1980 MHz (max 1980 MHz)" in text
    assert "env set     PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text
    assert api.stack_differences(repro, {**summary["stack"], "driver": "575.51"}) == [
        "NVIDIA driver: recorded 580.159, running 575.51"]


def test_older_reproducers_fall_back_to_the_manifest(tmp_path):
    repro = tmp_path / "r"
    shutil.copytree(FIXTURES / "axpy_small", repro)
    rec = json.loads((repro / "reproducer.json").read_text())
    rec.pop("provenance", None)  # as reproducers made before it was recorded
    (repro / "reproducer.json").write_text(json.dumps(rec))
    gpu = json.loads((repro / "capture" / "manifest.json").read_text())["provenance"]["gpu"]
    s = api.info(repro)["stack"]
    assert s["kerncap"] == "0.1.0" and s["cuda_driver"] == gpu["driver_version"] and s["gpu"]["name"] == gpu["name"]
    assert s["gpu"]["name"] == "NVIDIA H200" and s["packages"] == {} and s["driver"] is None


def test_one_look_serves_a_sets_members(monkeypatch):
    """A set's members are assembled in one go: one look at the stack (NVML and the
    package scan) serves them; another GPU, or a look older than the TTL, looks again;
    each caller gets its own copy."""
    looks = []

    def look(uuid, index, python):
        looks.append(uuid)
        return {"gpu": {"uuid": uuid, "clocks": {"sm_mhz": 1980}}, "packages": {}}

    now = [100.0]
    monkeypatch.setattr(stack, "_look_at_stack", look)
    monkeypatch.setattr(stack.time, "monotonic", lambda: now[0])
    first = stack.running_stack(uuid="GPU-1")
    first["gpu"]["clocks"]["sm_mhz"] = 0  # a caller's change stays its own
    second = stack.running_stack(uuid="GPU-1")
    assert looks == ["GPU-1"] and second["gpu"]["clocks"]["sm_mhz"] == 1980
    stack.running_stack(uuid="GPU-2")
    assert looks == ["GPU-1", "GPU-2"]
    now[0] += stack._STACK_TTL_S + 0.1
    stack.running_stack(uuid="GPU-1")
    assert looks == ["GPU-1", "GPU-2", "GPU-1"]


def test_a_look_for_one_python_does_not_answer_for_another(monkeypatch):
    """The packages come from the app's own Python: a look taken for kerncap's interpreter
    (a native app) does not answer, within its TTL, for a Python app's venv on the same
    GPU, nor one venv's for another's. Mutation caught: the cache keyed by the GPU alone."""
    looks = []

    def look(uuid, index, python):
        looks.append(python)
        return {"gpu": {"uuid": uuid}, "packages": {"torch": None if python is None else f"torch of {python}"}}

    monkeypatch.setattr(stack, "_look_at_stack", look)
    monkeypatch.setattr(stack.time, "monotonic", lambda: 100.0)
    assert stack.running_stack(uuid="GPU-1")["packages"] == {"torch": None}
    venv = stack.running_stack(uuid="GPU-1", python="/venv/bin/python3")
    assert venv["packages"] == {"torch": "torch of /venv/bin/python3"}
    other = stack.running_stack(uuid="GPU-1", python="/other/bin/python3")
    assert other["packages"] == {"torch": "torch of /other/bin/python3"}
    assert looks == [None, "/venv/bin/python3", "/other/bin/python3"]
    stack.running_stack(uuid="GPU-1", python="/venv/bin/python3")  # the same one again: answered from the look
    assert len(looks) == 3
