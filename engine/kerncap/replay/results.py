"""Results of replay (timing) and validation: plain dataclasses that travel as JSON
between the replay server and the client, and their text rendering for the CLI."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from kerncap.core import dtypes as dt
from kerncap.core.units import human_bytes
from kerncap.errors import EXIT_FAILED, EXIT_OK
from kerncap.replay.devices import describe as describe_device
from kerncap.replay.launch_check import LaunchCheck

MAX_FIRST_MISMATCHES = 8


def json_number(v: Any) -> Any:
    """Infinities and NaN as strings ("inf", "-inf", "nan"): strict JSON has no such numbers."""
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    return v


def from_json_number(v: Any) -> Any:
    return float(v) if v in ("inf", "-inf", "nan") else v


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    if not values:
        raise ValueError("percentile of no values")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass
class ReplayResult:
    times_ms: list[float]
    median_ms: float
    min_ms: float
    max_ms: float
    spread_pct: float  # (p90 - p10) / median, in percent
    iterations: int
    warmup: int
    flush_l2: bool
    cubin: str | None  # variant path; None for the captured cubin
    notes: list[str] = field(default_factory=list)
    device: dict[str, Any] | None = None  # the GPU it ran on (kerncap.replay.devices)
    warm_l2: bool = False  # the kernel's memory read into L2 before each launch
    # a sequence with --per-launch: its launches' times (kerncap.replay.sequence_replay.op_sequence_time)
    launches: list[dict[str, Any]] | None = None
    # the check after every timed launch (kerncap.replay.launch_check.LaunchCheck.to_dict); None: not checked
    check: dict[str, Any] | None = None
    timer: str = "events"  # what timed the launches (significance.TIMERS)
    # the kernel timer: the median of the CUDA events around the same launches (what they
    # add beyond the kernels' records: the launch, and any work the records do not see)
    event_median_ms: float | None = None

    @classmethod
    def from_times(cls, times_ms: list[float], *, warmup: int, flush_l2: bool, cubin: str | None,
                   notes: list[str] | None = None, warm_l2: bool = False) -> "ReplayResult":
        median = percentile(times_ms, 50)
        spread = (percentile(times_ms, 90) - percentile(times_ms, 10)) / median * 100 if median > 0 else 0.0
        return cls(list(times_ms), median, min(times_ms), max(times_ms), spread, len(times_ms), warmup,
                   flush_l2, cubin, list(notes or []), warm_l2=warm_l2)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ReplayResult":
        return cls(**d)

    def text(self) -> str:
        """What `kerncap replay` prints: the times, and a sequence's launches when timed one by one."""
        if not self.launches:
            return format_replay(self)
        from kerncap.reproducer.sequence_text import launches_table

        return "\n".join([format_replay(self), *launches_table(self.launches)])

    @property
    def exit_code(self) -> int:
        """1 when a timed launch left the wrong bytes (these are not times of the kernel's work)."""
        return EXIT_FAILED if (self.check or {}).get("void") else EXIT_OK


@dataclass
class RegionCheck:
    kind: str  # "region" | "host" (a host region) | "global" | "array" (a CUDA array's contents, packed)
    id: int | None  # region, host region or array id; None for globals
    name: str  # "region 3", "host region 0", the global's symbol, "array 0 (512x512 float)"
    base: int  # captured address (globals and arrays: 0, they live where the driver puts them)
    size: int
    dtype: str | None  # None: byte-exact
    mismatched_bytes: int
    mismatched_elements: int | None  # tolerance mode only
    max_abs_err: float | None
    max_rel_err: float | None
    first_mismatches: list[tuple[int, Any, Any]]  # (byte offset, expected, actual)
    unexpected_write: bool  # the baseline left it unchanged, this run did not
    report: dict[str, Any] | None = None  # where it differs: a MismatchMap's dict (kerncap.replay.mismatch)
    report_error: str | None = None       # why there is no report (e.g. a --region-shape that does not fit)
    excluded: str | None = None           # not judged, and why (a region a sequence freed inside its window)

    @property
    def passed(self) -> bool:
        if self.excluded:
            return True
        if self.dtype is None:
            return self.mismatched_bytes == 0
        return self.mismatched_elements == 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["max_abs_err"] = json_number(self.max_abs_err)
        d["max_rel_err"] = json_number(self.max_rel_err)
        d["first_mismatches"] = [[o, json_number(e), json_number(a)] for o, e, a in self.first_mismatches]
        d["passed"] = self.passed
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RegionCheck":
        d = {k: v for k, v in d.items() if k != "passed"}
        d["max_abs_err"] = from_json_number(d["max_abs_err"])
        d["max_rel_err"] = from_json_number(d["max_rel_err"])
        d["first_mismatches"] = [(o, from_json_number(e), from_json_number(a)) for o, e, a in d["first_mismatches"]]
        return cls(**d)


