"""The workbench's only door into the engine. Engine modules are imported lazily (the
replay core loads libcuda only when used), and a missing part becomes a KerncapError
that says what is missing, never an ImportError traceback."""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from pathlib import Path

from kerncap.errors import KerncapError, NativeUnavailable

# A variant is timed interleaved with the captured cubin (kerncap.replay.significance)
# and validated on the captured input plus this many perturbed ones.
COMPARE_ROUNDS = 20
COMPARE_ITERATIONS = 10
PERTURBATIONS = 4


def engine_module(name: str):
    try:
        return importlib.import_module(f"kerncap.{name}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("kerncap"):
            raise KerncapError(
                f"kerncap.{name} is not part of this kerncap build",
                "update kerncap (pip install -U kerncap) to use this action",
            ) from None
        raise


def needs_gpu(exc: BaseException) -> bool:
    """True when the failure means "no GPU / no replay core here" rather than a bug."""
    return isinstance(exc, NativeUnavailable)


def load_profile(path: Path):
    return engine_module("profile").ProfileResult.load(path)


def extract(kernel: str, command: list[str], output: Path, dispatch: int):
    return engine_module("extract").extract(kernel, command, output=output, dispatch=dispatch)


def recompile(reproducer: Path):
    return engine_module("recompile").recompile(reproducer)


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
        self._client = None
        self._cap = None
        self._plan = None
        self._lock = threading.Lock()

    def _open(self):
        if self._client is None:
            cls = engine_module("replay.client").ReplayClient
            client = cls(self.reproducer)
            client.__enter__()
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

    def _time(self, rc, cubin: Path | None) -> Outcome:
        # The baseline goes through the same interleaved timing (alone): it also sets up
        # what the first variant's comparison would otherwise pay for (NVML, the floor).
        c = rc.compare_timing([] if cubin is None else [cubin], rounds=COMPARE_ROUNDS, iterations=COMPARE_ITERATIONS)
        p = c.programs[-1]
        out = Outcome(p.median_ms, min(p.times), p.spread_pct, "skipped", "")
        if p.interval is not None:
            iv = p.interval
            out.speedup, out.speedup_low, out.speedup_high = iv.speedup, iv.low, iv.high
            out.confidence, out.significant = iv.confidence, iv.significant
        return out

    def _validate(self, rc, cubin: Path | None, out: Outcome) -> None:
        diff = engine_module("replay.differential")
        try:
            capture = self._capture()
            options = diff.Options(perturb=PERTURBATIONS if cubin is not None else 0)
            plan = self._perturb_plan(capture)  # planned at the baseline already, for the first variant
            report = diff.TrustReport(None if cubin is None else str(cubin), options.perturb, options.seed,
                                      [diff.validate_one(rc, capture, cubin, options, plan=plan)])
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

    def _capture(self):
        if self._cap is None:
            self._cap = engine_module("capture.format").Capture.open(self.reproducer)
        return self._cap

    def _perturb_plan(self, capture):
        """Planned once per session: it samples the captured payloads."""
        if self._plan is None:
            self._plan = engine_module("replay.perturb").plan(capture)
        return self._plan

    def close(self) -> None:
        # Not under the lock: on hangup the server must go now, even mid-replay (that
        # worker then fails and its result is dropped).
        client, self._client = self._client, None
        if client is not None:
            client.__exit__(None, None, None)

