"""Fan-out of `check` and `sweep` jobs over the GPUs of a machine or a cluster.

A `Job` is an optional CPU step (a compile) followed by a GPU step that receives the
CPU step's result. Three ways to run jobs, one interface (`Fanout.run`):

  * `DaskFanout` (pip install 'kerncap[cluster]'): Dask distributed. Without a
    scheduler address a local cluster is started: one single-threaded worker process
    per GPU, pinned with CUDA_VISIBLE_DEVICES and declaring the resource GPU=1, plus
    single-threaded compile workers declaring COMPILE=1 (the equivalent of dask-cuda's
    LocalCUDACluster, with CPU workers beside it). With `--scheduler ADDRESS` the
    cluster's own workers run the jobs: GPU workers must declare GPU=1 (docs/cluster.md).
    A worker that dies mid-job has its job re-run elsewhere by the scheduler; a job
    that killed its worker too often is reported (KilledWorker), the others finish.
  * `ProcessFanout`: concurrent.futures, one single-process pool per GPU (pinned the
    same way) and one pool for compiles; a pool whose process died is replaced and its
    job re-run, up to MAX_ATTEMPTS, then reported.
  * `SerialFanout`: everything in this process, one job after the other (one GPU).

GPU steps run one at a time per GPU, so timings never share a GPU.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import importlib.util
import logging
import multiprocessing
import os
import shutil
import subprocess
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kerncap.errors import EXIT_CANNOT_RUN, KerncapError, UsageError

MAX_ATTEMPTS = 3          # runs of one job whose worker process died, before it is reported
CONNECT_TIMEOUT_S = 10.0  # reaching an existing Dask scheduler
BACKENDS = ("auto", "dask", "processes", "serial")


@dataclass
class Job:
    key: str
    gpu_fn: Callable[..., Any]
    gpu_args: tuple = ()
    cpu_fn: Callable[..., Any] | None = None   # its result is passed as the GPU step's last argument
    cpu_args: tuple = ()


@dataclass
class JobResult:
    key: str
    value: Any = None
    error: str | None = None   # the job could not finish (worker died too often, a bug)
    attempts: int | None = 1   # None: the scheduler re-ran it as it saw fit (Dask)

    @property
    def ok(self) -> bool:
        return self.error is None


OnResult = Callable[[JobResult], None]


def visible_gpus() -> list[str]:
    """The GPUs to fan out over, as CUDA_VISIBLE_DEVICES entries: that variable's own
    list when set, else one entry per GPU `nvidia-smi -L` lists (none without a GPU)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [e.strip() for e in env.split(",") if e.strip()]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(l for l in out.stdout.splitlines() if l.startswith("GPU "))]


def default_compile_workers(n_gpus: int) -> int:
    return max(1, min(8, (os.cpu_count() or 2) - n_gpus))


class Fanout:
    """Runs jobs; `run` returns one JobResult per job, in job order, and calls
    `on_result` as each finishes."""

    description = ""
    gpu_workers = 1
    remote = False  # workers may be on other machines: ship reproducers unless paths are shared

    def run(self, jobs: Sequence[Job], on_result: OnResult | None = None) -> list[JobResult]:
        raise NotImplementedError

    def put(self, obj: Any) -> Any:
        """A handle on `obj` for job arguments (Dask sends it to each worker once)."""
        return obj

    def close(self) -> None:
        pass

    def __enter__(self) -> Fanout:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _finish(results: dict[str, JobResult], r: JobResult, on_result: OnResult | None) -> None:
    results[r.key] = r
    if on_result is not None:
        on_result(r)


def _ordered(jobs: Sequence[Job], results: dict[str, JobResult]) -> list[JobResult]:
    return [results[j.key] for j in jobs]


# -- in this process -----------------------------------------------------------------------------


