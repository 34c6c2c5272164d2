"""Multi-process jobs (issue 13) on two GPUs: a 2-rank torchrun tensor-parallel app
(NCCL all-reduce, then a Triton kernel whose inputs differ per rank). Capture rank 1:
its own device and data, checked against the buffers the app reports; the job ends
without hanging although rank 0 is blocked in an all-reduce, and leaves no process
behind; the capture replays byte-exact on device 1 and on device 0. Also: a rank
beyond the world size, and NCCL's own kernels as targets.

Needs two GPUs of one host (the nvidia-h200-x2 machine, which keeps NCCL_NVLS_ENABLE=0
and TORCH_SYMM_MEM_DISABLE_MULTICAST=1 set: the app inherits them untouched)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from kerncap.errors import KerncapError

from .apps import PYAPPS

pytestmark = pytest.mark.gpu


def _gpu_count() -> int:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


@pytest.fixture(scope="module", autouse=True)
def _two_gpus():
    n = _gpu_count()
    if n < 2:
        pytest.skip(f"needs 2 GPUs of one host (this machine has {n}); run on the nvidia-h200-x2 machine")


def torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            str(PYAPPS / "tp_allreduce.py"), *args]


def job_env(work) -> dict[str, str]:
    env = dict(os.environ)  # NCCL_NVLS_ENABLE / TORCH_SYMM_MEM_DISABLE_MULTICAST stay as the machine set them
    env["KC_TESTAPP_REPORT"] = str(work / "report-rank{rank}.json")
    env["KC_TESTAPP_DONE"] = str(work / "done-rank{rank}")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PYAPPS), env.get("PYTHONPATH")) if p)
    return env


def alive(pid: int) -> bool:
    from kerncap.core.fsio import pid_alive

    if not pid_alive(pid):
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def rank1(tmp_path_factory):
    from kerncap.capture.extract import extract
    from kerncap.capture.selection import Selection

    work = tmp_path_factory.mktemp("tp")
    t0 = time.monotonic()
    res = extract("kc_tp_bias_act", torchrun(), output=work / "reproducer", timeout=240, env=job_env(work),
                  selection=Selection(rank=1))
    return res, work, time.monotonic() - t0


def test_rank1_captures_its_own_device_and_data(rank1):
    import numpy as np

    res, work, seconds = rank1
    cap = res.capture
    report = json.loads((work / "report-rank1.json").read_text())
    prov = cap.provenance
    print(f"\ncaptured in {seconds:.1f} s: rank {prov['job']} pid {prov['pid']}, gpu {prov['gpu']}")
    print("notes: " + " | ".join(res.notes))
    assert prov["job"]["rank"] == 1 and prov["job"]["world_size"] == 2 and prov["job"]["local_rank"] == 1
    assert prov["pid"] == report["pid"] and prov["gpu"]["ordinal"] == report["device"] == 1
    assert prov["gpu"]["uuid"].startswith("GPU-")
    region = cap.region_of(report["bias"])
    assert region is not None, "rank 1's bias is in the closure"
    raw = cap.read_bytes(region.pre, region.size)
    off = report["bias"] - region.base
    captured = np.frombuffer(raw, dtype=np.float32, count=64 * 1024, offset=off)
    mine = np.fromfile(work / "bias-rank1.bin", dtype=np.float32)
    theirs = np.fromfile(work / "bias-rank0.bin", dtype=np.float32)
    assert np.array_equal(captured, mine) and not np.array_equal(captured, theirs)
    scale = [p for p in cap.params if p.size == 4][0]
    assert np.frombuffer(scale.value, dtype=np.float32)[0] == 2.0  # rank 1's scale, 1 + rank
    from kerncap.reproducer.info import format_summary, summarize

    text = format_summary(summarize(res.reproducer_dir))
    assert "job         rank 1 of 2 (RANK), local rank 1" in text and "device 1" in text


def test_the_job_ends_without_hanging_or_orphans(rank1):
    res, work, seconds = rank1
    out = res.outcome
    print(f"\njob stopped after {out.seconds:.1f} s: {out.stop.describe()}")
    assert out.stopped and not out.timed_out  # stopped by kerncap, not by its --timeout
    assert out.stop.processes >= 2  # torchrun and rank 0 at least (rank 1 left after its capture)
    assert out.stop.leftover == []
    pids = [json.loads((work / f"report-rank{r}.json").read_text())["pid"] for r in (0, 1)]
    assert not any(alive(p) for p in pids), "no worker may outlive the job"
    assert not (work / "done-rank0").exists()  # rank 0 was blocked in NCCL, not finished


@pytest.mark.parametrize("device", [1, 0])
def test_replay_validates_on_either_gpu(rank1, device):
    from kerncap.replay.client import ReplayClient
    from kerncap.replay.results import format_validation

    res, _, _ = rank1
    with ReplayClient(res.reproducer_dir, device=device) as rc:
        v = rc.validate()
        t = rc.replay(iterations=10)
    print("\n" + format_validation(v).splitlines()[0] + f"; median {t.median_ms * 1e3:.2f} us")
    assert v.passed and v.device["ordinal"] == device and t.device["ordinal"] == device


def test_a_rank_beyond_the_world_size_stops_the_job(tmp_path):
    from kerncap.capture.extract import extract
    from kerncap.capture.selection import Selection

    t0 = time.monotonic()
    with pytest.raises(KerncapError) as exc:
        extract("kc_tp_bias_act", torchrun(), output=tmp_path / "r", timeout=240, env=job_env(tmp_path),
                selection=Selection(rank=5))
    print(f"\n{exc.value} ({time.monotonic() - t0:.1f} s)")
    assert "--rank 5 but the job's world size is 2" in exc.value.message


def test_nccl_kernels_are_refused_as_targets(tmp_path):
    from kerncap.capture.extract import extract
    from kerncap.capture.selection import Selection

    with pytest.raises(KerncapError) as exc:
        extract("AllReduce", torchrun(), output=tmp_path / "r", match="regex", timeout=240, env=job_env(tmp_path),
                selection=Selection(rank=1))
    print(f"\n{exc.value}")
    assert "matches only NCCL's own kernels" in exc.value.message
