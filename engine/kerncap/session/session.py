"""One open reproducer: its resident replay server and compile worker, its variant history,
and the edit loop over them.

    with Session(path) as s:
        s.baseline()                        # the captured cubin, timed and validated: History row 0
        result = s.build()                  # recompile -> interleaved timing -> validation -> History row
        report = s.validate(ValidateRequest(cubin="variants/3.cubin", perturb=8))

The replay server process (kerncap.replay.client) owns the CUDA context and the VA
reservations, which are expensive to redo per request, so it stays open for the
session; a Triton reproducer also gets its resident compile worker (kerncap.triton.worker),
started and warming up when the session opens. Requests are serialized per session (a
cancelled build may still be finishing when the next starts); `kill()` ends the replay
server from any thread, also mid-request. The workbench holds one session, the MCP
server and the fan-out's GPU workers a pool of them (kerncap.session.pool), the CLI one
per command: every front end's build, validation and record is this code.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kerncap.capture import apply as apply_tool
from kerncap.core.units import interval_text, speedup_text
from kerncap.errors import GpuUnavailable, KerncapError, NativeUnavailable, UsageError
from kerncap.recompile import built as built_record
from kerncap.recompile import fusion as fusion_tool
from kerncap.recompile import recompile as recompile_kernel
from kerncap.recompile import sequence_kernel
from kerncap.replay import client as replay_client
from kerncap.replay import dump as dump_tool
from kerncap.replay import mismatch_request
from kerncap.replay import ncu as ncu_tool
from kerncap.replay import perturb
from kerncap.replay import sanitize as sanitize_tool
from kerncap.replay.differential import TrustReport, is_fault, validate_one
from kerncap.replay.results import ReplayResult, ValidationResult
from kerncap.replay.significance import TimingComparison, bracket_bound
from kerncap.reproducer.editable import source_fingerprint
from kerncap.reproducer.format import Capture
from kerncap.reproducer.history import HISTORY_FILE, History, Variant
from kerncap.reproducer.sequence import is_sequence
from kerncap.reproducer.variants import RecompileResult
from kerncap.session import fusions as fusion_row
from kerncap.session.options import (ApplyRequest, BuildRequest, CompareRequest, ReplayRequest, ValidateRequest,
                                     check_order)
from kerncap.triton.pinned import AutotuneConfigs, autotune_configs
from kerncap.triton.worker import CompileWorker, is_triton_reproducer

# What a progress line is: "" plain, "detail" (compiler output), "warning", "pass", "fail".
Progress = Callable[[str, str], None]


def _quiet(_text: str, _level: str = "") -> None:
    pass


def needs_gpu(exc: BaseException) -> bool:
    """True when a failure means "no GPU / no replay core here" rather than a fault."""
    return isinstance(exc, (NativeUnavailable, GpuUnavailable))


class ReplayNotRun(KerncapError):
    """A build compiled its variant, but the replay could not run (no GPU, no replay core):
    nothing was timed, validated or recorded. `.built` is the new cubin (or set variant)."""

    def __init__(self, built: Path, seconds: float, cause: KerncapError) -> None:
        super().__init__(f"compiled {Path(built).name} in {seconds:.2f} s, but the replay could not run: "
                         f"{cause.message}", cause.hint, exit_code=cause.exit_code)
        self.built = Path(built)
        self.cause = cause


@dataclass
class Measured:
    """A cubin timed interleaved with the captured one and validated: what a History row holds."""

    median_ms: float | None
    min_ms: float | None
    spread_pct: float | None
    validation: str = "skipped"   # pass | fail | inconclusive | error | skipped
    detail: str = ""              # one line for the log
    validation_detail: str = ""   # "exact · p4" (TrustReport.short)
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    confidence: float | None = None
    significant: bool | None = None
    speedup_bound: float | None = None  # both medians less the launch floor (significance.bracket_bound)
    timer: str | None = None  # what timed it (significance.TIMERS); None: not timed
    report: TrustReport | None = None

    def fields(self) -> dict[str, Any]:
        """The History row's fields."""
        return dict(median_ms=self.median_ms, min_ms=self.min_ms, spread_pct=self.spread_pct,
                    validation=self.validation, note=self.detail, validation_detail=self.validation_detail,
                    speedup=self.speedup, speedup_low=self.speedup_low, speedup_high=self.speedup_high,
                    confidence=self.confidence, significant=self.significant, speedup_bound=self.speedup_bound,
                    timer=self.timer)


@dataclass
class BuildResult:
    """What one build did. `status`: "recorded" (a new History row, `variant`),
    "unchanged" (source/ equals what `variant` was built from: nothing compiled) or
    "superseded" (cancelled by a newer save: nothing recorded)."""

    status: str
    variant: Variant | None = None
    compiled: RecompileResult | None = None
    baseline: Variant | None = None   # recorded first by this build (the history had none)
    reused: bool = False              # the cubin built earlier from this very source (not compiled again)
    seconds: float = 0.0
    set_run: Any = None               # a set's build: its SetRun (kerncap.replay.set_run)

    def to_dict(self) -> dict[str, Any]:
        c = self.compiled
        return {"status": self.status, "variant": self.variant.to_dict() if self.variant else None,
                "baseline": self.baseline.to_dict() if self.baseline else None, "reused": self.reused,
                "seconds": round(self.seconds, 3),
                "compiled": None if c is None else {"cubin": str(c.cubin), "seconds": round(c.seconds, 3),
                                                    "mode": c.mode, "phases": c.phases, "notes": c.notes}}


