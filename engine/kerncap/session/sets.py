"""A reproducer set, open (kerncap.reproducer.sets: several dispatches of one kernel). Its
members replay one after the other, each in a session of its own that is closed before
the next opens (every member holds its capture in GPU memory); a build recompiles the
set's source once per distinct captured cubin (kerncap.recompile.set_variant), validates
and times every member, and records one History row in the set whose speedup is the
workload-weighted one (members weighted by their share of the kernel's in-app time),
the worst member in its note.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from kerncap.core.units import speedup_text
from kerncap.errors import KerncapError, UsageError
from kerncap.recompile.set_variant import SetVariant, recompile_set
from kerncap.replay.differential import TrustReport, validate_reproducers
from kerncap.replay.set_run import MemberRun, SetRun
from kerncap.reproducer.buckets import weighted_speedup
from kerncap.reproducer.format import Capture
from kerncap.reproducer.history import History, Variant
from kerncap.reproducer.sets import Member, ReproducerSet, expand, hydrate_set, inside, is_set, member_cubins
from kerncap.session.options import SET_ITERATIONS, ApplyRequest, BuildRequest, ReplayRequest, ValidateRequest
from kerncap.session.session import BuildResult, Opened, Progress, Session, _quiet, needs_gpu
from kerncap.triton.pinned import AutotuneConfigs, autotune_configs


class SetSession(Opened):
    """A reproducer set, open: the same edit loop as Session, over every member."""

    is_set = True

    def __init__(self, root: str | Path, *, device: int = 0, timeout: float | None = None,
                 server_cmd: list[str] | None = None) -> None:
        self.root = Path(root)
        self.set = ReproducerSet.open(self.root)
        self.device, self.timeout, self.server_cmd = device, timeout, server_cmd
        self._history: History | None = None
        self._current: Session | None = None
        self.last_run: SetRun | None = None
        self.closed = False

    @property
    def members(self) -> list[Member]:
        return self.set.members

    @property
    def capture(self) -> Capture:
        """The first member's capture (what the workbench shows until another is picked)."""
        return Capture.open(self.members[0].path)

    def warm(self) -> None:
        pass

    def member_session(self, member: Member) -> Session:
        return Session(member.path, device=self.device, timeout=self.timeout, server_cmd=self.server_cmd,
                       compile_worker=False)

    # -- every member --------------------------------------------------------------------------
    def run_members(self, variant: str | os.PathLike | None = None, *, validate: ValidateRequest | None = None,
                    replay: ReplayRequest | None = ReplayRequest(), keep_going: bool = True,
                    skip_timing_on_fail: bool = False, no_gpu_raises: bool = False,
                    progress: Callable[[Member, MemberRun], None] | None = None) -> SetRun:
        """Every member in a replay server of its own, restored once: `validate` (the
        variant checked as Session.validate does), then `replay` (the captured cubin and
        the variant timed). `variant`: one cubin for every member, or a set variant
        (variants/<n>.json). `keep_going`: a member that fails is reported in its `error`
        and the others still run; otherwise its error is raised. `no_gpu_raises`: when no
        member could run for want of a GPU (or the replay core), raise that instead."""
        cubins = member_cubins(self.set, variant)
        hydrate_set(self.set)
        runs: list[MemberRun] = []
        failures: list[KerncapError] = []
        device = None
        for m, cubin in zip(self.members, cubins):
            run = MemberRun(m)
            try:
                with self.member_session(m) as s:
                    self._current = s
                    if validate is not None:
                        run.validation = s.validate(replace(validate, cubin=None if cubin is None else str(cubin)))
                    if replay is not None and not (skip_timing_on_fail and run.validation is not None
                                                   and run.validation.verdict == "fail"):
                        run.baseline = s.replay(replace(replay, cubin=None))
                        if cubin is not None:
                            run.variant = s.replay(replace(replay, cubin=str(cubin)))
                    if device is None and s._client is not None:
                        device = (s._client.info or {}).get("device")
            except KerncapError as exc:
                if not keep_going:
                    raise
                failures.append(exc)
                run.error = exc.message + (f" ({exc.hint})" if exc.hint else "")
            finally:
                self._current = None
            runs.append(run)
            if progress:
                progress(m, run)
        if no_gpu_raises and failures and len(failures) == len(runs) and all(map(needs_gpu, failures)):
            raise failures[0]
        result = SetRun(self.set, runs, str(variant) if variant is not None else None, device=device)
        speedups = [r.speedup for r in runs]
        if variant is not None and replay is not None and all(x is not None for x in speedups):
            result.workload = weighted_speedup(self.set.weights(), speedups)
        return result

    def replay(self, request: ReplayRequest = ReplayRequest(), **kw: Any) -> SetRun:
        """`kerncap replay SET`: the captured cubin (and request.cubin) timed on every member."""
        r = request.checked()
        if r.timer != "events":
            # the set's speedup compares two plain replays per member; the kernel timer's guard
            # against work its records miss lives in the interleaved comparison only
            raise UsageError(f"--timer {r.timer} on a reproducer set: the set's speedups are timed between CUDA "
                             "events", "leave out --timer, or time one member with `kerncap replay MEMBER "
                             "--compare V --timer kernel`")
        return self.run_members(r.cubin, replay=r, **kw)

    def validate(self, request: ValidateRequest = ValidateRequest(), *,
                 progress: Callable[[str], None] | None = None) -> TrustReport:
        """One verdict over every member's inputs (a member that cannot run raises)."""
        report, _ = self.validate_and_time(request, time_variant=False)
        return report

    def validate_and_time(self, request: ValidateRequest, *, time_variant: bool = True,
                          replay: ReplayRequest = ReplayRequest()) -> tuple[TrustReport, SetRun | None]:
        """`kerncap validate SET --cubin V`: the variant validated on every member and,
        unless it failed, timed there too against the captured cubin (the weighted
        speedup) — in one replay server per member, so each is restored once."""
        r = request.checked()
        time_it = time_variant and r.cubin is not None
        run = self.run_members(r.cubin, validate=replace(r, cubin=None), replay=replay if time_it else None,
                               keep_going=False, skip_timing_on_fail=True)
        reports = [x for m in run.runs for x in m.validation.reproducers]
        report = TrustReport(r.cubin, r.perturb, r.seed, reports, of_set=True)
        return report, (run if time_it and report.verdict != "fail" else None)

    def recompile(self, config: str | None = None, *, mode: str = "auto", trust: bool = False,
                  kernel: str | None = None, split: bool = False) -> SetVariant:
        """One variant every member uses, built from the set's source/ (kerncap.recompile.set_variant)."""
        if kernel is not None:
            raise UsageError("--kernel picks one kernel of a sequence", f"{self.root} is a reproducer set: "
                             "recompile it whole")
        return recompile_set(self.set, config, trust=trust, mode=mode, split=split)

    def autotune_configs(self) -> AutotuneConfigs:
        """Its first member's (members share the kernel and its source)."""
        return autotune_configs(self.members[0].path)

    def apply(self, request: ApplyRequest, *, output=None, cancelled: Callable[[], bool] | None = None):
        """The set's variant in its app (docs/apply.md): every member was captured from one
        module, so one substitution of that kernel covers each member's launches (and any
        other shape the app runs); the outcome is kept on the set's History row. A variant
        holding several cubins (members from different modules) is refused: apply swaps one
        module's kernel per run."""
        r = request.checked()
        if r.variant is not None:
            row = self.history.get(r.variant)
            if not row.cubin:
                raise UsageError(f"variant {r.variant} is the captured cubin itself", "pick a built variant")
            variant = inside(self.root, row.cubin, f"variant {r.variant}'s cubin", self.root / "history.json")
        else:
            variant = Path(r.cubin)
        cubins = {c.read_bytes(): c for c in member_cubins(self.set, variant)}
        modules = {Capture.open(m.path).kernel["module"]["sha256"] for m in self.members}
        if len(cubins) > 1 or len(modules) > 1:
            raise UsageError(f"{self.root}'s members were captured from {len(modules)} module(s) and its variant "
                             f"holds {len(cubins)} cubin(s); kerncap apply substitutes one module's kernel per run",
                             "apply a member's cubin: kerncap apply SET/members/<i> --cubin <its cubin in the variant>")
        [cubin] = cubins.values()
        with self.member_session(self.members[0]) as s:
            result = s.apply(replace(r, cubin=str(cubin.resolve()), variant=None), output=output, cancelled=cancelled)
        row = r.variant if r.variant is not None else self._row_of(variant)
        return self._kept_in_app(replace(result, row=row, replay=None), r)

    def _row_of(self, variant: Path) -> int | None:
        """The set's History row whose variant is `variant` (a set variant's .json or a cubin)."""
        for v in reversed(self.history.variants):
            if v.id and v.cubin and (self.root / v.cubin).resolve() == variant.resolve():
                return v.id
        return None

    def compare(self, request: Any) -> Any:
        raise UsageError(f"comparing timings works on one reproducer; {self.root} is a set",
                         f"pass one member, e.g. {self.root / 'members' / '0'}")

    # -- the edit loop ------------------------------------------------------------------------------
    def baseline(self, request: BuildRequest = BuildRequest(), *, progress: Progress = _quiet) -> Variant:
        progress(f"timing the captured cubin on {len(self.members)} member(s) (baseline) …", "")
        run = self._run(None, request.checked())
        validation, detail = verdict(run)
        v = self.history.record(baseline=True, median_ms=workload_ms(self.set, run), validation=validation,
                                note=detail or f"weighted over {len(self.members)} members")
        progress(f"baseline: workload {workload_ms(self.set, run) or 0:.4f} ms, validation {validation}", "")
        return v

    def _run(self, variant: Path | None, request: BuildRequest) -> SetRun:
        """Validate and time every member (with a variant: against the baseline, and on
        request.perturb perturbed inputs of every member too)."""
        run = self.run_members(variant, validate=request.validation(None if variant is None else str(variant)),
                               replay=ReplayRequest(iterations=SET_ITERATIONS.default), no_gpu_raises=True)
        self.last_run = run
        return run

    def build(self, request: BuildRequest = BuildRequest(), *, progress: Progress = _quiet,
              cancelled: Callable[[], bool] = lambda: False) -> BuildResult:
        """recompile the set's source → (baseline once) → validate and time every member →
        one History row. A superseded build records nothing."""
        started = time.monotonic()
        r = request.checked()
        progress(f"recompiling the set's source for {len(self.members)} member(s) …", "")
        v = recompile_set(self.set, r.config, trust=r.trust, mode=r.mode)
        progress(f"built {v.path.name}: {v.builds} build(s) in {v.seconds:.2f} s", "")
        if cancelled():
            return self._superseded(progress, started)
        base, run = self._after_baseline(r, progress, v.path, v.seconds, lambda: self._run(v.path, r))
        if cancelled():
            return self._superseded(progress, started, baseline=base)
        validation, detail = verdict(run)
        note = detail
        if run.workload:
            worst = run.runs[run.workload.worst_member]
            note = (f"weighted {speedup_text(run.workload.weighted, 3)} over {len(self.members)} members; worst "
                    f"#{worst.member.index} {speedup_text(worst.speedup)} ({worst.member.signature})"
                    + (f"; {detail}" if detail else ""))
        rel = str(Path(v.path).relative_to(self.set.root))
        recorded = self.history.record(median_ms=workload_ms(self.set, run), validation=validation, cubin=rel,
                                       build_seconds=v.seconds, note=note)
        progress(f"{recorded.label}: {note or validation}", "pass" if validation == "pass" else "fail")
        return BuildResult("recorded", variant=recorded, baseline=base, seconds=time.monotonic() - started,
                           set_run=run)

    def close(self) -> None:
        self.closed = True
        self.kill()

    def close_replay(self) -> bool:
        return False  # nothing stays resident between requests

    def kill(self) -> None:
        current = self._current
        if current is not None:
            current.kill()