class SerialFanout(Fanout):
    def __init__(self, gpu: str | None = None) -> None:
        """`gpu`: the CUDA_VISIBLE_DEVICES entry the replay servers started here get."""
        self.gpu = gpu
        self.description = "this process, one job at a time" + (f" (CUDA_VISIBLE_DEVICES {gpu})" if gpu else "")

    def run(self, jobs: Sequence[Job], on_result: OnResult | None = None) -> list[JobResult]:
        if self.gpu is None:
            return self._run(jobs, on_result)
        before = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = self.gpu  # inherited by the replay servers this run starts
        try:
            return self._run(jobs, on_result)
        finally:
            if before is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = before

    def _run(self, jobs: Sequence[Job], on_result: OnResult | None) -> list[JobResult]:
        results: dict[str, JobResult] = {}
        for job in jobs:
            try:
                args = job.gpu_args
                if job.cpu_fn is not None:
                    args = (*args, job.cpu_fn(*job.cpu_args))
                _finish(results, JobResult(job.key, job.gpu_fn(*args)), on_result)
            except Exception as exc:
                _finish(results, JobResult(job.key, error=f"{type(exc).__name__}: {exc}"), on_result)
        return _ordered(jobs, results)


# -- a process per GPU -----------------------------------------------------------------------------


def _pin_gpu(gpu: str, name: str) -> None:
    """Pool initializer: this process (and the replay servers it starts) sees one GPU."""
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    os.environ["KERNCAP_WORKER_NAME"] = name


def _name_worker(name: str) -> None:
    os.environ["KERNCAP_WORKER_NAME"] = name


class ProcessFanout(Fanout):
    def __init__(self, gpus: Sequence[str], compile_workers: int) -> None:
        if not gpus:
            raise UsageError("no GPU to fan out over", "pass --gpus 0,1 or run where nvidia-smi lists GPUs")
        self.gpus = list(gpus)
        self.compile_workers = compile_workers
        self.gpu_workers = len(self.gpus)
        self._ctx = multiprocessing.get_context("spawn")
        self._gpu_pools = [self._gpu_pool(i) for i in range(len(self.gpus))]
        self._cpu_pool: cf.ProcessPoolExecutor | None = None
        self.description = (f"process pool: {len(self.gpus)} GPU worker(s) (CUDA_VISIBLE_DEVICES "
                            f"{', '.join(self.gpus)}), {compile_workers} compile worker(s)")

    def _gpu_pool(self, i: int) -> cf.ProcessPoolExecutor:
        return cf.ProcessPoolExecutor(1, mp_context=self._ctx, initializer=_pin_gpu,
                                      initargs=(self.gpus[i], f"gpu-{self.gpus[i]}"))

    def _compile_pool(self) -> cf.ProcessPoolExecutor:
        if self._cpu_pool is None:
            self._cpu_pool = cf.ProcessPoolExecutor(self.compile_workers, mp_context=self._ctx,
                                                    initializer=_name_worker, initargs=("compile",))
        return self._cpu_pool

    def run(self, jobs: Sequence[Job], on_result: OnResult | None = None) -> list[JobResult]:
        results: dict[str, JobResult] = {}
        attempts: dict[str, int] = {}
        to_compile = deque(j for j in jobs if j.cpu_fn is not None)
        to_run: deque[tuple[Job, tuple]] = deque((j, ()) for j in jobs if j.cpu_fn is None)
        cpu_busy: dict[cf.Future, tuple[Job, cf.ProcessPoolExecutor]] = {}
        gpu_busy: dict[cf.Future, tuple[Job, tuple, int]] = {}
        idle = deque(range(len(self.gpus)))

        def died(job: Job, requeue: Callable[[], None]) -> None:
            attempts[job.key] = attempts.get(job.key, 1) + 1
            if attempts[job.key] > MAX_ATTEMPTS:
                _finish(results, JobResult(job.key, error=f"its worker process died {MAX_ATTEMPTS} times running it",
                                           attempts=MAX_ATTEMPTS), on_result)
            else:
                requeue()

        while to_compile or to_run or cpu_busy or gpu_busy:
            while to_compile and len(cpu_busy) < self.compile_workers:
                job = to_compile.popleft()
                pool = self._compile_pool()
                cpu_busy[pool.submit(job.cpu_fn, *job.cpu_args)] = (job, pool)
            while to_run and idle:
                (job, extra), i = to_run.popleft(), idle.popleft()
                gpu_busy[self._gpu_pools[i].submit(job.gpu_fn, *job.gpu_args, *extra)] = (job, extra, i)
            done, _ = cf.wait([*cpu_busy, *gpu_busy], return_when=cf.FIRST_COMPLETED)
            for fut in done:
                if fut in cpu_busy:
                    job, pool = cpu_busy.pop(fut)
                    try:
                        to_run.append((job, (fut.result(),)))
                    except cf.process.BrokenProcessPool:
                        if self._cpu_pool is pool:  # replace it once, whichever of its jobs notices first
                            pool.shutdown(wait=False, cancel_futures=True)
                            self._cpu_pool = None
                        died(job, lambda job=job: to_compile.appendleft(job))
                    except Exception as exc:
                        _finish(results, JobResult(job.key, error=f"{type(exc).__name__}: {exc}",
                                                   attempts=attempts.get(job.key, 1)), on_result)
                else:
                    job, extra, i = gpu_busy.pop(fut)
                    try:
                        value = fut.result()
                        _finish(results, JobResult(job.key, value, attempts=attempts.get(job.key, 1)), on_result)
                    except cf.process.BrokenProcessPool:
                        self._gpu_pools[i].shutdown(wait=False, cancel_futures=True)
                        self._gpu_pools[i] = self._gpu_pool(i)
                        died(job, lambda job=job, extra=extra: to_run.appendleft((job, extra)))
                    except Exception as exc:
                        _finish(results, JobResult(job.key, error=f"{type(exc).__name__}: {exc}",
                                                   attempts=attempts.get(job.key, 1)), on_result)
                    idle.append(i)
        return _ordered(jobs, results)

    def close(self) -> None:
        for pool in [*self._gpu_pools, self._cpu_pool]:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        self._gpu_pools, self._cpu_pool = [], None


