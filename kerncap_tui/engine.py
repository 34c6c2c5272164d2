"""The workbench's replay: one resident replay server per open reproducer, and what a
build reports. Every engine call of the workbench goes through `kerncap.api`."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from kerncap import api
from kerncap.errors import KerncapError, NativeUnavailable

# A variant is timed interleaved with the captured cubin (kerncap.replay.significance)
# and validated on the captured input plus this many perturbed ones.
COMPARE_ROUNDS = 20
COMPARE_ITERATIONS = 10
PERTURBATIONS = 4
# A set's members are timed one after the other (baseline and variant per member).
SET_ITERATIONS = 20


def needs_gpu(exc: BaseException) -> bool:
    """True when the failure means "no GPU / no replay core here" rather than a bug."""
    return isinstance(exc, NativeUnavailable)


class ResidentCompiler:
    """The build step of the live loop. A Triton reproducer compiles in a resident worker
    process (kerncap.api.compile_worker) started when the reproducer opens: Triton and the
    kernel module's imports are loaded and Triton's state is warm before the first save,
    and the compile does not hold this process's GIL. CUDA C++ reproducers compile here
    (nvcc's steps are subprocesses anyway)."""

    def __init__(self, reproducer: Path) -> None:
        self.reproducer = reproducer
        self._worker = api.compile_worker(reproducer)

    def warm(self) -> None:
        """Starts the worker's warm-up (returns at once)."""
        if self._worker is not None:
            self._worker.start()

    def recompile(self) -> api.RecompileResult:
        if self._worker is not None:
            return self._worker.recompile()
        return api.recompile(self.reproducer)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()


def open_set(path: Path) -> api.ReproducerSet | None:
    """The reproducer set at `path`, or None for anything else."""
    return api.open_set(path) if api.is_set(path) else None


def recompile_set(s: api.ReproducerSet) -> api.SetVariant:
    return api.recompile_set(s)


def run_set(s: api.ReproducerSet, variant: Path | None) -> api.SetRun:
    """Validate and time every member of a set (with `variant`: against the baseline, and
    validated on PERTURBATIONS perturbed inputs of every member too)."""
    options = api.TrustOptions(perturb=PERTURBATIONS if variant is not None else 0)
    return api.replay_set(s, cubin=variant, validate=True, options=options, iterations=SET_ITERATIONS)


@dataclass
class Outcome:
    median_ms: float | None
    min_ms: float | None
    spread_pct: float | None
    validation: str          # pass | fail | inconclusive | error | skipped
    detail: str              # one line for the log
    validation_detail: str = ""       # "exact · p4", "nondet tol", ... (TrustReport.short)
    speedup: float | None = None      # baseline / variant median, interleaved
    speedup_low: float | None = None  # its confidence interval
    speedup_high: float | None = None
    confidence: float | None = None
    significant: bool | None = None


class ResidentReplay:
    """One ReplayClient kept open for the app's lifetime (the replay server process owns
    the CUDA context and the VA reservations, which are expensive to redo per build).
    Calls are serialized: a cancelled build may still be finishing when the next starts."""

    def __init__(self, reproducer: Path) -> None:
        self.reproducer = reproducer
        self._client: api.ReplayClient | None = None
        self._cap: api.Capture | None = None
        self._plan: api.PerturbPlan | None = None
        self._lock = threading.Lock()

    def _open(self) -> api.ReplayClient:
        if self._client is None:
            client = api.ReplayClient(self.reproducer)
            client.start()
            self._client = client
        return self._client

    def run(self, cubin: Path | None, validate: bool = True) -> Outcome:
        """The baseline (cubin None): its timing and validation (determinism included).
        A variant: timed interleaved with the captured cubin (the speedup with its
        interval) and validated on the captured input and PERTURBATIONS perturbed ones."""
        with self._lock:
            rc = self._open()
            out = self._time(rc, cubin)
            if validate:
                self._validate(rc, cubin, out)
            return out

    def _time(self, rc: api.ReplayClient, cubin: Path | None) -> Outcome:
        # The baseline goes through the same interleaved timing (alone): it also sets up
        # what the first variant's comparison would otherwise pay for (NVML, the floor).
        c = api.compare(rc, [] if cubin is None else [cubin], rounds=COMPARE_ROUNDS, iterations=COMPARE_ITERATIONS)
        p = c.programs[-1]
        out = Outcome(p.median_ms, min(p.times), p.spread_pct, "skipped", "")
        if p.interval is not None:
            iv = p.interval
            out.speedup, out.speedup_low, out.speedup_high = iv.speedup, iv.low, iv.high
            out.confidence, out.significant = iv.confidence, iv.significant
        return out

    def _validate(self, rc: api.ReplayClient, cubin: Path | None, out: Outcome) -> None:
        try:
            capture = self._capture()
            options = api.TrustOptions(perturb=PERTURBATIONS if cubin is not None else 0)
            plan = self._perturb_plan(capture)  # planned at the baseline already, for the first variant
            report = api.validate_resident(rc, capture, cubin=cubin, options=options, plan=plan)
        except NativeUnavailable:
            raise
        except KerncapError as exc:
            out.validation, out.detail = "error", exc.message
            return
        out.validation = report.verdict
        out.validation_detail = report.short()
        if any(i.status == "variant fault" for i in report.inputs):
            out.validation = "error"  # a crash, not a wrong answer
        bad = [i for i in report.inputs if i.status not in ("pass", "baseline fault")]
        if bad:
            out.detail = "; ".join(f"{i.input}: {i.status}" + (f" ({', '.join(c.name for c in i.failures[:3])})"
                                                                 if i.failures else "") for i in bad[:3])

    def call(self, fn):
        """fn(client) on the resident replay server, serialized with the builds (the
        mismatch pane's maps and dumps)."""
        with self._lock:
            return fn(self._open())

    def capture(self) -> api.Capture:
        return self._capture()

    def _capture(self) -> api.Capture:
        if self._cap is None:
            self._cap = api.open_capture(self.reproducer)
        return self._cap

    def _perturb_plan(self, capture: api.Capture) -> api.PerturbPlan:
        """Planned once per session: it samples the captured payloads."""
        if self._plan is None:
            self._plan = api.perturb_plan(capture)
        return self._plan

    def close(self) -> None:
        # Not under the lock: on hangup the server must go now, even mid-replay (that
        # worker then fails and its result is dropped).
        client, self._client = self._client, None
        if client is not None:
            client.close()

