"""What running every member of a reproducer set gives (kerncap.session.sets runs them):
per member the replays (the captured cubin and a variant) and the validation
(kerncap.replay.differential), and the variant's speedup on the workload, each member
weighted by its share of the kernel's in-app time; and its text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kerncap.core.units import short_kernel_name, speedup_text
from kerncap.errors import EXIT_CANNOT_RUN, EXIT_OK
from kerncap.replay.devices import describe as describe_device
from kerncap.replay.differential import TrustReport
from kerncap.replay.results import format_ms, time_unit
from kerncap.reproducer.buckets import WorkloadSpeedup
from kerncap.reproducer.sets import Member, ReproducerSet


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
        return TrustReport(first.cubin, first.perturb, first.seed, reports, of_set=True)

    def text(self) -> str:
        return format_set_run(self)

    @property
    def exit_code(self) -> int:
        """3 when a member could not run (or failed its validation)."""
        return EXIT_OK if self.passed else EXIT_CANNOT_RUN

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


def format_set_run(run: SetRun) -> str:
    """The text `kerncap replay SET` (and `validate SET --cubin V`) prints: one line per
    member, then the weighted speedup and the worst member."""
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