def workload_ms(s: ReproducerSet, run: SetRun) -> float | None:
    """The set's time on the workload's scale: sum of weight x member time, each member's
    variant time scaled by its own baseline, so that baseline / variant is the
    workload-weighted speedup (SetRun.workload)."""
    if any(r.baseline is None for r in run.runs):
        return None
    scale = sum(m.weight * r.baseline.median_ms for m, r in zip(s.members, run.runs))
    if run.workload is None:
        return scale
    return scale / run.workload.weighted


def verdict(run: SetRun) -> tuple[str, str]:
    """The History row's validation over every member, and why when it is not a pass."""
    errors = [r for r in run.runs if r.error]
    failed = [r for r in run.runs if r.validation is not None and not r.validation.passed]
    if errors:
        return "error", f"member #{errors[0].member.index}: {errors[0].error}"
    if failed:
        trust = run.trust  # pass | fail | inconclusive over every member's inputs
        v = trust.verdict if trust is not None else "fail"
        return v, "member(s) " + ", ".join(f"#{r.member.index}" for r in failed) + \
            (" differ" if v == "fail" else f": {v}") + (f" ({trust.summary()})" if trust else "")
    return "pass", ""


def validate_paths(paths: Sequence[str | os.PathLike], request: ValidateRequest, *, device: int = 0,
                   progress: Callable[[str], None] | None = None, sequence_order: str | None = None) -> TrustReport:
    """`kerncap validate DIR [DIR ...]`: one verdict over several reproducers of one kernel
    (a set among them counts as its members; with a set variant, each member runs its own
    cubin), each in a replay server of its own, one after the other
    (kerncap.replay.differential.validate_reproducers)."""
    r = request.checked()
    if not paths:
        raise KerncapError("no reproducer given", "kerncap validate DIR [DIR ...]")
    dirs, cubins = expand(list(paths), r.cubin)
    report = validate_reproducers(dirs, None if cubins is not None else r.cubin, r, device=device,
                                  progress=progress, cubins=cubins, sequence_order=sequence_order)
    report.of_set = len(paths) == 1 and is_set(paths[0])  # as the session of that set says
    return report


__all__ = ["SetSession", "needs_gpu", "validate_paths", "verdict", "workload_ms"]