class Opened:
    """What every open reproducer (or set) has: its root, its variant history, source/."""

    root: Path
    _history: History | None = None

    @property
    def history(self) -> History:
        """The variant history (loaded on first use; CaptureFormatError when damaged)."""
        if self._history is None:
            self._history = History.load(self.root)
        return self._history

    @property
    def history_file(self) -> Path:
        """Where the history is kept (what a workbench watches for rows recorded elsewhere)."""
        return self.root / HISTORY_FILE

    def reload_history(self) -> History:
        self._history = None
        return self.history

    @property
    def source_dir(self) -> Path | None:
        d = self.root / "source"
        return d if d.is_dir() else None

    def prepare_history(self) -> str:
        """The commit of source/ as extracted, made before the first edit can land."""
        return self.history.initial_commit()

    # -- the live loop's edits: where a save lands and what it builds (the shape decides) ----
    @property
    def title(self) -> str:
        """One line naming what is open: its kernel, or a sequence's summary."""
        cap = self.capture
        if cap.sequence is not None:
            return f"sequence: {cap.sequence.summary()}"
        return cap.kernel.get("demangled") or cap.kernel.get("name", "?")

    @property
    def can_fuse(self) -> bool:
        """Whether ranges of its launches can be fused (a sequence: kerncap fuse)."""
        return False

    def edit_dirs(self) -> list[Path]:
        """The directories a save of a source lands in (what a workbench watches)."""
        return [self.source_dir] if self.source_dir is not None else []

    def build_for_save(self, path: str | Path) -> BuildRequest | None:
        """The build a save of `path`, a source file under edit_dirs(), asks for; None: no
        source this reproducer builds from (a build's own output, fusion.json)."""
        return BuildRequest()

    @property
    def launches(self) -> list:
        """A sequence's launches (kerncap.reproducer.sequence.SeqLaunch); one dispatch: none."""
        return []

    def launch_names(self, first: int, last: int) -> list[str]:
        """The kernel names of a sequence's launches first..last (what a fusion of them joins)."""
        raise UsageError(f"{self.root} holds no sequence: it has no launches to fuse",
                         "fuse the launches of a reproducer made with `kerncap extract --sequence`")

    def build_by_hand(self, launch: int | None = None, fusion: str | None = None) -> BuildRequest:
        """What a build asked for with no save pending builds (`launch`: the launch shown, `fusion`:
        the fusion shown, both a sequence's); UsageError when there is nothing to build."""
        if self.source_dir is None:
            raise UsageError(f"{self.root} has no source/ to build",
                             "open a reproducer extracted with its sources")
        return BuildRequest()

    def diff(self, a: Variant, b: Variant) -> str:
        return self.history.diff(a, b)

    def restore(self, v: Variant) -> None:
        self.history.restore(v)

    def close(self) -> None:
        raise NotImplementedError

    def use_order(self, order: str | None) -> None:
        """How a sequence replays (Session); a set's members are single dispatches."""
        check_order(order)

    def validate_per_launch(self, request: ValidateRequest = ValidateRequest(), *,
                            progress: Callable[[str], None] | None = None) -> tuple[TrustReport, dict[str, Any]]:
        raise UsageError(f"--per-launch localizes inside a sequence: {self.root} is a reproducer set",
                         "leave out --per-launch (per_launch), or pass a reproducer made with "
                         "`kerncap extract --sequence`")

    def baseline(self, request, *, progress: Progress = _quiet) -> Variant:
        raise NotImplementedError

    def ncu(self, cubin: str | Path | None = None, **options: Any):
        raise UsageError(f"Nsight Compute profiles one reproducer's launch: {self.root} is a reproducer set",
                         f"pass one member, e.g. {self.root / 'members' / '0'}")

    def sanitize(self, cubin: str | Path | None = None, **options: Any):
        raise UsageError(f"compute-sanitizer checks one reproducer's launch: {self.root} is a reproducer set",
                         f"pass one member, e.g. {self.root / 'members' / '0'}")

    def dump(self, items, states, **options: Any):
        raise UsageError(f"dump writes one reproducer's items: {self.root} is a reproducer set",
                         f"pass one member, e.g. {self.root / 'members' / '0'}")

    def apply(self, request: ApplyRequest, *, output=None, cancelled: Callable[[], bool] | None = None):
        raise UsageError(f"kerncap apply substitutes one captured kernel: {self.root} is a reproducer set",
                         "apply one of its members (members/<i>), each a reproducer of its own")

    def _kept_in_app(self, result, request: ApplyRequest):
        """An apply's outcome kept on its History row, and that row's speedup in the
        reproducer put beside the in-app one."""
        if result.row is None:
            return result
        v = self.history.note_in_app(result.row, result.in_app(request.command))
        speedup = self.history.speedup(v)
        if speedup is not None:
            result = replace(result, replay={"speedup": speedup, "low": v.speedup_low, "high": v.speedup_high,
                                             "bound": v.speedup_bound, "timer": v.timer or "events"})
        return result

    def _after_baseline(self, request, progress: Progress, built: Path, seconds: float, measure: Callable[[], Any]):
        """(the baseline, recorded first when the history has none, else None; measure()).
        A replay that cannot run here (no GPU, no replay core) is ReplayNotRun: `built`
        compiled, nothing was timed or recorded."""
        try:
            base = self.baseline(request, progress=progress) if self.history.baseline is None else None
            return base, measure()
        except KerncapError as exc:
            if needs_gpu(exc):
                raise ReplayNotRun(built, seconds, exc) from None
            raise

    @staticmethod
    def _superseded(progress: Progress, started: float, **fields: Any) -> BuildResult:
        progress("superseded by a newer save", "detail")
        return BuildResult("superseded", seconds=time.monotonic() - started, **fields)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Session(Opened):
    """One reproducer, open. `device`: the GPU ordinal its replay server uses; `timeout`:
    seconds one replay request may take (the server is killed after; None: no limit);
    `server_cmd`: the replay server command (tests use a stand-in); `compile_worker`:
    keep a resident Triton compile worker (False: compile in this process)."""

    is_set = False

    def __init__(self, root: str | Path, *, device: int = 0, timeout: float | None = None,
                 server_cmd: list[str] | None = None, compile_worker: bool = True,
                 sequence_order: str | None = None) -> None:
        self.root = Path(root)
        self.sequence_order = check_order(sequence_order)  # a sequence capture: how it replays
        if self.root.name == "capture" and (self.root / "manifest.json").is_file():
            self.root = self.root.parent
        self.device = device
        self.timeout = timeout
        self.server_cmd = list(server_cmd) if server_cmd else None
        self._client: Any = None
        self._lock = threading.RLock()
        self._capture: Capture | None = None
        self._history: History | None = None
        self._plans: dict[tuple, perturb.PerturbPlan] = {}
        self._built: dict[str, RecompileResult] = {}  # source fingerprint -> a build not recorded yet
        self._compiler = CompileWorker(self.root) if compile_worker and is_triton_reproducer(self.root) else None
        self.closed = False

    # -- what it holds ------------------------------------------------------------------------
    @property
    def capture(self) -> Capture:
        if self._capture is None:
            self._capture = Capture.open(self.root)
        return self._capture

    @property
    def compiler_warmup(self) -> dict | None:
        """The Triton compile worker's warm-up outcome once it is over (None: not yet, or CUDA C++)."""
        return self._compiler.warmup if self._compiler is not None else None

    def warm(self) -> None:
        """Start what a first build needs (the Triton compile worker's warm-up); returns at once."""
        if self._compiler is not None:
            self._compiler.start()

    def wait_warm(self) -> dict | None:
        return self._compiler.wait_ready() if self._compiler is not None else None

    def _resident(self):
        """The replay server of this session, started on first use."""
        if self._client is None:
            # Looked up at call time: a test's stand-in for the replay core replaces it here too.
            self._client = replay_client.ReplayClient(self.root, device=self.device, timeout=self.timeout,
                                                      server_cmd=self.server_cmd, sequence_order=self.sequence_order)
        return self._client

    @property
    def replay_starts(self) -> int:
        """Replay servers started so far (a sticky fault ends one; the next request starts another)."""
        return getattr(self._client, "starts", 0) if self._client is not None else 0

    # -- replay, validate, compare --------------------------------------------------------------
    def replay(self, request: ReplayRequest = ReplayRequest()) -> ReplayResult:
        """Time the captured kernel (or request.cubin) at the captured addresses."""
        r = request.checked()
        if r.per_launch:
            self._sequence_only("--per-launch times the launches of a sequence")
        with self._lock:
            return self._resident().replay(cubin=r.cubin, iterations=r.iterations, warmup=r.warmup,
                                           flush_l2=r.flush_l2, **({"per_launch": True} if r.per_launch else {}),
                                           **({"warm_l2": True} if r.warm_l2 else {}),
                                           **({"timer": r.timer} if r.timer != "events" else {}))

    def localize(self, cubin: str | Path | None, *, tolerances: dict | None = None) -> dict[str, Any]:
        """A sequence: the first launch after which `cubin`'s state departs from the captured
        program's, each prefix run from the captured pre-state (kerncap.replay.sequence_ops)."""
        self._sequence_only("--per-launch localizes inside a sequence")
        with self._lock:
            return self._resident().localize(cubin, tolerances)

    def validate_per_launch(self, request: ValidateRequest = ValidateRequest(), *,
                            progress: Callable[[str], None] | None = None) -> tuple[TrustReport, dict[str, Any]]:
        """`validate --per-launch` on one server: the validation, then where request.cubin's
        state first departs from the captured sequence's (`localize`). A reproducer of one
        dispatch is refused before anything runs."""
        self._sequence_only("--per-launch localizes inside a sequence")
        with self._lock:
            report = self.validate(request, progress=progress)
            return report, self.localize(request.cubin)

    def use_order(self, order: str | None) -> None:
        """How a sequence replays from now on (streams, serial or graph; None: streams). The
        order is fixed when a replay server opens the capture: one running in another order
        is closed, and the next request starts one in this order."""
        order = check_order(order)
        if (order or "streams") == (self.sequence_order or "streams"):
            return
        with self._lock:
            self.close_replay()
            self.sequence_order = order

    def _sequence_only(self, what: str) -> None:
        if self.capture.sequence is None:
            raise UsageError(f"{what}: {self.root} holds one dispatch",
                             "leave out --per-launch (per_launch), or pass a reproducer made with "
                             "`kerncap extract --sequence`")

    def validate(self, request: ValidateRequest = ValidateRequest(), *,
                 progress: Callable[[str], None] | None = None) -> TrustReport:
        """Validation you can trust (kerncap.replay.differential): determinism of the
        captured kernel, the captured input, request.perturb perturbed inputs."""
        r = request.checked()
        sequence = self.capture.sequence is not None
        if r.perturb and sequence and progress is not None:
            progress("a sequence is validated on its captured input only (perturbed inputs: not for sequences yet)")
        with self._lock:
            plan = self._plan(r) if r.perturb and not sequence else None
            # validate_one notes why a sequence gets no perturbed inputs (as `kerncap validate` does)
            one = validate_one(self._resident(), self.capture, r.cubin, r, plan=plan, progress=progress)
        return TrustReport(r.cubin, 0 if sequence else r.perturb, r.seed, [one])

    def _plan(self, r: ValidateRequest) -> perturb.PerturbPlan:
        """Planned once per session and request shape: it samples the captured payloads."""
        key = (tuple(r.keep), tuple(sorted(r.region_dtypes.items())))
        if key not in self._plans:
            self._plans[key] = perturb.plan(self.capture, r.keep, r.region_dtypes)
        return self._plans[key]

    def validate_and_time(self, request: ValidateRequest, **_: Any) -> tuple[TrustReport, None]:
        """One reproducer: its validation, no timing (a set also times its variant on every
        member: SetSession.validate_and_time), so that a front end need not ask the shape."""
        return self.validate(request), None

    def validate_once(self, cubin: str | Path | None = None, *, atol: float | None = None,
                      rtol: float | None = None, dtype: str | None = None,
                      dtypes: dict[int, str] | None = None) -> ValidationResult:
        """One run of the kernel (or `cubin`) compared with the captured post-state (no
        determinism runs, no perturbed inputs)."""
        with self._lock:
            return self._resident().validate(cubin=cubin, atol=atol, rtol=rtol, dtype=dtype, dtypes=dtypes)

    def compare(self, request: CompareRequest) -> TimingComparison:
        """The captured cubin and request.cubins timed interleaved, each variant's speedup
        with its bootstrap interval (kerncap.replay.significance)."""
        r = request.checked()
        with self._lock:
            inputs, notes = self._timing_inputs(r)
            c = self._resident().compare_timing([Path(c) for c in r.cubins], rounds=r.rounds,
                                                iterations=r.iterations, warmup=r.warmup, flush_l2=r.flush_l2,
                                                min_seconds=r.min_seconds, max_seconds=r.max_seconds,
                                                confidence=r.confidence, inputs=inputs,
                                                **({"warm_l2": True} if r.warm_l2 else {}),
                                                **({"timer": r.timer} if r.timer != "events" else {}))
        c.notes += notes
        return c

    def _timing_inputs(self, r: CompareRequest) -> tuple[list[list[dict]], list[str]]:
        """The perturbed inputs a timing rotates over besides the captured one (the fills of
        validate's perturbations 1, 2, … from the same seed), and why there are fewer."""
        if r.inputs <= 1:
            return [], []
        if self.capture.sequence is not None:
            return [], ["timed on the captured input only: a sequence has no perturbed inputs yet"]
        plan = self._plan(ValidateRequest(seed=r.seed))
        if not plan.perturbed:
            return [], ["timed on the captured input only: nothing in it can be perturbed (validate --perturb "
                        "lists why)"]
        usable = [k for k in range(r.inputs - 1 + len(r.skip)) if k not in r.skip][:r.inputs - 1]
        return [plan.fills(r.seed, k) for k in usable], []

    # -- where a variant differs: mismatch maps and dumps on the resident server ----------------
    def mismatch_maps(self, **options: Any) -> list:
        """kerncap.replay.mismatch_request.request_maps on this session's replay server."""
        with self._lock:
            return mismatch_request.request_maps(self._resident(), self.capture, **options)

    def dump(self, items, states, **options: Any):
        """kerncap.replay.dump.dump, its GPU states run on this session's replay server."""
        with self._lock:
            return dump_tool.dump(self.root, items, states, client=self._resident(), **options)

    # -- inspect: Nsight Compute and compute-sanitizer (each in a replay server of its own) ----
    def ncu(self, cubin: str | Path | None = None, *, reuse: bool = False, **options: Any) -> ncu_tool.NcuResult:
        if not reuse:
            return ncu_tool.profile(self.root, cubin, device=self.device, **options)
        result, reused = ncu_tool.stored_or_profile(self.root, cubin, device=self.device, **options)
        progress = options.get("progress")
        if reused and progress is not None:
            progress(f"ncu: using the stored report of {result.label} (same cubin bytes and sections)")
        return result

    def sanitize(self, cubin: str | Path | None = None, **options: Any) -> sanitize_tool.SanitizeResult:
        return sanitize_tool.sanitize(self.root, cubin, device=self.device, **options)

    # -- the app: a variant in place of the captured kernel (docs/apply.md) ----------------------
    def apply(self, request: ApplyRequest, *, output=None,
              cancelled: Callable[[], bool] | None = None) -> apply_tool.ApplyResult:
        """Run request.command with the variant substituted for the captured kernel
        (kerncap.capture.apply): refusals, --check, timing; the outcome is kept on the
        History row whose cubin was applied (`in_app`). `output` receives the app's output
        (None: passed through); `cancelled()` True stops the app. The replay server is not
        involved (no lock: a validation may run meanwhile)."""
        r = request.checked()
        if self.capture.sequence is not None:
            raise UsageError(f"kerncap apply substitutes one captured kernel: {self.root} is a sequence",
                             "apply a reproducer of one dispatch (kerncap extract without --sequence)")
        result = apply_tool.apply_request(self.root, r, output=output, cancelled=cancelled)
        return self._kept_in_app(result, r)

    # -- the edit loop ------------------------------------------------------------------------
    def recompile(self, config: str | None = None, *, mode: str = "auto", trust: bool = False,
                  kernel: str | None = None, split: bool = False) -> RecompileResult:
        """Rebuild the kernel from source/ into variants/ (a Triton reproducer in the warm
        compile worker when it has the captured contract; anything else here); a sequence's
        `kernel` from kernels/<k>/source, with the sequence variant that uses it (`variant`).
        `split`: time a CUDA compile's front end and NVVM apart (costs cicc ~13 %)."""
        if kernel is not None:
            result, variant = sequence_kernel.recompile_kernel(self.root, kernel, trust=trust, mode=mode)
            return replace(result, variant=variant)
        if self._compiler is not None and config is None and mode == "auto" and not trust:
            return self._compiler.recompile()
        return recompile_kernel(self.root, config, trust=trust, mode=mode, split=split)

    def autotune_configs(self) -> AutotuneConfigs:
        """A Triton reproducer's recorded autotune configs (recompile's `config` values)."""
        return autotune_configs(self.root)

    def baseline(self, request: BuildRequest = BuildRequest(), *, progress: Progress = _quiet) -> Variant:
        """Time and validate the captured cubin (determinism included) and record it as
        the history's baseline (row 0)."""
        progress("replaying the captured cubin (baseline) …", "")
        out = self.measure(None, request.checked())
        extra = {"launch_ms": self.launch_ms(None, progress)} if is_sequence(self.root) else {}
        v = self.history.record(baseline=True, **out.fields(), **extra)
        progress(f"baseline: {out.median_ms:.4f} ms (±{out.spread_pct:.1f}%), validation "
                 f"{out.validation} {out.validation_detail}".rstrip(), "")
        return v

    def build(self, request: BuildRequest = BuildRequest(), *, progress: Progress = _quiet,
              cancelled: Callable[[], bool] = lambda: False) -> BuildResult:
        """recompile → (baseline, the first time) → timing interleaved with the captured
        cubin → validation → one History row. A source/ equal to what a recorded variant
        was built from builds nothing; a cubin built from this very source whose replay
        could not run is reused, not compiled again. `cancelled()` is asked between the
        steps: a superseded build records nothing."""
        started = time.monotonic()
        r = request.checked()
        if r.fusion is not None:
            return self.build_fusion(r.fusion, r, progress=progress, cancelled=cancelled)
        if is_sequence(self.root):
            return self._build_sequence_kernel(r, progress, cancelled, started)
        if r.kernel is not None:
            raise UsageError("--kernel picks one kernel of a sequence", f"{self.root} holds one dispatch: drop --kernel")
        if self.source_dir is None:
            raise KerncapError(f"{self.root} has no source/ to build",
                               "extract with --source-dir (CUDA C++), or capture a Triton kernel")
        fingerprint = source_fingerprint(self.source_dir)
        same = self.history.built_from(fingerprint)
        if same is not None:
            progress(f"source/ is unchanged since {same.label} ({same.validation}): no new variant", "detail")
            return BuildResult("unchanged", variant=same, seconds=time.monotonic() - started)
        compiled = self._built.get(fingerprint) or built_record.recall(self.root, fingerprint, mode=r.mode,
                                                                      config=r.config)  # another process's build
        reused = compiled is not None and compiled.cubin.is_file()
        if reused:
            progress(f"source/ is unchanged since {compiled.cubin.name} was compiled: replaying it", "detail")
        else:
            progress("recompiling …", "")
            compiled = self.recompile(r.config, mode=r.mode, trust=r.trust)
            self._built[fingerprint] = compiled
            built_record.remember(self.root, fingerprint, compiled, mode=r.mode, config=r.config)
            _report_compile(compiled, progress)
        if cancelled():
            return self._superseded(progress, started, compiled=compiled, reused=reused)
        base, out = self._after_baseline(r, progress, compiled.cubin, compiled.seconds,
                                         lambda: self.measure(compiled.cubin, r))
        if cancelled():
            return self._superseded(progress, started, compiled=compiled, baseline=base, reused=reused)
        cubin = compiled.cubin
        rel = str(cubin.relative_to(self.root)) if cubin.is_relative_to(self.root) else str(cubin)
        v = self.history.record(cubin=rel, build_seconds=compiled.seconds, source_hash=fingerprint, **out.fields())
        self._built.pop(fingerprint, None)
        seconds = time.monotonic() - started
        progress(f"{v.label}: {_ms(out.median_ms)}, {speedup_phrase(v)}"
                 + f", validation {out.validation} {out.validation_detail} {out.detail}".rstrip()
                 + f" ({seconds:.1f} s)", "pass" if out.validation == "pass" else "fail")
        return BuildResult("recorded", variant=v, compiled=compiled, baseline=base, reused=reused, seconds=seconds)

    # -- a sequence's edits: kernels/<k>/source and fusions/<name>/ (docs/sequences.md) --------------
    def _open_sequence(self):
        try:
            return self.capture.sequence
        except KerncapError:
            return None  # a workspace with only a profile, or a capture whose opening said why not

    @property
    def can_fuse(self) -> bool:
        return self._open_sequence() is not None

    def edit_dirs(self) -> list[Path]:
        if self._open_sequence() is None:
            return super().edit_dirs()
        kernels, fusions = self.root / sequence_kernel.KERNELS_DIR, self.root / fusion_tool.FUSIONS
        return ([kernels] if kernels.is_dir() else []) + \
            ([fusions] if fusions.is_dir() and not fusions.is_symlink() else [])

    def build_for_save(self, path: str | Path) -> BuildRequest | None:
        if self._open_sequence() is None:
            return super().build_for_save(path)
        k = sequence_kernel.kernel_of_source(self.root, path)
        if k is not None:
            return BuildRequest(kernel=str(k))
        name = fusion_tool.of_source(self.root, path)
        return None if name is None else BuildRequest(fusion=name)

    def build_by_hand(self, launch: int | None = None, fusion: str | None = None) -> BuildRequest:
        seq = self._open_sequence()
        if seq is None:
            return super().build_by_hand(launch, fusion)
        if fusion is not None:
            return BuildRequest(fusion=fusion)
        if not (self.root / sequence_kernel.KERNELS_DIR).is_dir() or not seq.launches:
            raise UsageError("this sequence has no kernel sources (kernels/<k>/source)",
                             "fuse a range of its launches (kerncap fuse; m and F in the workbench's Profile)")
        return BuildRequest(kernel=str(seq.launches[launch or 0].kernel))

    def launch_names(self, first: int, last: int) -> list[str]:
        seq = self._open_sequence()
        if seq is None:
            return super().launch_names(first, last)
        return [(seq.kernel_of(i).demangled or seq.kernel_of(i).name).split("(")[0]
                for i in range(first, last + 1) if 0 <= i < len(seq.launches)]

    @property
    def launches(self) -> list:
        seq = self._open_sequence()
        return [] if seq is None else list(seq.launches)

    # -- a sequence (docs/sequences.md): one kernel rebuilt, the whole sequence measured ----------
    def sequence_kernel(self, selector: str | None) -> int:
        """The kernel a sequence build rebuilds (recompile.sequence_kernel.choose)."""
        return sequence_kernel.choose(self.capture, selector)

    def launch_ms(self, cubin: Path | None, progress: Progress = _quiet) -> list[float] | None:
        """Every launch's replayed median (per-launch timing on the resident server), None
        when the order has no per-launch times (graph) or the timing failed (said in progress)."""
        if self.sequence_order == "graph":
            return None
        try:
            result = self.replay(ReplayRequest(cubin=None if cubin is None else str(cubin), per_launch=True))
        except KerncapError as exc:
            if needs_gpu(exc):
                raise
            progress(f"per-launch timing failed: {exc.message}", "warning")
            return None
        return [float(l["median_ms"]) for l in result.launches or []]

    def _build_sequence_kernel(self, r: BuildRequest, progress: Progress, cancelled: Callable[[], bool],
                               started: float) -> BuildResult:
        """recompile kernel K's entry (its whole unit) into a sequence variant → (baseline once)
        → the whole sequence timed interleaved with the captured one, validated, and each
        launch timed → one History row (`kernel`, `launch_ms`)."""
        k = self.sequence_kernel(r.kernel)
        seq = self.capture.sequence
        fingerprint = sequence_kernel.source_hash(self.root, k)
        same = self.history.built_from(fingerprint)
        if same is not None:
            progress(f"kernel {k}'s sources are unchanged since {same.label} ({same.validation}): no new variant",
                     "detail")
            return BuildResult("unchanged", variant=same, seconds=time.monotonic() - started)
        progress(f"rebuilding kernel {k} ({seq.kernels[k].demangled or seq.kernels[k].name}) of the sequence …", "")
        compiled, variant = sequence_kernel.recompile_kernel(self.root, str(k), trust=r.trust, mode=r.mode)
        _report_compile(compiled, progress)
        if cancelled():
            return self._superseded(progress, started, compiled=compiled)
        base, (out, launches) = self._after_baseline(
            r, progress, variant, compiled.seconds, lambda: (self.measure(variant, r), self.launch_ms(variant, progress)))
        if cancelled():
            return self._superseded(progress, started, compiled=compiled, baseline=base)
        v = self.history.record(cubin=str(variant.relative_to(self.root)), build_seconds=compiled.seconds,
                                source_hash=fingerprint, kernel=k, launch_ms=launches, **out.fields())
        seconds = time.monotonic() - started
        changed = changed_launch_ms(v, self.capture)
        progress(f"{v.label}: sequence {_ms(out.median_ms)}, {speedup_phrase(v)}; kernel {k}: "
                 + ("not timed per launch" if changed is None else f"{changed:.4f} ms over its "
                    f"{len(sequence_kernel.launches_of(self.capture, k))} launch(es)")
                 + f", validation {out.validation} {out.validation_detail} {out.detail}".rstrip()
                 + f" ({seconds:.1f} s)", "pass" if out.validation == "pass" else "fail")
        return BuildResult("recorded", variant=v, compiled=compiled, baseline=base, seconds=seconds)

    def build_fusion(self, name: str, request: BuildRequest = BuildRequest(), *, progress: Progress = _quiet,
                     cancelled: Callable[[], bool] = lambda: False) -> BuildResult:
        """A sequence's fusion (fusions/<name>/, docs/sequences.md): fused.cu compiled into
        variants/fuse-<name>.json → (baseline once) → the fused sequence timed interleaved
        with the captured one, validated on what is live after the range (each excluded
        intermediate named in the report), the fused launch timed against the replaced
        launches → one History row with `fusion` (its name, range, what was not compared,
        those two times) and the fused sequence's `launch_ms`. Unchanged fused.cu, launch
        and intermediates build nothing; a fused kernel whose parameters differ from its
        skeleton is refused by the replay, naming the parameter."""
        started = time.monotonic()
        r = replace(request, fusion=name).checked()
        fingerprint = fusion_tool.source_hash(self.root, name, tuple(r.intermediates))
        same = self.history.built_from(fingerprint)
        if same is not None:
            progress(f"fusion {name} is unchanged since {same.label} ({same.validation}): no new variant", "detail")
            return BuildResult("unchanged", variant=same, seconds=time.monotonic() - started)
        progress(f"building fusion {name} …", "")
        built = fusion_tool.compile_fusion(self.root, name, intermediates=tuple(r.intermediates))
        compiled = RecompileResult(cubin=built.cubin, seconds=built.seconds, command=built.command, log=built.log,
                                   mode="nvcc")
        _report_compile(compiled, progress)
        summary = fusion_tool.variant_summary(built.variant)
        first, last = summary["first"], summary["last"]
        progress(f"launches {first}-{last} replaced by {summary['kernel']}; not compared (only the replaced launches "
                 "use them): " + ("; ".join(f"{e['name']} ({e['why']})" for e in summary["excluded"]) or "nothing"),
                 "detail")
        if cancelled():
            return self._superseded(progress, started, compiled=compiled)

        def measure():
            out = self.measure(built.variant, r)
            fused = self.launch_ms(built.variant, progress)
            # the captured sequence's launches right after, on the same server: what the fused launch replaced
            return out, fused, self.launch_ms(None, progress) if fused is not None else None

        base, (out, fused, captured) = self._after_baseline(r, progress, built.variant, built.seconds, measure)
        if cancelled():
            return self._superseded(progress, started, compiled=compiled, baseline=base)
        v = self.history.record(cubin=str(built.variant.relative_to(self.root)), build_seconds=built.seconds,
                                source_hash=fingerprint, launch_ms=fused, **out.fields(),
                                fusion=fusion_row.record(name, first, last, summary["excluded"], fused, captured))
        seconds = time.monotonic() - started
        progress(f"{v.label}: fusion {name}: sequence {_ms(out.median_ms)}, {speedup_phrase(v)}; "
                 f"{fusion_row.fusion_phrase(v)}"
                 + f", validation {out.validation} {out.validation_detail} {out.detail}".rstrip()
                 + f" ({seconds:.1f} s)", "pass" if out.validation == "pass" else "fail")
        return BuildResult("recorded", variant=v, compiled=compiled, baseline=base, seconds=seconds)

    def measure(self, cubin: Path | None, request: BuildRequest) -> Measured:
        """The baseline (cubin None): its timing and validation (determinism included).
        A variant: timed interleaved with the captured cubin (the speedup with its
        interval) and validated on the captured input and request.perturb perturbed ones."""
        with self._lock:
            # Validation first: it records the captured kernel's tolerance (determinism.json),
            # which the check after every timed launch then applies, and says which perturbed
            # inputs make the captured kernel itself fault (the timing leaves those out).
            report, error = None, None
            try:
                report = self.validate(request.validation(None if cubin is None else str(cubin)))
            except KerncapError as exc:
                if needs_gpu(exc) or isinstance(exc, replay_client.ServerTimeout):
                    raise  # a kernel that never ends: nothing is recorded (the front end says so)
                error = exc.message
            faulted = tuple(k for k, i in enumerate(report.inputs[1:]) if i.status == "baseline fault") \
                if report is not None else ()
            # The baseline goes through the same interleaved timing (alone): it also sets up
            # what the first variant's comparison would otherwise pay for (NVML, the floor).
            timing = replace(request.timing(), cubins=() if cubin is None else (str(cubin),), skip=faulted)
            try:
                c = self.compare(timing)
            except KerncapError as exc:
                if needs_gpu(exc) or cubin is None or not is_fault(exc):
                    raise
                # The variant faulted in a timed launch (validation may have said so already).
                out = Measured(None, None, None, validation="error", detail=error or f"timing: {exc.message}")
                out.report = report
                out.validation_detail = report.short() if report is not None else ""
                return out
            p = c.programs[-1]
            out = Measured(p.median_ms, min(p.times), p.spread_pct, timer=c.timer)
            if p.interval is not None:
                iv = p.interval
                out.speedup, out.speedup_low, out.speedup_high = iv.speedup, iv.low, iv.high
                out.confidence, out.significant = iv.confidence, iv.significant
                if c.floor_ms and len(c.programs) > 1 and c.timer == "events":
                    out.speedup_bound = bracket_bound(c.programs[0].median_ms, p.median_ms, c.floor_ms)
            if error is not None:
                out.validation, out.detail = "error", error
                return out
        out.report = report
        out.validation = report.verdict
        out.validation_detail = report.short()
        if any(i.status == "variant fault" for i in report.inputs):
            out.validation = "error"  # a crash, not a wrong answer
        bad = [i for i in report.inputs if i.status not in ("pass", "baseline fault")]
        if bad:
            out.detail = "; ".join(f"{i.input}: {i.status}" + (f" ({', '.join(c.name for c in i.failures[:3])})"
                                                                 if i.failures else "") for i in bad[:3])
        if p.void:
            # A timed launch left the wrong bytes: whatever validation saw, this program does
            # not do the work every time it runs. No speedup, and not a pass.
            out.validation = "fail"
            out.detail = "; ".join(x for x in (f"timing void: {p.check.first()}", out.detail) if x)
        elif p.unseen_ms is not None:  # right bytes, but time the kernel timer cannot see: no speedup
            out.detail = "; ".join(x for x in (p.notes[-1], out.detail) if x)
        return out

    # -- ending ------------------------------------------------------------------------------
    def close(self) -> None:
        """Shut the replay server and the compile worker down (idempotent)."""
        self.closed = True
        client, self._client = self._client, None
        try:
            if client is not None:
                client.close()
        finally:
            if self._compiler is not None:
                self._compiler.close()

    def close_replay(self) -> bool:
        """Shut only the replay server down (it frees its GPU memory; the next request
        starts a new one). True if one ran."""
        with self._lock:
            client, self._client = self._client, None
        if client is None:
            return False
        client.close()
        return True

    def kill(self) -> None:
        """Kill the replay server now, also mid-request (that request fails; the next one
        starts a fresh server). No lock: a front end whose client went away calls this."""
        client = self._client
        if client is not None:
            client.kill()



