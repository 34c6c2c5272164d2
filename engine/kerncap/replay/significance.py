"""Is a variant faster? Interleaved timings, medians, and the speedup with a bootstrap
confidence interval (docs/replay.md, "Comparing variants").

The replay server times every program (the captured cubin first, then the variants) in
*rounds*: each round runs every program back to back, `iterations` timed launches each,
in an order that rotates from round to round. Slow drift (clocks, temperature, other
tenants) then hits all programs of a round alike, so rounds are the unit of resampling:
the bootstrap draws R rounds with replacement, the same rounds for the baseline and the
variant (paired), and recomputes

    speedup = median(baseline times in those rounds) / median(variant times in those rounds)

The interval is the percentile interval of that statistic. It contains 1.0 → "within
noise"; otherwise the variant is significantly faster (> 1) or slower (< 1). The default
confidence is 99 %: at 95 %, one comparison of identical cubins in twenty is expected
to look significant, which is one spurious "faster" too many for a workbench.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from kerncap.core.units import interval_text, speedup_text
from kerncap.errors import KerncapError
from kerncap.replay.launch_check import LaunchCheck
from kerncap.replay.results import format_ms, l2_state, percentile, time_unit

DEFAULT_CONFIDENCE = 0.99
BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0  # fixed: the same measurements always give the same interval
# Below this many rounds a bootstrap over rounds says little: refuse rather than mislead.
MIN_ROUNDS = 5
# A kernel within this factor of an empty kernel's time is at the launch/timing floor.
FLOOR_FACTOR = 3.0
# A speedup that timing the kernel alone could raise by this much (see bracket_bound) is noted.
BRACKET_NOTE = 0.01
# What times each launch (requests.TIMER): CUDA events around it, or CUPTI's records of its
# kernels (native/replay/kernel_timer.hpp). On the kernel timer a variant whose launches span
# more than its kernels' records by UNSEEN_MS + UNSEEN_FRACTION of the captured kernel's
# event time beyond what the captured kernel's do (medians) did work the records cannot
# see (a kernel launched from the device): it gets no speedup on that timer.
TIMERS = ("events", "kernel")
UNSEEN_MS = 0.002
UNSEEN_FRACTION = 0.05
# SM clock variation (max/min − 1) above this during a comparison is reported.
CLOCK_DRIFT_WARN = 0.05


@dataclass
class Interval:
    """A speedup (baseline / variant median) and its confidence interval."""

    speedup: float
    low: float
    high: float
    confidence: float

    @property
    def significant(self) -> bool:
        return not (self.low <= 1.0 <= self.high)

    @property
    def verdict(self) -> str:
        if not self.significant:
            return "within noise"
        return "faster" if self.low > 1.0 else "slower"

    def text(self) -> str:
        """"1.32× [1.21–1.35] faster" / "1.02× [0.97–1.08] within noise"."""
        return f"{speedup_text(self.speedup)} [{interval_text(self.low, self.high)}] {self.verdict}"


def bootstrap_speedup(baseline: Sequence[Sequence[float]], variant: Sequence[Sequence[float]],
                      confidence: float = DEFAULT_CONFIDENCE, samples: int = BOOTSTRAP_SAMPLES,
                      seed: int = BOOTSTRAP_SEED) -> Interval:
    """`baseline[r]` and `variant[r]`: the timed iterations of round r (same rounds)."""
    import numpy as np

    if len(baseline) != len(variant):
        raise ValueError(f"{len(baseline)} baseline rounds but {len(variant)} variant rounds")
    if len(baseline) < MIN_ROUNDS:
        raise KerncapError(f"{len(baseline)} rounds are too few for a confidence interval",
                           f"measure at least {MIN_ROUNDS} rounds (--rounds)")
    if not 0.5 <= confidence < 1.0:
        raise KerncapError(f"confidence {confidence} is outside [0.5, 1)", "e.g. --confidence 0.99")
    b = _rows(baseline)
    v = _rows(variant)
    point = float(np.median(b.reshape(-1)) / np.median(v.reshape(-1)))
    rng = np.random.default_rng(seed)
    rounds = b.shape[0]
    stats = np.empty(samples)
    batch = max(1, min(samples, 4_000_000 // max(1, b.size + v.size)))  # bounded memory per batch
    for start in range(0, samples, batch):
        stop = min(samples, start + batch)
        idx = rng.integers(0, rounds, size=(stop - start, rounds))
        mb = np.median(b[idx].reshape(stop - start, -1), axis=1)
        mv = np.median(v[idx].reshape(stop - start, -1), axis=1)
        stats[start:stop] = mb / mv
    alpha = (1.0 - confidence) / 2
    low, high = np.quantile(stats, [alpha, 1.0 - alpha])
    return Interval(point, float(min(low, point)), float(max(high, point)), confidence)


def _rows(rounds: Sequence[Sequence[float]]):
    """Rounds as a 2-D array; rounds of unequal length are cut to the shortest (the
    server times the same count per round, so this only guards hand-made input)."""
    import numpy as np

    n = min(len(r) for r in rounds)
    if n == 0:
        raise ValueError("a round holds no timings")
    return np.asarray([list(r)[:n] for r in rounds], dtype=float)


# -- the comparison as a whole ------------------------------------------------------------


@dataclass
class ProgramTiming:
    label: str  # "captured cubin" or the variant's path
    cubin: str | None
    rounds: list[list[float]]  # ms, per round
    interval: Interval | None = None  # vs the baseline (None for the baseline itself, or a void timing)
    # a note for this program only ("shorter than the launch floor")
    notes: list[str] = field(default_factory=list)
    check: LaunchCheck | None = None  # what the check after every timed launch found
    # the kernel timer: the same launches as the events around them saw them (ms, per round)
    event_rounds: list[list[float]] | None = None
    # the kernel timer: how much more than the captured kernel's its launches spanned beyond
    # its kernels' records (ms) where that made its timing void (UNSEEN_MS), else None
    unseen_ms: float | None = None

    @property
    def event_median_ms(self) -> float | None:
        """The kernel timer: the median of the same launches as the events around them saw them."""
        return percentile([t for r in self.event_rounds for t in r], 50) if self.event_rounds else None

    @property
    def outside_ms(self) -> float | None:
        """Median event time less median kernel time: what a launch spans beyond its kernels."""
        events = self.event_median_ms
        return None if events is None else events - self.median_ms

    @property
    def void(self) -> bool:
        """Some timed launch did not produce the expected state: the times are not of the work."""
        return self.check is not None and self.check.void

    @property
    def times(self) -> list[float]:
        return [t for r in self.rounds for t in r]

    @property
    def median_ms(self) -> float:
        return percentile(self.times, 50)

    @property
    def spread_pct(self) -> float:
        t = self.times
        m = self.median_ms
        return (percentile(t, 90) - percentile(t, 10)) / m * 100 if m > 0 else 0.0


@dataclass
class ClockReport:
    """The SM clock seen during the measurement (NVML), or why it is not known."""

    available: bool
    samples_mhz: list[int] = field(default_factory=list)
    max_mhz: int | None = None  # the GPU's maximum SM clock
    throttle: list[str] = field(default_factory=list)  # reasons NVML gave during the run
    unavailable_reason: str = ""

    def warnings(self) -> list[str]:
        if not self.available:
            return []
        out = []
        if self.samples_mhz:
            lo, hi = min(self.samples_mhz), max(self.samples_mhz)
            if lo > 0 and hi / lo - 1 > CLOCK_DRIFT_WARN:
                out.append(f"the SM clock varied from {lo} to {hi} MHz during the measurement: "
                           "timings from different moments are not comparable one to one")
        if self.throttle:
            out.append("the GPU throttled during the measurement (" + ", ".join(self.throttle) + ")")
        return out

    def text(self) -> str:
        if not self.available:
            return f"SM clock: not reported ({self.unavailable_reason})"
        if not self.samples_mhz:
            return "SM clock: no samples"
        s = sorted(self.samples_mhz)
        top = f" of max {self.max_mhz} MHz" if self.max_mhz else ""
        return f"SM clock: {s[0]}–{s[-1]} MHz (median {s[len(s) // 2]} MHz){top}, {len(s)} samples"


@dataclass
class TimingComparison:
    programs: list[ProgramTiming]  # [0] is the baseline (the captured cubin)
    iterations: int  # per round and program
    warmup: int  # per round and program
    flush_l2: bool
    confidence: float
    floor_ms: float | None  # median of an empty kernel timed the same way
    clock: ClockReport
    seconds: float  # wall time of the measurement
    notes: list[str] = field(default_factory=list)
    inputs: int = 1  # the inputs the timed launches rotated over (1: the captured input alone)
    warm_l2: bool = False  # the kernel's memory read into L2 before each launch
    timer: str = "events"  # TIMERS

    @property
    def baseline(self) -> ProgramTiming:
        return self.programs[0]

    @property
    def variants(self) -> list[ProgramTiming]:
        return self.programs[1:]

    @property
    def rounds(self) -> int:
        return len(self.baseline.rounds)

    def warnings(self) -> list[str]:
        out = list(self.clock.warnings())
        for p in self.programs:
            out += [f"{p.label}: {n}" for n in p.notes]
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for p, pd in zip(self.programs, d["programs"]):
            pd["check"] = p.check.to_dict() if p.check is not None else None
            pd["void"] = p.void
            pd["median_ms"] = p.median_ms
            pd["spread_pct"] = p.spread_pct
            if p.interval is not None:
                pd["interval"]["significant"] = p.interval.significant
                pd["interval"]["verdict"] = p.interval.verdict
        d["warnings"] = self.warnings()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TimingComparison":
        programs = []
        for p in d["programs"]:
            iv = p.get("interval")
            interval = None if iv is None else Interval(iv["speedup"], iv["low"], iv["high"], iv["confidence"])
            programs.append(ProgramTiming(p["label"], p.get("cubin"), [list(r) for r in p["rounds"]], interval,
                                          list(p.get("notes", [])), LaunchCheck.from_dict(p.get("check")),
                                          p.get("event_rounds"), p.get("unseen_ms")))
        c = d["clock"]
        clock = ClockReport(c["available"], list(c.get("samples_mhz", [])), c.get("max_mhz"),
                            list(c.get("throttle", [])), c.get("unavailable_reason", ""))
        return cls(programs, d["iterations"], d["warmup"], d["flush_l2"], d["confidence"], d.get("floor_ms"), clock,
                   d.get("seconds", 0.0), list(d.get("notes", [])), int(d.get("inputs", 1)), bool(d.get("warm_l2")),
                   str(d.get("timer", "events")))


def analyse(raw: dict[str, Any], confidence: float = DEFAULT_CONFIDENCE) -> TimingComparison:
    """Builds the comparison from the server's `time_compare` answer: per-program round
    timings, the launch floor and the clock samples; computes the intervals and the
    per-program notes."""
    clock = ClockReport(bool(raw["clock"]["available"]), list(raw["clock"].get("samples_mhz", [])),
                        raw["clock"].get("max_mhz"), list(raw["clock"].get("throttle", [])),
                        raw["clock"].get("unavailable_reason", ""))
    inputs = int(raw.get("inputs", 1))
    programs = [ProgramTiming(p["label"], p.get("cubin"), [list(r) for r in p["rounds"]],
                              check=LaunchCheck.from_rounds(p["checks"], inputs) if "checks" in p else None,
                              event_rounds=p.get("event_rounds"))
                for p in raw["programs"]]
    timer = str(raw.get("timer", "events"))
    if not programs:
        raise KerncapError("nothing was timed", "give the variants to compare: --compare A.cubin [B.cubin ...]")
    base = programs[0]
    notes = list(raw.get("notes", []))
    if base.void:
        # The captured kernel itself: it varies from run to run and no tolerance is recorded
        # yet. Its variants cannot be judged against it here (validation can).
        notes.append(f"the captured cubin's own timed launches were not all identical to their expected state "
                     f"({base.check.first()}): it varies from run to run; run `kerncap validate` once so its "
                     "tolerance is recorded. No launch was judged by the check.")
        for p in programs:
            p.check = None
    for p in programs[1:]:
        if p.void:
            p.notes.append(f"timing VOID: {p.check.wrong()}; no speedup is reported")
            continue
        if timer == "kernel" and unseen_work(base, p):
            continue
        p.interval = bootstrap_speedup(base.rounds, p.rounds, confidence)
    floor = raw.get("floor_ms")
    if floor and timer == "events":  # the floor is an events figure: a kernel-timed median is not beside it
        for p in programs:
            if p.median_ms < FLOOR_FACTOR * floor:
                p.notes.append(f"median {format_ms(p.median_ms)} is within {FLOOR_FACTOR:g}× of the launch floor "
                               f"({format_ms(floor)}, an empty kernel timed the same way): differences this small "
                               "are mostly launch and timer overhead")
            elif p is not base and p.interval and (bound := bracket_bound(base.median_ms, p.median_ms, floor)):
                p.notes.append(f"each time includes the events around its launch (up to the launch floor, "
                               f"{format_ms(floor)}): the kernel's own speedup, as a profiler or `kerncap apply` "
                               f"times it, may be up to {bound:.3f}× (both medians less the floor; docs/replay.md)")
    return TimingComparison(programs, int(raw["iterations"]), int(raw["warmup"]), bool(raw["flush_l2"]), confidence,
                            floor, clock, float(raw.get("seconds", 0.0)), notes, inputs, bool(raw.get("warm_l2")),
                            timer)


def unseen_work(base: ProgramTiming, p: ProgramTiming) -> bool:
    """The kernel timer: whether `p`'s launches spanned more beyond its kernels' records than
    the captured kernel's did, by more than UNSEEN_MS + UNSEEN_FRACTION of the captured
    kernel's event time (then `p.unseen_ms` and a note say so)."""
    b, v = base.outside_ms, p.outside_ms
    if b is None or v is None:
        return False
    if v - b <= UNSEEN_MS + UNSEEN_FRACTION * base.event_median_ms:
        return False
    p.unseen_ms = v - b
    p.notes.append(f"kernel timer VOID: its launches spanned {format_ms(v - b)} more beyond its kernels' records "
                   f"than the captured kernel's (events {format_ms(v + p.median_ms)}, kernels "
                   f"{format_ms(p.median_ms)}): work the records cannot see, such as a kernel launched from the "
                   "device; no speedup on this timer (time it with --timer events)")
    return True


