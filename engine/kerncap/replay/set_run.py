"""Running every member of a reproducer set (kerncap.reproducer.sets): replay (the
captured cubin and a variant) and validate (kerncap.replay.differential) per member, and
the variant's speedup on the workload, each member weighted by its share of the
kernel's in-app time."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kerncap.core.units import short_kernel_name, speedup_text
from kerncap.errors import KerncapError
from kerncap.replay.client import ReplayClient
from kerncap.replay.devices import describe as describe_device
from kerncap.replay.differential import Options, TrustReport, validate_one
from kerncap.replay.results import format_ms, time_unit
from kerncap.reproducer.buckets import WorkloadSpeedup, weighted_speedup
from kerncap.reproducer.format import Capture
from kerncap.reproducer.sets import Member, ReproducerSet, hydrate_set, member_cubins


@dataclass
class MemberRun:
    member: Member
    baseline: Any = None    # ReplayResult of the captured cubin
    variant: Any = None     # ReplayResult of the variant
    validation: Any = None  # TrustReport of the variant on this member (kerncap.replay.differential)
    error: str | None = None

    @property
    def speedup(self) -> float | None:
        if self.baseline is None or self.variant is None or self.variant.median_ms <= 0:
            return None
        return self.baseline.median_ms / self.variant.median_ms


@dataclass
class SetRun:
    set: ReproducerSet
    runs: list[MemberRun]
    variant: str | None = None
    workload: WorkloadSpeedup | None = None
    device: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        return all(r.error is None and (r.validation is None or r.validation.passed) for r in self.runs)

    @property
    def trust(self) -> TrustReport | None:
        """The members' validations as one report ("PASS on 12 inputs of 4 reproducers"),
        or None when nothing was validated."""
        reports = [x for r in self.runs if isinstance(r.validation, TrustReport) for x in r.validation.reproducers]
        if not reports:
            return None
        first = next(r.validation for r in self.runs if isinstance(r.validation, TrustReport))
        return TrustReport(first.cubin, first.perturb, first.seed, reports)

    def to_dict(self) -> dict[str, Any]:
        trust = self.trust
        return {
            "set": str(self.set.root), "kernel": self.set.kernel, "variant": self.variant, "device": self.device,
            "passed": self.passed, "verdict": trust.summary() if trust else None,
            "weighted_speedup": self.workload.weighted if self.workload else None,
            "worst_member": self.workload.worst_member if self.workload else None,
            "members": [{
                "index": r.member.index, "dispatch": r.member.dispatch, "weight": r.member.weight,
                "signature": r.member.signature, "error": r.error, "speedup": r.speedup,
                "baseline": r.baseline.to_dict() if r.baseline else None,
                "variant": r.variant.to_dict() if r.variant else None,
                "validation": r.validation.to_dict() if r.validation else None,
            } for r in self.runs],
        }


def run_set(
    s: ReproducerSet, *, variant: str | os.PathLike | None = None, replay: bool = True, validate: bool = False,
    options: Options | None = None, iterations: int = 20, warmup: int = 3, flush_l2: bool = False,
    device: int = 0, progress: Callable[[Member, MemberRun], None] | None = None,
) -> SetRun:
    """Replays (baseline, and the variant when given) and/or validates every member, one
    replay server per member; validation is kerncap.replay.differential's (determinism,
    the captured input, `options.perturb` perturbed ones). A member that fails is
    reported, the others still run. `progress(member, run)` is called as members finish
    (the workbench's log)."""
    cubins = member_cubins(s, variant)
    options = options or Options()
    hydrate_set(s)
    runs: list[MemberRun] = []
    device_info = None
    for m, cubin in zip(s.members, cubins):
        run = MemberRun(m)
        try:
            with ReplayClient(m.path, device=device) as rc:
                if validate:
                    one = validate_one(rc, Capture.open(m.path), cubin, options)
                    run.validation = TrustReport(None if cubin is None else str(cubin), options.perturb, options.seed,
                                                 [one])
                if replay:
                    run.baseline = rc.replay(iterations=iterations, warmup=warmup, flush_l2=flush_l2)
                    if cubin is not None:
                        run.variant = rc.replay(cubin=cubin, iterations=iterations, warmup=warmup, flush_l2=flush_l2)
                device_info = device_info or (rc.info or {}).get("device")
        except KerncapError as exc:
            run.error = exc.message + (f" ({exc.hint})" if exc.hint else "")
        runs.append(run)
        if progress:
            progress(m, run)
    result = SetRun(s, runs, str(variant) if variant is not None else None, device=device_info)
    speedups = [r.speedup for r in runs]
    if variant is not None and replay and all(x is not None for x in speedups):
        result.workload = weighted_speedup(s.weights(), speedups)
    return result


def format_set_run(run: SetRun) -> str:
    s = run.set
    lines = [f"{s.demangled}: {len(run.runs)} member(s)"
             + (f" on {describe_device(run.device)}" if run.device else "")
             + (f", variant {run.variant}" if run.variant else "")]
    timed = [r.baseline.median_ms for r in run.runs if r.baseline]
    unit = time_unit(min(timed)) if timed else "us"
    for r in run.runs:
        m = r.member
        head = f"  #{m.index} {100 * m.weight:5.1f}%  dispatch {m.dispatch:<6}"
        if r.error:
            lines.append(f"{head}  ERROR {r.error}")
            continue
        parts = []
        if r.validation is not None:
            parts.append(r.validation.verdict.upper() + f" [{r.validation.short()}]")
        if r.baseline is not None:
            parts.append(f"baseline {format_ms(r.baseline.median_ms, unit)}")
        if r.variant is not None:
            parts.append(f"variant {format_ms(r.variant.median_ms, unit)} ({speedup_text(r.speedup)})")
        lines.append(f"{head}  {'  '.join(parts)}  {short_kernel_name(m.signature, 60)}")
    if run.workload:
        worst = run.runs[run.workload.worst_member].member
        lines.append(f"weighted speedup {speedup_text(run.workload.weighted, 3)} over the workload (weights: each member's "
                     f"share of in-app time); worst member #{worst.index} "
                     f"{speedup_text(run.workload.speedups[run.workload.worst_member])} ({worst.signature})")
    trust = run.trust
    if trust is not None:
        lines.append(trust.summary())
    failed = [r.member.index for r in run.runs if r.error or (r.validation is not None and not r.validation.passed)]
    if failed:
        lines.append(f"not passed: member(s) {', '.join(map(str, failed))}")
    return "\n".join(lines)
