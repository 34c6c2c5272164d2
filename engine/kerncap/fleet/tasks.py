"""What a worker does for `check` and `sweep`: validate and time one variant of one
reproducer on its GPU, or compile one Triton config on a CPU.

Every function here is a top-level function with plain, picklable arguments and
results (a Dask worker or a pool process receives them), and never raises for
something the user can fix: a KerncapError becomes a failed `Step` with its message
and hint, so nothing depends on exceptions surviving the trip between processes.

A GPU worker keeps one open session per reproducer (kerncap.session.pool) for its
lifetime, and validates and times through it as every other front end does, so a sweep's variants after the first cost only their kernel. Workers
are pinned to their GPU with CUDA_VISIBLE_DEVICES and replay on ordinal 0 of what they
see; the serial path (no fan-out) uses the ordinal it is given.
"""

from __future__ import annotations

import atexit
import os
import platform
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kerncap.core.fsio import write_atomic
from kerncap.core.option import check_fields
from kerncap.core.stack import running_stack
from kerncap.errors import KerncapError
from kerncap.fleet.ship import Bundle, materialize
from kerncap.recompile import recompile
from kerncap.replay.differential import TrustReport
from kerncap.reproducer.format import Capture
from kerncap.session import options as opt
from kerncap.session.options import ReplayRequest, ValidateRequest
from kerncap.session.pool import SessionPool
from kerncap.reproducer.variants import VARIANTS, variants_dir

OK, FAIL, ERROR, SKIPPED = "ok", "fail", "error", "skipped"


@dataclass
class Step:
    name: str            # open | compile | validate | time
    gpu: bool            # needs a GPU (a CPU-only machine reports these as errors, marked)
    status: str          # ok | fail (a verdict) | error (could not run) | skipped
    seconds: float = 0.0
    message: str = ""
    hint: str | None = None


FLEET_ITERATIONS = replace(opt.REPLAY_ITERATIONS, default=50)
FLEET_WARMUP = replace(opt.REPLAY_WARMUP, default=5)
FLEET_PERTURB = replace(opt.PERTURB, help="also validate each variant on K perturbed inputs against the captured "
                        "kernel (docs/replay.md)")


@dataclass(frozen=True)
class MeasureRequest:
    """How `check` and `sweep` validate and time each variant: a ValidateRequest's options
    (the same declarations: `validation()` copies them by name) and a replay's, on the
    fan-out's workers."""
    validate: bool = True
    time: bool = True
    iterations: int = FLEET_ITERATIONS.field()
    warmup: int = FLEET_WARMUP.field()
    flush_l2: bool = opt.FLUSH_L2.field()
    warm_l2: bool = opt.WARM_L2.field()
    atol: float | None = opt.ATOL.field()
    rtol: float | None = opt.RTOL.field()
    dtype: str | None = opt.DTYPE.field()
    region_dtypes: dict[int, str] = opt.REGION_DTYPES.field()
    # Validation you can trust (docs/replay.md): with perturb K > 0 the variant must also
    # agree with the captured kernel on K perturbed inputs (seed, regions in keep never
    # redrawn); runs > 1 first replays the captured kernel that often to detect
    # nondeterminism.
    perturb: int = FLEET_PERTURB.field()
    seed: int = opt.SEED.field()
    keep: tuple[int, ...] = opt.KEEP.field()
    runs: int = opt.RUNS.field()
    replay_timeout: float | None = opt.REPLAY_TIMEOUT.field()  # seconds per request; a hung variant is killed
    device: int = 0            # GPU ordinal as the worker sees it
    server_cmd: tuple[str, ...] | None = None   # the replay server command (tests use a stand-in)

    def checked(self) -> MeasureRequest:
        """Bounds, and the validation's own policy (per-region dtypes alone compare
        element-wise: ValidateRequest.checked)."""
        check_fields(self)
        opt.check_l2(self)
        v = self.validation(None).checked()
        return replace(self, dtype=v.dtype, region_dtypes=v.region_dtypes, keep=v.keep)

    def validation(self, cubin: str | None) -> ValidateRequest:
        shared = {o.name for o in opt.options_of(ValidateRequest)} & {o.name for o in opt.options_of(self)}
        return ValidateRequest(cubin=cubin, **{name: getattr(self, name) for name in shared if name != "cubin"})