# -- Dask distributed --------------------------------------------------------------------------------


def _dask():
    try:
        import distributed
    except ImportError:
        raise KerncapError("Dask distributed is not installed",
                         "pip install 'kerncap[cluster]' (or leave out --scheduler / --backend dask: a process "
                         "per GPU needs nothing extra)") from None
    return distributed


class DaskFanout(Fanout):
    def __init__(self, *, scheduler: str | None = None, gpus: Sequence[str] = (), compile_workers: int = 2,
                 connect_timeout: float = CONNECT_TIMEOUT_S) -> None:
        distributed = _dask()
        self._distributed = distributed
        self.cluster = None
        if scheduler:
            self.client = self._connect(scheduler, connect_timeout)
            self.remote = True
        else:
            if not gpus:
                raise UsageError("no GPU to fan out over", "pass --gpus 0,1 or run where nvidia-smi lists GPUs")
            self.cluster = self._local_cluster(list(gpus), compile_workers)
            self.client = distributed.Client(self.cluster)
        workers = self.client.scheduler_info(n_workers=-1).get("workers", {})
        self.gpu_workers = sum(1 for w in workers.values() if "GPU" in (w.get("resources") or {}))
        self.compile_slots = sum(1 for w in workers.values() if "COMPILE" in (w.get("resources") or {}))
        if not self.gpu_workers:
            self.close()
            raise KerncapError(
                f"no worker of the Dask cluster at {scheduler} declares a GPU resource ({len(workers)} worker(s))",
                f"start one worker per GPU with `CUDA_VISIBLE_DEVICES=N dask worker {scheduler} --nthreads 1 "
                "--resources GPU=1` (or `dask cuda worker ... --resources GPU=1`); docs/cluster.md",
                exit_code=EXIT_CANNOT_RUN)
        where = f"Dask cluster at {scheduler}" if scheduler else "local Dask cluster"
        self.description = (f"{where}: {self.gpu_workers} GPU worker(s)"
                            + (f" (CUDA_VISIBLE_DEVICES {', '.join(gpus)})" if not scheduler else "")
                            + f", {self.compile_slots} compile worker(s)")

    def _connect(self, address: str, timeout: float):
        try:
            return self._distributed.Client(address, timeout=f"{timeout}s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise KerncapError(
                f"cannot reach the Dask scheduler at {address} within {timeout:g} s ({type(exc).__name__}: {exc})",
                "check the address (tcp://HOST:8786) and that `dask scheduler` runs there; without --scheduler "
                "kerncap starts a local cluster", exit_code=EXIT_CANNOT_RUN) from None

    def _local_cluster(self, gpus: list[str], compile_workers: int):
        import dask

        d = self._distributed
        common = {"nthreads": 1, "host": "127.0.0.1", "dashboard_address": None}
        workers = {
            f"gpu-{g}": {"cls": d.Nanny, "options": {**common, "name": f"gpu-{g}", "resources": {"GPU": 1},
                                                      "env": {"CUDA_VISIBLE_DEVICES": g, "KERNCAP_WORKER_NAME": f"gpu-{g}"}}}
            for g in gpus
        }
        for i in range(compile_workers):
            workers[f"compile-{i}"] = {"cls": d.Nanny, "options": {**common, "name": f"compile-{i}",
                                                                   "resources": {"COMPILE": 1},
                                                                   "env": {"KERNCAP_WORKER_NAME": f"compile-{i}"}}}
        scheduler = {"cls": d.Scheduler, "options": {"host": "127.0.0.1", "dashboard_address": None}}
        # A job whose worker dies is re-run (MAX_ATTEMPTS runs in all), then reported.
        with dask.config.set({"distributed.scheduler.allowed-failures": MAX_ATTEMPTS - 1}):
            return d.SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.ERROR)

    def put(self, obj: Any) -> Any:
        return self.client.scatter(obj, hash=False)

    def run(self, jobs: Sequence[Job], on_result: OnResult | None = None) -> list[JobResult]:
        d = self._distributed
        tag = uuid.uuid4().hex[:8]
        compile_resources = {"COMPILE": 1} if self.compile_slots else None
        futures = {}
        for n, job in enumerate(jobs):
            args = job.gpu_args
            if job.cpu_fn is not None:
                cpu = self.client.submit(job.cpu_fn, *job.cpu_args, key=f"kerncap-cpu-{tag}-{n}", pure=False,
                                         resources=compile_resources)
                args = (*args, cpu)
            fut = self.client.submit(job.gpu_fn, *args, key=f"kerncap-gpu-{tag}-{n}", pure=False,
                                     resources={"GPU": 1})
            futures[fut] = job
        results: dict[str, JobResult] = {}
        for fut in d.as_completed(list(futures)):
            job = futures[fut]
            try:
                _finish(results, JobResult(job.key, fut.result(), attempts=None), on_result)
            except d.KilledWorker as exc:
                _finish(results, JobResult(job.key, error=f"its worker died each time it ran it ({exc})",
                                           attempts=None), on_result)
            except Exception as exc:
                _finish(results, JobResult(job.key, error=f"{type(exc).__name__}: {exc}", attempts=None), on_result)
        return _ordered(jobs, results)

    def close(self) -> None:
        client, cluster = getattr(self, "client", None), self.cluster
        self.client, self.cluster = None, None
        if client is not None:
            client.close()
        if cluster is not None:
            try:
                cluster.close()
            except AssertionError:
                # distributed's teardown race: a nanny still restarting a worker a job killed
                # is asked to join a process not yet started ("can only join a started
                # process"; a fresh-clone CI run, 2026-12-05). The work is done: close once
                # more, quietly, rather than end a finished run in a traceback.
                with contextlib.suppress(Exception):
                    cluster.close()