def bracket_bound(base_ms: float, variant_ms: float, floor_ms: float) -> float | None:
    """The speedup of both medians less the launch floor, where it is BRACKET_NOTE or more
    above the medians' own ratio (else None). Events time the launch with what surrounds the
    kernel on the GPU, about the floor less an empty kernel's own run (docs/facts.md §49:
    ~2 µs): a constant that a short variant's speedup reads lower by. The floor bounds it."""
    if variant_ms <= floor_ms or base_ms <= floor_ms:
        return None
    bound = (base_ms - floor_ms) / (variant_ms - floor_ms)
    return bound if bound >= (base_ms / variant_ms) * (1 + BRACKET_NOTE) else None


def format_comparison(c: TimingComparison) -> str:
    """The text `kerncap replay --compare` prints."""
    unit = time_unit(min(p.median_ms for p in c.programs))
    flush = l2_state(c.flush_l2, c.warm_l2)
    on = (f"rotating over {c.inputs} inputs (the captured one and {c.inputs - 1} perturbed)" if c.inputs > 1
          else "on the captured input only")
    timer = "CUPTI's kernel records" if c.timer == "kernel" else "CUDA events"
    lines = [f"{c.rounds} interleaved rounds × {c.iterations} iterations per program (after {c.warmup} warm-up "
             f"each), {on}, {flush}; timed by {timer}; every timed launch checked; {c.confidence * 100:g}% "
             f"bootstrap intervals over rounds; {c.seconds:.1f} s"]
    width = max(len(p.label) for p in c.programs)
    for p in c.programs:
        head = f"  {p.label:<{width}}  median {format_ms(p.median_ms, unit):>10}  spread {p.spread_pct:5.1f}%"
        tail = "   VOID (wrong output)" if p.void else "   VOID (work outside its kernel records)" \
            if p.unseen_ms is not None else "   baseline" if p.interval is None else f"   speedup {p.interval.text()}"
        lines.append(head + tail)
    lines.append(c.clock.text())
    if c.floor_ms:
        lines.append(f"launch floor: {format_ms(c.floor_ms, unit)} (an empty kernel)")
    lines += [f"warning: {w}" for w in c.warnings()]
    lines += [f"note: {n}" for n in c.notes]
    best = best_significant(c)
    lines.append(f"fastest significant: {best.label} ({best.interval.text()})" if best
                 else "no variant is significantly faster than the captured cubin")
    return "\n".join(lines)


def best_significant(c: TimingComparison) -> ProgramTiming | None:
    faster = [p for p in c.variants if p.interval and p.interval.significant and p.interval.low > 1.0]
    return max(faster, key=lambda p: p.interval.speedup, default=None)


def rounds_needed(rounds: int, min_seconds: float, ms_per_round: Sequence[float]) -> int:
    """Rounds to run so that every program gets at least `min_seconds` of measured kernel
    time (and at least `rounds`), from the per-round time of each program so far."""
    need = rounds
    for ms in ms_per_round:
        if ms > 0 and min_seconds > 0:
            need = max(need, math.ceil(min_seconds * 1000.0 / ms))
    return need
