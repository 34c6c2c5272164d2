"""The fan-out of check and sweep (kerncap.fleet.fanout) on the CPU: a local Dask
cluster and the process pool, one worker per "GPU" pinned with CUDA_VISIBLE_DEVICES,
compiles on compile workers, a worker dying mid-run (its job re-run, or reported after
too many deaths; nothing lost), and a scheduler that cannot be reached. The jobs here
are tests/fanout_jobs.py; test_check.py and test_sweep.py run kerncap's own jobs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import fanout_jobs
import pytest

from kerncap.errors import KerncapError, UsageError
from kerncap.fleet.fanout import DaskFanout, Job, ProcessFanout, SerialFanout, open_fanout

HERE = Path(__file__).resolve().parent
BACKENDS = ["processes", pytest.param("dask", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("distributed") is None, reason="dask[distributed] not installed"))]


@pytest.fixture(autouse=True)
def _importable(monkeypatch):
    # Worker processes import the job module by name.
    monkeypatch.setenv("PYTHONPATH", f"{HERE}:{HERE.parent / 'engine'}:{HERE.parent}")
    if str(HERE) not in sys.path:
        monkeypatch.syspath_prepend(str(HERE))


def fan(backend: str):
    return open_fanout(backend=backend, gpus=["0", "1"], compile_workers=2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_pinned_worker_per_gpu_and_compiles_on_compile_workers(backend):
    with fan(backend) as f:
        assert f.gpu_workers == 2
        gpu = f.run([Job(key=f"g{i}", gpu_fn=fanout_jobs.where, gpu_args=(0.3,)) for i in range(6)])
        piped = f.run([Job(key=f"c{i}", cpu_fn=fanout_jobs.compiled, cpu_args=(f"t{i}",), gpu_fn=fanout_jobs.where,
                           gpu_args=(0.0,)) for i in range(3)])
    assert all(r.ok for r in gpu + piped)
    assert {r.value["cvd"] for r in gpu} == {"0", "1"}  # both GPUs used, each worker pinned to one
    assert {r.value["name"] for r in gpu} == {"gpu-0", "gpu-1"}
    for r in piped:
        [c] = r.value["extra"]
        assert c["compiled_by"].startswith("compile")
        assert c["tag"] == "t" + r.key[1:]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_worker_dying_mid_run_has_its_job_rerun(backend, tmp_path):
    jobs = [Job(key=f"ok{i}", gpu_fn=fanout_jobs.where, gpu_args=(0.1,)) for i in range(4)]
    jobs.insert(2, Job(key="dies-once", gpu_fn=fanout_jobs.die_once, gpu_args=(str(tmp_path / "marker"),)))
    with fan(backend) as f:
        results = f.run(jobs)
    assert [r.key for r in results] == [j.key for j in jobs]  # nothing lost, in order
    assert all(r.ok for r in results), [r.error for r in results]
    assert results[2].value == "survived"
    if backend == "processes":
        assert results[2].attempts == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_job_that_always_kills_its_worker_is_reported(backend):
    jobs = [Job(key="a", gpu_fn=fanout_jobs.where), Job(key="killer", gpu_fn=fanout_jobs.die_always),
            Job(key="b", gpu_fn=fanout_jobs.where)]
    seen = []
    with fan(backend) as f:
        results = f.run(jobs, on_result=lambda r: seen.append(r.key))
    by = {r.key: r for r in results}
    assert by["a"].ok and by["b"].ok
    assert not by["killer"].ok and "died" in by["killer"].error
    assert sorted(seen) == ["a", "b", "killer"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_compile_worker_dying_is_rerun_too(backend, tmp_path):
    jobs = [Job(key="c", cpu_fn=fanout_jobs.die_once, cpu_args=(str(tmp_path / "m"),), gpu_fn=fanout_jobs.where,
                gpu_args=(0.0,))]
    with fan(backend) as f:
        [r] = f.run(jobs)
    assert r.ok and r.value["extra"] == ["survived"]


def test_serial_runs_here_in_order():
    f = SerialFanout()
    results = f.run([Job(key="x", cpu_fn=fanout_jobs.compiled, cpu_args=("t",), gpu_fn=fanout_jobs.where,
                         gpu_args=(0.0,)),
                     Job(key="bad", gpu_fn=fanout_jobs.where, gpu_args=("not a number",))])
    assert results[0].ok and results[0].value["extra"][0]["tag"] == "t"
    assert not results[1].ok and "TypeError" in results[1].error


def test_one_gpu_named_runs_here_pinned_to_it_and_nothing_else_is_touched(monkeypatch):
    """`--gpus 3` with nothing to spread (one GPU, no compiles; or --backend serial) runs
    in this process, and the replay servers it starts see GPU 3 only: CUDA_VISIBLE_DEVICES
    is set for the run and put back after it. Without --gpus the environment is left as
    it is. Mutation caught: the serial fan-out ignoring the GPU it was given (the replay
    ran on the machine's first GPU, not the one asked for)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    for backend in ("auto", "serial"):
        with open_fanout(backend=backend, gpus=["3"]) as f:
            assert isinstance(f, SerialFanout) and "CUDA_VISIBLE_DEVICES 3" in f.description
            [r] = f.run([Job(key="x", gpu_fn=fanout_jobs.where)])
        assert r.ok and r.value["cvd"] == "3" and r.value["pid"] == os.getpid()
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"  # put back
    with open_fanout(backend="serial") as f:  # no --gpus: the environment's own GPUs
        [r] = f.run([Job(key="x", gpu_fn=fanout_jobs.where)])
    assert r.value["cvd"] == "0,1,2,3"


def test_unreachable_scheduler_is_one_clear_error():
    pytest.importorskip("distributed")
    with pytest.raises(KerncapError) as info:
        open_fanout(scheduler="tcp://127.0.0.1:9", connect_timeout=2)
    assert info.value.exit_code == 3
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9 within 2 s" in info.value.message
    assert "after 2 s" in info.value.message  # distributed's own words: the timeout reached it
    assert "dask scheduler" in info.value.hint


def test_a_cluster_without_gpu_workers_is_refused():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None)
    try:
        with pytest.raises(KerncapError) as info:
            DaskFanout(scheduler=cluster.scheduler_address)
        assert "declares a GPU resource" in info.value.message and "--resources GPU=1" in info.value.hint
    finally:
        cluster.close()


def test_bad_options():
    with pytest.raises(UsageError):
        open_fanout(backend="threads")
    with pytest.raises(UsageError):
        ProcessFanout([], 1)
    with pytest.raises(UsageError):
        open_fanout(backend="processes", scheduler="tcp://x:1")


def test_one_gpu_with_compiles_to_run_spreads_them_over_compile_workers(monkeypatch):
    """`auto` with one GPU but configs to compile (a Triton sweep on one GPU) is not the
    serial fan-out: the compiles go to compile worker processes beside the GPU worker, so
    that they overlap the timings instead of running in this process between them (and
    the GPU worker is pinned). Without compiles the same one GPU runs here. Mutation
    caught: compiles left out of `auto`'s choice (one GPU always serial)."""
    monkeypatch.setattr("kerncap.fleet.fanout._dask_installed", lambda: False)  # the process pool, not Dask
    with open_fanout(backend="auto", gpus=["0"], compiles=True, compile_workers=1) as f:
        assert isinstance(f, ProcessFanout) and f.gpu_workers == 1
        assert "1 GPU worker(s) (CUDA_VISIBLE_DEVICES 0), 1 compile worker(s)" in f.description
    with open_fanout(backend="auto", gpus=["0"], compiles=False) as f:
        assert isinstance(f, SerialFanout)