def open_fanout(*, backend: str = "auto", gpus: Sequence[str] | None = None, scheduler: str | None = None,
                compile_workers: int | None = None, compiles: bool = False,
                connect_timeout: float = CONNECT_TIMEOUT_S) -> Fanout:
    """The fan-out for these options. `gpus`: CUDA_VISIBLE_DEVICES entries (default:
    visible_gpus(), or one unpinned worker when there is no GPU, so that GPU steps say
    so). `auto`: Dask when installed and there is something to spread (several GPUs, or
    compiles), else a process per GPU; one GPU and nothing to compile runs here."""
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}", f"use one of: {', '.join(BACKENDS)}")
    if scheduler:
        if backend not in ("auto", "dask"):
            raise UsageError(f"--scheduler needs the dask backend, not {backend}", "drop --backend")
        return DaskFanout(scheduler=scheduler, connect_timeout=connect_timeout)
    chosen = list(gpus) if gpus is not None else None
    gpus = chosen or visible_gpus() or ["0"]
    workers = compile_workers or default_compile_workers(len(gpus))
    if backend == "auto":
        spread = len(gpus) > 1 or compiles
        backend = "serial" if not spread else "dask" if _dask_installed() else "processes"
    if backend == "serial":
        return SerialFanout(gpu=chosen[0] if chosen else None)
    if backend == "processes":
        return ProcessFanout(gpus, workers)
    return DaskFanout(gpus=gpus, compile_workers=workers)


def _dask_installed() -> bool:
    return importlib.util.find_spec("distributed") is not None