@dataclass
class Outcome:
    """One variant of one reproducer, as a worker measured it."""
    reproducer: str
    label: str               # baseline | v3 | a config | a cubin's name
    cubin: str | None        # None: the captured cubin
    steps: list[Step] = field(default_factory=list)
    validation: dict[str, Any] | None = None  # passed, mode, failing regions
    timing: dict[str, Any] | None = None      # median_ms, min_ms, max_ms, spread_pct, iterations, warmup
    worker: dict[str, Any] = field(default_factory=dict)
    stack: dict[str, Any] | None = None       # the worker's running stack
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """fail if a verdict failed, else error if a step could not run, else ok."""
        states = {s.status for s in self.steps}
        return FAIL if FAIL in states else ERROR if ERROR in states else OK

    @property
    def problem(self) -> Step | None:
        return next((s for s in self.steps if s.status in (FAIL, ERROR)), None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status
        return d


# -- worker state ------------------------------------------------------------------------------

_state_lock = threading.Lock()
_pool: SessionPool | None = None
_stack: dict[str, Any] | None = None


def worker_pool(options: MeasureRequest) -> SessionPool:
    """This process's open sessions (created on first use, closed at exit)."""
    global _pool
    with _state_lock:
        wanted = (options.device, options.replay_timeout, options.server_cmd)
        if _pool is None or (_pool.device, _pool.timeout, _pool.server_cmd) != wanted:
            if _pool is not None:
                _pool.close_all()
            _pool = SessionPool(device=options.device, max_resident=2, timeout=options.replay_timeout,
                                server_cmd=options.server_cmd)
            atexit.register(_pool.close_all)
        return _pool


def worker_identity(options: MeasureRequest | None = None) -> dict[str, Any]:
    return {"host": platform.node(), "pid": os.getpid(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "device": options.device if options else None,
            "name": os.environ.get("KERNCAP_WORKER_NAME")}


def worker_stack(options: MeasureRequest) -> dict[str, Any]:
    """The running stack of this worker's GPU (asked once per process)."""
    global _stack
    with _state_lock:
        if _stack is None:
            _stack = running_stack(index=None if os.environ.get("CUDA_VISIBLE_DEVICES") else options.device)
        return _stack


# -- steps -----------------------------------------------------------------------------------


def _step(name: str, gpu: bool, fn, *args):
    """Run fn(*args) as a step: (Step, value or None)."""
    start = time.monotonic()
    try:
        value = fn(*args)
        return Step(name, gpu, OK, time.monotonic() - start), value
    except KerncapError as exc:
        return Step(name, gpu, ERROR, time.monotonic() - start, exc.message, exc.hint), None
    except OSError as exc:
        return Step(name, gpu, ERROR, time.monotonic() - start, f"{exc.strerror or exc} ({exc.filename})",
                    "check the reproducer's files and permissions"), None


def resolve(reproducer: str | Bundle) -> str:
    """A reproducer path on this worker: the path itself, or a shipped bundle materialized
    in the worker's cache (and hydrated from its store when its payloads are there)."""
    return str(materialize(reproducer)) if isinstance(reproducer, Bundle) else str(reproducer)


def measure(reproducer: str | Bundle, label: str, cubin: str | None, options: MeasureRequest,
            files: dict[str, bytes] | None = None) -> Outcome:
    """Validate and time one variant on this worker's GPU. `cubin` is relative to the
    reproducer (or absolute); `files` are written into the reproducer first (a compiled
    variant shipped from a compile worker: name -> bytes under variants/)."""
    out = Outcome(reproducer="", label=label, cubin=cubin, worker=worker_identity(options))
    step, path = _step("open", False, _open, reproducer, files or {})
    out.steps.append(step)
    if path is None:
        return out
    out.reproducer = path
    cubin_path = None if cubin is None else str(Path(path) / cubin)
    pool = worker_pool(options)
    out.stack = worker_stack(options)
    if options.validate:
        step = _validate(pool, path, cubin_path, options, out)
        out.steps.append(step)
        if step.status != OK:
            if options.time:
                out.steps.append(Step("time", True, SKIPPED, message="not timed: validation did not pass"))
            return out
    if options.time:
        request = ReplayRequest(cubin=cubin_path, iterations=options.iterations, warmup=options.warmup,
                                flush_l2=options.flush_l2, warm_l2=options.warm_l2)
        step, r = _step("time", True, pool.run, path, lambda s: s.replay(request))
        if r is not None:
            out.timing = {"median_ms": r.median_ms, "min_ms": r.min_ms, "max_ms": r.max_ms,
                          "spread_pct": r.spread_pct, "iterations": r.iterations, "warmup": r.warmup,
                          "flush_l2": r.flush_l2, "warm_l2": r.warm_l2}
        out.steps.append(step)
    return out


def _validate(pool: SessionPool, path: str, cubin: str | None, options: MeasureRequest, out: Outcome) -> Step:
    """The session's validation (kerncap.replay.differential: determinism, the captured
    input, perturbed inputs), as `kerncap validate` runs it."""
    request = options.validation(cubin)
    step, report = _step("validate", True, pool.run, path, lambda s: s.validate(request))
    if report is not None:
        out.validation = trust_summary(report)
        if report.verdict == "fail":
            step.status, step.message = FAIL, report.summary() + _what_differs(report)
        elif report.verdict == "inconclusive":
            step.status, step.message = ERROR, report.summary()
            step.hint = "see `kerncap validate DIR --perturb K` for what could not be judged"
    return step


def _what_differs(report: TrustReport) -> str:
    """"; 2 of 5 regions/globals differ from the captured post-state (byte-exact)"."""
    bad = next((i for i in report.inputs if i.status in ("fail", "variant fault")), None)
    if bad is None:
        return ""
    if bad.status == "variant fault":
        return f"; the variant faulted on the {bad.input}"
    against = "the captured post-state" if bad.input == "captured input" else f"the captured kernel's ({bad.input})"
    checked = len(report.reproducers[0].inputs[0].checks) if report.reproducers and report.reproducers[0].inputs else 0
    return f"; {len(bad.failures)} of {checked} regions/globals differ from {against} ({bad.mode})"


def trust_summary(report: TrustReport) -> dict[str, Any]:
    """The verdict without the per-region tables: what it covered and, per input that did
    not pass, its failing regions (what a corpus report needs)."""
    first = report.inputs[0] if report.inputs else None
    failing = [{"input": i.input, "status": i.status, "regions": [
        {"name": c.name, "mismatched_bytes": c.mismatched_bytes, "mismatched_elements": c.mismatched_elements,
         "unexpected_write": c.unexpected_write} for c in i.failures]}
        for i in report.inputs if i.status != "pass"]
    return {"passed": report.passed, "verdict": report.verdict, "mode": report.mode, "summary": report.summary(),
            "perturbed": report.perturb, "seed": report.seed, "checked": len(first.checks) if first else 0,
            "failing": failing, "notes": [n for r in report.reproducers for n in r.notes]}


def _open(reproducer: str | Bundle, files: dict[str, bytes]) -> str:
    path = resolve(reproducer)
    Capture.open(path)  # the manifest is whole and of this format version
    for name, data in files.items():
        target = Path(path) / VARIANTS / Path(name).name
        if not target.is_file() or target.read_bytes() != data:
            write_atomic(variants_dir(path) / target.name, data)
    return path


def check_reproducer(reproducer: str | Bundle, variants: list[tuple[str, str | None]],
                     options: MeasureRequest) -> list[Outcome]:
    """`kerncap check`'s unit of work: every listed variant (label, cubin) of one reproducer."""
    return [measure(reproducer, label, cubin, options) for label, cubin in variants]


# -- compile (CPU workers) -----------------------------------------------------------------------


@dataclass
class Compiled:
    config: str
    ok: bool
    seconds: float = 0.0
    cubin: str | None = None                 # variants/<name>.cubin, relative to the reproducer
    files: dict[str, bytes] = field(default_factory=dict)  # the cubin and its .launch.json, by file name
    message: str = ""
    hint: str | None = None
    log: str = ""
    worker: dict[str, Any] = field(default_factory=dict)


def compile_config(reproducer: str | Bundle, config: str) -> Compiled:
    """Recompile a Triton reproducer with `config` pinned ("" for the captured contract)."""
    start = time.monotonic()
    worker = worker_identity()
    try:
        path = Path(resolve(reproducer))
        result = recompile(path, config or None)
    except KerncapError as exc:
        return Compiled(config, False, time.monotonic() - start, message=exc.message, hint=exc.hint, worker=worker)
    except OSError as exc:
        return Compiled(config, False, time.monotonic() - start, message=f"{exc.strerror or exc} ({exc.filename})",
                        worker=worker)
    files = {result.cubin.name: result.cubin.read_bytes()}
    launch = result.cubin.with_suffix(".launch.json")
    if launch.is_file():
        files[launch.name] = launch.read_bytes()
    return Compiled(config, True, result.seconds, cubin=f"variants/{result.cubin.name}", files=files, log=result.log,
                    worker=worker)


def measure_compiled(reproducer: str | Bundle, options: MeasureRequest, compiled: Compiled) -> Outcome:
    """The GPU half of a sweep entry (the fan-out passes the compile's result last): the
    compiled variant's files land in the worker's view of the reproducer, then it is
    validated and timed."""
    if not compiled.ok:
        out = Outcome(reproducer=str(reproducer) if not isinstance(reproducer, Bundle) else reproducer.name,
                      label=compiled.config, cubin=None, worker=compiled.worker)
        out.steps.append(Step("compile", False, ERROR, compiled.seconds, compiled.message, compiled.hint))
        return out
    out = measure(reproducer, compiled.config, compiled.cubin, options, files=compiled.files)
    out.steps.insert(0, Step("compile", False, OK, compiled.seconds))
    out.extra["compile_worker"] = compiled.worker
    return out