@dataclass
class ValidationResult:
    passed: bool
    mode: str  # "exact" | "tolerance"
    regions: list[RegionCheck]
    atol: float | None = None
    rtol: float | None = None
    cubin: str | None = None
    notes: list[str] = field(default_factory=list)
    device: dict[str, Any] | None = None  # the GPU it ran on (kerncap.replay.devices)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed, "mode": self.mode, "atol": self.atol, "rtol": self.rtol, "cubin": self.cubin,
            "notes": list(self.notes), "regions": [r.to_dict() for r in self.regions], "device": self.device,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ValidationResult":
        return cls(
            passed=d["passed"], mode=d["mode"], regions=[RegionCheck.from_dict(r) for r in d["regions"]],
            atol=d.get("atol"), rtol=d.get("rtol"), cubin=d.get("cubin"), notes=list(d.get("notes", [])),
            device=d.get("device"),
        )

    @property
    def failures(self) -> list[RegionCheck]:
        return [r for r in self.regions if not r.passed]


def first_mismatches(window_offset: int, expected: bytes, actual: bytes, dtype: str | None,
                     atol: float, rtol: float, limit: int = MAX_FIRST_MISMATCHES) -> list[tuple[int, Any, Any]]:
    """The first few mismatches inside the window the GPU compare copied back
    (it starts at the first mismatch)."""
    found: list[tuple[int, Any, Any]] = []
    if dtype is None:
        for i, (e, a) in enumerate(zip(expected, actual)):
            if e != a:
                found.append((window_offset + i, e, a))
                if len(found) == limit:
                    break
        return found
    size = dt.itemsize(dtype)
    for i, (e, a) in enumerate(zip(dt.decode(dtype, expected), dt.decode(dtype, actual))):
        if dt.mismatches(dtype, a, e, atol, rtol):
            found.append((window_offset + i * size, e, a))
            if len(found) == limit:
                break
    if not found and len(expected) % size:  # the mismatch is in the partial element at the end
        tail = len(expected) - len(expected) % size
        found = [(window_offset + tail + i, e, a) for i, (e, a) in enumerate(zip(expected[tail:], actual[tail:])) if e != a]
    return found[:limit]


# -- text ----------------------------------------------------------------------------------


def time_unit(ms: float) -> str:
    """"us" below a millisecond, else "ms": one unit for a whole report."""
    return "us" if ms < 1.0 else "ms"


def format_ms(ms: float, unit: str | None = None) -> str:
    unit = unit or time_unit(ms)
    return f"{ms * 1000:.2f} us" if unit == "us" else f"{ms:.3f} ms"


def l2_state(flush_l2: bool, warm_l2: bool) -> str:
    """The L2 state every timed launch started from, as replay and compare print it."""
    if flush_l2:
        return "L2 flushed before each launch"
    return "the kernel's memory read into L2 before each launch" if warm_l2 else "L2 not flushed"