def changed_launch_ms(v: Variant, cap: Capture) -> float | None:
    """A sequence's History row: the replayed time of the rebuilt kernel's launches (their
    medians summed), or of a fusion's fused launch; None for the baseline or a row without
    per-launch times."""
    if v.fusion is not None:
        return v.fusion.get("fused_ms")  # the fused launch
    if v.kernel is None or not v.launch_ms or cap.sequence is None:
        return None
    launches = sequence_kernel.launches_of(cap, v.kernel)
    if len(v.launch_ms) != len(cap.sequence.launches) or not launches:
        return None
    return sum(v.launch_ms[i] for i in launches)


def _ms(ms: float | None) -> str:
    return "not timed" if ms is None else f"{ms:.4f} ms"


def speedup_phrase(v: Variant) -> str:
    """One phrase for a log line or a notification: "1.32× [1.21–1.35]", "12.1× [12.0–12.2],
    up to 13.6× without the events", "within noise (1.02×, 0.97–1.08)", "1.06× (no
    interval)", "not compared"."""
    if v.speedup is None:
        return "not compared"
    if v.speedup_low is None:
        return f"{speedup_text(v.speedup)} (no interval)"
    span = interval_text(v.speedup_low, v.speedup_high)
    if not v.significant:
        return f"within noise ({speedup_text(v.speedup)}, {span})"
    # a short variant: what the events around each timed launch may hide (docs/replay.md)
    bound = f", up to {speedup_text(v.speedup_bound)} without the events" if v.speedup_bound else ""
    timer = " (kernel timer)" if v.timer == "kernel" else ""
    return f"{speedup_text(v.speedup)} [{span}]{timer}{bound}"


def _report_compile(rc: RecompileResult, progress: Progress) -> None:
    log = rc.log.strip()
    if log:
        progress(log, "detail")
    if rc.summary:
        progress(rc.summary, "detail")
    for note in rc.notes:  # e.g. the reduced compile fell back to the whole file
        progress(note, "warning")
    progress(f"compiled {Path(rc.cubin).name} in {rc.seconds:.2f} s"
             + (f" ({rc.mode}: {rc.phase_line()})" if rc.phases else ""), "")