def format_replay(r: ReplayResult) -> str:
    what = r.cubin or "captured cubin"
    flush = l2_state(r.flush_l2, r.warm_l2)
    unit = time_unit(r.median_ms)
    on = f" on {describe_device(r.device)}" if r.device else ""
    lines = [
        f"{what}{on}: {r.iterations} iterations after {r.warmup} warm-up, {flush}",
        f"median {format_ms(r.median_ms, unit)}   min {format_ms(r.min_ms, unit)}   max {format_ms(r.max_ms, unit)}"
        f"   spread {r.spread_pct:.1f}% (p90-p10)/median",
    ]
    per = "  ".join(format_ms(t, unit).removesuffix(" " + unit) for t in r.times_ms[:32])
    more = f"  ... ({len(r.times_ms) - 32} more; --json lists all)" if len(r.times_ms) > 32 else ""
    lines.append(f"per iteration ({unit}): {per}{more}")
    if r.timer == "kernel" and r.event_median_ms is not None:
        lines.append(f"timed by CUPTI's records of each launch's kernels; between CUDA events around the same "
                     f"launches: median {format_ms(r.event_median_ms, unit)} "
                     f"({format_ms(r.event_median_ms - r.median_ms, unit)} beyond the records)")
    check = LaunchCheck.from_dict(r.check)
    if check is not None:
        lines.append(f"check: {check.text()}")
    lines += [f"note: {n}" for n in r.notes]
    return "\n".join(lines)


def _value(v: Any) -> str:
    if isinstance(v, int):
        return f"0x{v:02x}" if 0 <= v < 256 else str(v)
    return repr(v)


def format_check(c: RegionCheck) -> str:
    # Regions are named "region N"; globals by their symbol, so the kind is said for them.
    head = f"global {c.name:<24} {human_bytes(c.size, trim=True):>10}"
    if c.kind in ("array", "padding"):
        head = f"{c.name:<31} {human_bytes(c.size, trim=True):>10}"
    if c.kind in ("region", "host"):  # "region 3", "host region 0": at an address
        head = f"{c.name:<10} 0x{c.base:012x} {human_bytes(c.size, trim=True):>10}"
    if c.passed:
        return f"  ok    {head}"
    if c.dtype is None:
        what = f"{c.mismatched_bytes} bytes differ"
    else:
        what = (f"{c.mismatched_elements} {c.dtype} elements out of tolerance "
                f"(max abs {c.max_abs_err:.3g}, max rel {c.max_rel_err:.3g}; {c.mismatched_bytes} bytes differ)")
    if c.unexpected_write:
        what = "unexpected write: " + what + " in memory the captured kernel did not write"
    firsts = ", ".join(f"+0x{o:x}: expected {_value(e)} got {_value(a)}" for o, e, a in c.first_mismatches[:4])
    text = f"  FAIL  {head}  {what}" + (f"\n          first: {firsts}" if firsts else "")
    if c.report is not None:
        from kerncap.replay.mismatch import MismatchMap, format_map

        text += "\n" + "\n".join(format_map(MismatchMap.from_dict(c.report)))
    elif c.report_error:
        text += f"\n          no mismatch report: {c.report_error}"
    return text


def format_validation(v: ValidationResult) -> str:
    mode = "byte-exact" if v.mode == "exact" else f"tolerance atol={v.atol:g} rtol={v.rtol:g}"
    n_regions = sum(1 for r in v.regions if r.kind == "region")
    n_arrays = sum(1 for r in v.regions if r.kind == "array")
    n_host = sum(1 for r in v.regions if r.kind == "host")
    n_globals = len(v.regions) - n_regions - n_arrays - n_host
    verdict = "PASS" if v.passed else f"FAIL ({len(v.failures)} of {len(v.regions)} differ)"
    on = f" on {describe_device(v.device)}" if v.device else ""
    host = f", {n_host} host regions" if n_host else ""
    arrays = f", {n_arrays} CUDA array{'s' if n_arrays != 1 else ''}" if n_arrays else ""
    lines = [f"{v.cubin or 'captured cubin'}{on}: {verdict}  [{mode}; {n_regions} regions{host}, {n_globals} globals{arrays}]"]
    lines += [format_check(c) for c in v.regions]
    lines += [f"note: {n}" for n in v.notes]
    return "\n".join(lines)
