"""Validation you can trust (docs/replay.md, "What a verdict covers"):

1. **Determinism.** The captured kernel runs `runs` times on the captured pre-state. The
   first run is compared with the captured post-state and every later run with the
   first. A kernel whose runs differ (float atomics, split-K, unordered reductions) is
   nondeterministic on this GPU: each region that varied gets a tolerance class derived
   from its own spread (atol = SPREAD_FACTOR × the largest difference seen, element-wise
   in the region's dtype); every other region stays byte-exact. A varying region of
   unknown dtype cannot be judged: a mismatch there makes the verdict inconclusive,
   never a pass and never a failure. What was found is recorded in the reproducer
   (determinism.json).
2. **The captured input.** The variant runs on the captured pre-state and every region
   and module global is compared with the captured post-state.
3. **Perturbed inputs** (`perturb` > 0). For each k: the captured kernel runs on the
   pre-state with the plan's spans redrawn (kerncap.replay.perturb); its result is the
   reference (run twice, or `runs` times for a nondeterministic kernel, to measure the
   spread on this input too); the variant runs on the same state and must match it. A
   perturbation that makes the captured kernel itself fault is reported as such and
   counted as not covered, not as a failure of the variant.
4. **Does the verdict discriminate?** An input on which the captured kernel changes no
   byte cannot tell it from a kernel that does nothing. When the captured dispatch wrote
   nothing new ("written: none": its outputs already held those values), the memory its
   non-const pointer parameters reach is filled with a canary (0xA5 bytes) and the
   captured kernel run over it: what it overwrites is its write set, and the variant must
   leave the same bytes there (the *canary input*). A verdict none of whose inputs
   changed a byte is never a PASS: it is inconclusive and says that a kernel that does
   nothing would pass.
Several reproducers of the same kernel (several dispatches, a reproducer set's members) are checked one after the
other; the report says how many inputs the verdict covers.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from kerncap.core import dtypes as dt
from kerncap.core.fsio import write_atomic
from kerncap.core.schema import problem
from kerncap.core.units import human_bytes
from kerncap.errors import KerncapError
from kerncap.reproducer.closure_report import likely_causes
from kerncap.reproducer.format import Capture, read_json
from kerncap.reproducer.schemas import DETERMINISM_JSON
from kerncap.replay import perturb as pt
from kerncap.replay.devices import describe as describe_device
from kerncap.replay.requests import RUNS, ValidateRequest
from kerncap.replay.region_types import known_dtypes, triton_region_dtypes
from kerncap.replay.results import RegionCheck, format_check

DEFAULT_RUNS = RUNS.default
ESCALATE = 4  # runs × this when replay differs from the capture but not from itself
SPREAD_FACTOR = 4.0
RECORD = "determinism.json"
RECORD_FORMAT = "kerncap-determinism"
MAX_RECORD_BYTES = 64 << 20


@dataclass
class RegionSpread:
    region: int
    dtype: str | None  # None: unknown, so no tolerance can be derived
    differing_runs: int
    max_abs: float | None
    max_rel: float | None
    atol: float | None  # the derived class (None when dtype is None)


@dataclass
class Determinism:
    runs: int
    deterministic: bool
    regions: list[RegionSpread] = field(default_factory=list)  # the regions that varied
    capture_mismatch: list[str] = field(default_factory=list)  # items replay (always) left unlike the capture
    likely_causes: list[str] = field(default_factory=list)  # from the capture (closure_report), when it mismatches

    def text(self) -> str:
        if self.runs < 2:
            head = "captured kernel: determinism not checked (--runs 1)"
        elif self.deterministic:
            head = f"captured kernel: deterministic ({self.runs} runs identical)"
        else:
            parts = []
            for r in self.regions:
                if r.dtype:
                    parts.append(f"region {r.region} ({r.dtype}) varies in {r.differing_runs} of {self.runs} runs, "
                                 f"max abs {r.max_abs:.3g}, max rel {r.max_rel:.3g} → tolerance class atol {r.atol:.3g}")
                else:
                    parts.append(f"region {r.region} varies in {r.differing_runs} of {self.runs} runs; its dtype is "
                                 f"unknown, so it cannot be judged (--region-dtype {r.region}=T)")
            head = "captured kernel: NONDETERMINISTIC on this GPU: " + "; ".join(parts)
        if self.capture_mismatch and self.likely_causes:
            head += ("\n  note: replay of the captured kernel differs from the captured post-state in "
                     + ", ".join(self.capture_mismatch) + ". Likely cause, from the capture: "
                     + "; ".join(self.likely_causes))
        elif self.capture_mismatch:
            head += ("\n  note: replay of the captured kernel differs from the captured post-state in "
                     + ", ".join(self.capture_mismatch) + " (the capture may be polluted; see docs/facts.md §7)")
        return head

    def tolerances(self) -> dict[int, tuple[str, float, float]]:
        return {r.region: (r.dtype, r.atol, 0.0) for r in self.regions if r.dtype and r.atol is not None}

    @property
    def unjudgeable(self) -> set[int]:
        return {r.region for r in self.regions if not r.dtype}


@dataclass
class InputVerdict:
    input: str  # "captured input", "perturbation 3 (widened)"
    status: str  # "pass" | "fail" | "inconclusive" | "baseline fault" | "variant fault"
    mode: str  # "byte-exact" | "tolerance (…)"
    checks: list[RegionCheck] = field(default_factory=list)  # every item (captured input) or the failing ones
    notes: list[str] = field(default_factory=list)
    # bytes the captured kernel changed in this input (0: a kernel that does nothing matches
    # it here); None where not measured
    changed_bytes: int | None = None

    @property
    def failures(self) -> list[RegionCheck]:
        return [c for c in self.checks if not c.passed]

    @property
    def covered(self) -> bool:
        return self.status in ("pass", "fail", "inconclusive", "variant fault")


@dataclass
class ReproducerReport:
    reproducer: str
    kernel: str
    determinism: Determinism | None
    plan: list[str]  # the perturbation plan's report lines ([] without --perturb)
    inputs: list[InputVerdict]
    notes: list[str] = field(default_factory=list)
    device: dict[str, Any] | None = None  # the GPU it ran on (kerncap.replay.devices)


@dataclass
class TrustReport:
    cubin: str | None
    perturb: int
    seed: int
    reproducers: list[ReproducerReport]
    of_set: bool = False  # over the members of one reproducer set (its JSON says "set": true)

    @property
    def inputs(self) -> list[InputVerdict]:
        return [i for r in self.reproducers for i in r.inputs]

    @property
    def verdict(self) -> str:
        covered = [i for i in self.inputs if i.covered]
        if any(i.status in ("fail", "variant fault") for i in covered):
            return "fail"
        if not covered or any(i.status == "inconclusive" for i in covered) or not self.discriminates:
            return "inconclusive"
        return "pass"

    @property
    def discriminates(self) -> bool:
        """Some covered input on which the captured kernel changed a byte: a kernel that
        does nothing would fail there."""
        return any(i.covered and i.changed_bytes for i in self.inputs)

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def exit_status(self) -> int:
        return {"pass": 0, "fail": 1, "inconclusive": 3}[self.verdict]

    def summary(self) -> str:
        """"PASS on 18 inputs of 2 reproducers (2 captured + 16 perturbed)"."""
        covered = [i for i in self.inputs if i.covered]
        captured = sum(1 for i in covered if i.input == "captured input")
        canary = sum(1 for i in covered if i.input.startswith("canary"))
        perturbed = len(covered) - captured - canary
        faulted = sum(1 for i in self.inputs if i.status == "baseline fault")
        n = len(self.reproducers)
        what = f"{len(covered)} input{'s' if len(covered) != 1 else ''} of {n} reproducer{'s' if n != 1 else ''} " \
               f"({captured} captured + {perturbed} perturbed" + (f" + {canary} canary)" if canary else ")")
        text = f"{self.verdict.upper()} on {what}"
        if self.verdict == "inconclusive" and covered and not self.discriminates and \
                not any(i.status in ("inconclusive", "fail", "variant fault") for i in covered):
            text += ("; NOT DISCRIMINATING: the captured kernel changed no byte on any of these inputs, so a kernel "
                     "that does nothing would pass too (try --perturb K, or capture another dispatch)")
        if faulted:
            text += f"; {faulted} perturbed input{'s' if faulted != 1 else ''} made the captured kernel itself fault " \
                    "(not counted)"
        return text

    @property
    def mode(self) -> str:
        """"exact", "tolerance" or "tolerance (nondeterministic)": how the verdict compared."""
        modes = {i.mode for i in self.inputs if i.covered}
        if not modes or modes == {"byte-exact"}:
            return "exact"
        return "tolerance (nondeterministic)" if any("nondeterministic" in m for m in modes) else "tolerance"

    def short(self) -> str:
        """For the workbench's History: "exact", "tolerance", "exact · p8", "exact · no-op passes"."""
        perturbed = sum(1 for i in self.inputs if i.covered and i.input.startswith("perturbation"))
        mode = {"exact": "exact", "tolerance": "tol", "tolerance (nondeterministic)": "nondet tol"}[self.mode]
        canary = any(i.covered and i.input.startswith("canary") for i in self.inputs)
        return mode + (f" · p{perturbed}" if perturbed else "") + (" · canary" if canary else "") + \
            ("" if self.discriminates else " · no-op passes")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for rd, r in zip(d["reproducers"], self.reproducers):
            for idict, i in zip(rd["inputs"], r.inputs):
                idict["checks"] = [c.to_dict() for c in i.checks]
        d.update(verdict=self.verdict, passed=self.passed, summary=self.summary(), mode=self.mode,
                 discriminates=self.discriminates)
        # As `kerncap validate` always printed: every region and global of the first
        # reproducer's captured input.
        first = self.reproducers[0].inputs[0] if self.reproducers and self.reproducers[0].inputs else None
        d["regions"] = [c.to_dict() for c in first.checks] if first else []
        return {"set": True, **d} if d.pop("of_set") else d


# -- running it ---------------------------------------------------------------------------


def validate_reproducers(dirs: Sequence[str | Path], cubin: str | Path | None, options: ValidateRequest, *,
                         device: int = 0, progress: Callable[[str], None] | None = None,
                         cubins: Sequence[str | Path | None] | None = None,
                         sequence_order: str | None = None) -> TrustReport:
    """Validates `cubin` (None: the captured cubin) on every reproducer in `dirs`, each in
    its own replay server; `cubins`: one per reproducer instead (a set variant, whose
    members may run different builds)."""
    from kerncap.replay.client import ReplayClient

    if not dirs:
        raise KerncapError("no reproducer given", "kerncap validate DIR [DIR ...]")
    captures = [Capture.open(d) for d in dirs]
    names = {c.kernel.get("name") for c in captures}
    if len(names) > 1:
        listing = "; ".join(f"{d}: {c.kernel.get('name')}" for d, c in zip(dirs, captures))
        raise KerncapError(f"the reproducers hold different kernels ({listing})",
                           "a verdict covers one kernel: give reproducers of the same kernel")
    if cubins is not None and len(cubins) != len(dirs):
        raise KerncapError(f"{len(cubins)} cubins for {len(dirs)} reproducers", "this is a kerncap bug")
    reports = []
    for d, cap, one in zip(dirs, captures, cubins if cubins is not None else [cubin] * len(dirs)):
        plan = pt.plan(cap, options.keep, options.region_dtypes) if options.perturb and cap.sequence is None else None
        with ReplayClient(d, device=device, sequence_order=sequence_order) as rc:
            reports.append(validate_one(rc, cap, one, options, plan=plan, progress=progress))
    # What ran: a sequence gets no perturbed inputs (validate_one notes why), whichever front end asked.
    perturb = 0 if all(c.sequence is not None for c in captures) else options.perturb
    return TrustReport(None if cubin is None else str(cubin), perturb, options.seed, reports)


def validate_one(rc, capture: Capture, cubin: str | Path | None, options: ValidateRequest, *,
                 plan: pt.PerturbPlan | None = None, progress: Callable[[str], None] | None = None
                 ) -> ReproducerReport:
    """One reproducer, through an open ReplayClient (the workbench keeps one resident).
    `plan`: the perturbation plan (computed once per reproducer; None without --perturb)."""
    say = progress or (lambda _msg: None)
    cubin = None if cubin is None else str(Path(cubin).resolve())
    notes: list[str] = []
    measure = _measure_tolerances(capture, options.region_dtypes, notes)
    runs = options.runs
    if runs < 1:
        raise KerncapError(f"--runs {runs}: the captured kernel must run at least once", "e.g. --runs 3")
    say(f"{capture.root}: checking that the captured kernel is deterministic ({runs} runs)")
    ref = rc.request("reference", cubin=None, fills=None, runs=runs, tolerances=measure)
    det = determinism_from(ref, runs, measure)
    if det.deterministic and det.capture_mismatch and runs >= 2:
        # Replay disagrees with the capture, yet its runs agree: either the capture is
        # polluted or the kernel varies rarely. More runs before calling it either.
        runs *= ESCALATE
        say(f"replay differs from the capture; {runs} more runs")
        ref = rc.request("reference", cubin=None, fills=None, runs=runs, tolerances=measure)
        det = determinism_from(ref, runs, measure)
    if det.capture_mismatch:
        det.likely_causes = likely_causes(capture)
    notes += _record(capture, det, rc.info)
    classes, mode = _classes(capture, det, options, notes)
    inputs = []
    say("checking the captured input")
    captured = _check(rc, cubin, None, classes, mode, "captured", "captured input", det.unjudgeable,
                      options.region_shapes)
    captured.changed_bytes = written_bytes(capture)
    inputs.append(captured)
    if not captured.changed_bytes and capture.sequence is None:
        fills = canary_fills(capture)
        if fills:
            say("the captured dispatch wrote nothing new: finding its write set with a canary input")
            inputs.append(_perturbed(rc, capture, cubin, None, -1, options, det, measure, fills=fills,
                                     label=f"canary input ({canary_text(capture, fills)})"))
        else:
            notes.append("the captured dispatch wrote nothing new and no parameter reaches memory it could write: "
                         "no write set could be established")
    plan_lines: list[str] = []
    if options.perturb and capture.sequence is not None:
        notes.append(f"--perturb {options.perturb}: a sequence is validated on its captured input only (which of its "
                     "regions its launches read before writing is not known yet)")
    elif options.perturb:
        plan = plan or pt.plan(capture, options.keep, options.region_dtypes)
        plan_lines = plan.report_lines() + [f"note: {n}" for n in plan.notes]
        if not plan.perturbed:
            notes.append(f"--perturb {options.perturb}: no region could be perturbed (see the list above); "
                         "the verdict covers the captured input only")
        else:
            for k in range(options.perturb):
                say(f"perturbation {k + 1} of {options.perturb}")
                inputs.append(_perturbed(rc, capture, cubin, plan, k, options, det, measure))
    return ReproducerReport(str(capture.reproducer_dir), capture.kernel.get("name", "?"), det, plan_lines, inputs,
                            notes, (rc.info or {}).get("device"))


def _measure_tolerances(capture: Capture, explicit: dict[int, str], notes: list[str]
                        ) -> dict[int, tuple[str, float, float]]:
    """Element-wise comparison (atol = rtol = 0: it counts and measures every difference)
    for the regions whose dtype is known (--region-dtype first), so a spread can be
    measured there."""
    dtypes = known_dtypes(capture, triton_region_dtypes(capture), notes)
    dtypes.update({int(k): dt.normalize(v) for k, v in explicit.items()})
    return {rid: (d, 0.0, 0.0) for rid, d in dtypes.items() if dt.is_float(d)}


def determinism_from(ref: dict[str, Any], runs: int, measure: dict[int, tuple], against_capture: bool = True
                     ) -> Determinism:
    """The determinism verdict from a `reference` answer. `against_capture`: its first
    run was compared element-wise with the captured post-state (the unperturbed state),
    so that difference belongs to the spread too."""
    first = [RegionCheck.from_dict(c) for c in ref["first"]]
    later = [[RegionCheck.from_dict(c) for c in run] for run in ref["spread"]]
    varying: dict[int, list[RegionCheck]] = {}
    for run in later:
        for c in run:
            if c.kind == "region" and c.mismatched_bytes:
                varying.setdefault(c.id, []).append(c)
    spreads = []
    for rid, checks in sorted(varying.items()):
        dtype = measure.get(rid, (None,))[0]
        with_first = checks + [c for c in first if against_capture and c.id == rid and c.mismatched_bytes]
        max_abs = max((c.max_abs_err or 0.0) for c in with_first) if dtype else None
        max_rel = max((c.max_rel_err or 0.0) for c in with_first) if dtype else None
        atol = SPREAD_FACTOR * max_abs if dtype and max_abs is not None else None
        spreads.append(RegionSpread(rid, dtype, len(checks), max_abs, max_rel, atol))
    # A region left out of the comparison (freed inside a sequence) differs by design.
    mismatch = [c.name for c in first if against_capture and c.mismatched_bytes and not c.excluded
                and (c.kind != "region" or c.id not in varying)]
    return Determinism(runs, not varying, spreads, mismatch)


def _classes(capture: Capture, det: Determinism, options: ValidateRequest, notes: list[str]
             ) -> tuple[dict[int, tuple[str, float, float]], str]:
    """Per-region (dtype, atol, rtol) for the variant's checks, and the mode's name. An
    explicit --atol/--rtol replaces the class derived for a nondeterministic kernel;
    --dtype/--region-dtype alone only say the element types."""
    derived = det.tolerances()
    if not options.tolerance:
        if det.deterministic:
            return {}, "byte-exact"
        return derived, "tolerance (nondeterministic: derived from its own spread)"
    dtypes = _tolerance_dtypes(capture, options, notes)
    a, r = float(options.atol or 0.0), float(options.rtol or 0.0)
    classes = {rid: (d, a, r) for rid, d in dtypes.items()}
    if options.atol is None and options.rtol is None and derived:
        classes.update(derived)
        return classes, "tolerance (nondeterministic: derived from its own spread)"
    for s in det.regions:
        if s.max_abs is not None and s.max_abs > a and r == 0.0:
            notes.append(f"region {s.region}: the captured kernel's own spread (max abs {s.max_abs:.3g}) "
                         f"exceeds atol {a:g}; a correct variant may fail")
    return classes, f"tolerance (atol={a:g} rtol={r:g})"


def _tolerance_dtypes(capture: Capture, options: ValidateRequest, notes: list[str]) -> dict[int, str]:
    """The dtypes `kerncap validate --atol/--rtol/--dtype` uses (explicit, known, default)."""
    known = known_dtypes(capture, triton_region_dtypes(capture), notes)
    fallback = dt.normalize(options.dtype) if options.dtype else "float32"
    out = {}
    for r in capture.regions:
        chosen = options.region_dtypes.get(r.id)
        out[r.id] = dt.normalize(chosen) if chosen else known.get(r.id, fallback)
    return out


def _check(rc, cubin, fills, classes, mode, against, label, unjudgeable: set[int], shapes=None) -> InputVerdict:
    try:
        got = rc.request("check", cubin=cubin, fills=fills, tolerances=_wire(classes), against=against,
                         failures_only=fills is not None, report=True, shapes=_wire(shapes or {}))
    except KerncapError as exc:
        if is_fault(exc):
            return InputVerdict(label, "variant fault", mode, notes=[f"the variant faulted: {exc.message}"])
        raise
    checks = [RegionCheck.from_dict(c) for c in got["checks"]]
    bad = [c for c in checks if not c.passed]
    hard = [c for c in bad if not (c.kind == "region" and c.id in unjudgeable)]
    status = "fail" if hard else "inconclusive" if bad else "pass"
    # a fused sequence variant's intermediates: masked, so their rows read ok; named here
    notes = [f"not compared: {what}" for what in got.get("not_compared", [])]
    if bad and not hard:
        notes.append("differences only in regions the captured kernel itself varies in and whose dtype is unknown: "
                     + ", ".join(c.name for c in bad))
    return InputVerdict(label, status, mode, checks, notes)


def _perturbed(rc, capture: Capture, cubin, plan: pt.PerturbPlan | None, k: int, options: ValidateRequest,
               det: Determinism, measure: dict[int, tuple], *, fills: list[dict] | None = None,
               label: str | None = None) -> InputVerdict:
    fills = fills if fills is not None else plan.fills(options.seed, k)
    label = label or f"perturbation {k + 1} ({pt.MODES[k % 2]})"
    runs = 2 if det.deterministic else max(2, options.runs)
    try:
        ref = rc.request("reference", cubin=None, fills=fills, runs=runs, tolerances=_wire(measure))
    except KerncapError as exc:
        if is_fault(exc):
            return InputVerdict(label, "baseline fault", "-", notes=[
                f"the captured kernel itself faults on this input ({exc.message}); it is not counted. If a region "
                "drives its indexing, keep it: --keep REGION"])
        raise
    spreads = determinism_from(ref, runs, measure, against_capture=False)
    changed = ref.get("changed_bytes")
    notes = [_effect(capture, plan, [RegionCheck.from_dict(c) for c in ref["first"]])] if plan is not None else \
        [f"the captured kernel overwrote {human_bytes(changed or 0, trim=True)} of the canary: its write set"
         if changed else "the captured kernel overwrote none of the canary: no write set"]
    if det.deterministic and not spreads.deterministic:
        notes.append("the captured kernel is nondeterministic on this input (it was not on the captured one)")
    # The class comes from the spread on this very input: magnitudes differ from the capture's.
    classes, mode = _classes(capture, spreads, options, notes)
    unknown = spreads.unjudgeable
    verdict = _with_notes(_check(rc, cubin, fills, classes, mode, "reference", label, unknown, options.region_shapes),
                          notes)
    verdict.changed_bytes = None if changed is None else int(changed)
    return verdict


def _effect(capture: Capture, plan: pt.PerturbPlan, first: list[RegionCheck]) -> str:
    """How much the perturbation changed what the captured kernel wrote (its outputs
    against the captured post-state), outside the spans that were redrawn."""
    written = {r.id for r in capture.regions if r.written}
    redrawn_only = {s.span.region for s in plan.perturbed} - written
    changed = sum(c.mismatched_bytes for c in first
                  if c.kind != "region" or c.id not in redrawn_only)
    if changed == 0:
        return "the captured kernel's outputs did not change on this input: it proves little"
    return f"the captured kernel's outputs differ from the captured ones in {human_bytes(changed, trim=True)}"


def written_bytes(capture: Capture) -> int:
    """Bytes of the chunks the captured dispatch changed (pre-state differs from post-state),
    over regions, module globals, host regions and CUDA arrays."""
    total = 0
    for kind in ("regions", "globals", "host_regions", "arrays"):
        for item in getattr(capture, kind, None) or []:
            pre, post = getattr(item, "pre", None), getattr(item, "post", None)
            if pre and post:
                total += sum(capture.chunk_length(item.size, i) for i, (a, b) in enumerate(zip(pre, post)) if a != b)
    return total


CANARY = 0xA5


def canary_fills(capture: Capture) -> list[dict]:
    """Fills that set the memory a kernel could write, as far as its parameters say, to the
    canary byte: each device region a pointer parameter reaches, unless the parameter's C++
    type says it points to const (a Triton kernel's or an untyped launch's pointers all count)."""
    from kerncap.replay.region_types import cxx_parameter_types

    types = cxx_parameter_types(capture.kernel.get("demangled")) or []
    regions = {r.id: r for r in capture.regions}
    chosen: list[int] = []
    for p in capture.params:
        if p.region is None or p.region not in regions or p.region in chosen:
            continue
        t = types[p.index] if p.index < len(types) else None
        if t is not None and _points_to_const(t):
            continue
        chosen.append(p.region)
    return [{"region": rid, "offset": 0, "count": regions[rid].size, "dtype": "uint8", "seed": 0, "mode": "canary",
             "mean": float(CANARY), "stddev": 0.0, "lo": float(CANARY), "hi": float(CANARY), "p_zero": 0.0}
            for rid in chosen]


def _points_to_const(text: str) -> bool:
    """"float const*" and "const float*" point to const; "float*" and "float* const" do not."""
    t = text.strip()
    if t.endswith("const"):
        t = t[:-5].rstrip()
    if not t.endswith("*"):
        return False  # not a pointer (a struct by value may hold pointers: kept as a candidate)
    return "const" in t[:-1].split("*")[-1] if "*" in t[:-1] else "const" in t[:-1]


def canary_text(capture: Capture, fills: list[dict]) -> str:
    return "regions " + ", ".join(str(f["region"]) for f in fills) + f" filled with 0x{CANARY:02X}"


def _with_notes(v: InputVerdict, notes: list[str]) -> InputVerdict:
    v.notes = notes + v.notes
    return v


def _wire(classes: dict[int, tuple]) -> dict[str, list]:
    return {str(k): list(v) for k, v in classes.items()}


def is_fault(exc: KerncapError) -> bool:
    """A failing launch (the native run() names the kernel in its error), or a server
    that died under one. Other CUDA errors (out of memory, ...) are not the kernel's."""
    kind = getattr(exc, "kind", None)
    return kind == "died" or (kind == "cuda" and exc.message.startswith(("cuStreamSynchronize on kernel ",
                                                                         "cuLaunchKernelEx on kernel ")))


# -- the record in the reproducer ---------------------------------------------------------


def _record(capture: Capture, det: Determinism, info: dict | None) -> list[str]:
    """Writes determinism.json beside capture/; a read-only reproducer gets a note."""
    root = capture.reproducer_dir
    path = root / RECORD
    data = {
        "format": RECORD_FORMAT, "format_version": 1,
        "time": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kernel": capture.kernel.get("name"), "gpu": (info or {}).get("gpu"),
        "runs": det.runs, "deterministic": det.deterministic, "spread_factor": SPREAD_FACTOR,
        "regions": [asdict(r) for r in det.regions], "capture_mismatch": det.capture_mismatch,
    }
    try:
        write_atomic(path, json.dumps(data, indent=1) + "\n", what=f"record the determinism check in {path}")
    except KerncapError as exc:
        return [exc.message]
    return []


def load_record(reproducer_dir: str | Path) -> dict[str, Any] | None:
    """What the last validation found about the captured kernel's determinism, or None
    (also for a record that does not fit its schema: it travels with the reproducer)."""
    try:
        data = read_json(Path(reproducer_dir) / RECORD, MAX_RECORD_BYTES, "", "")
    except KerncapError:
        return None
    return data if problem(data, DETERMINISM_JSON) is None else None


# -- text -----------------------------------------------------------------------------------


def format_report(report: TrustReport) -> str:
    """The text `kerncap validate` prints."""
    what = report.cubin or "captured cubin"
    lines = [f"{what}: {report.summary()}"]
    for r in report.reproducers:
        on = f" on {describe_device(r.device)}" if r.device else ""
        lines.append(f"reproducer {r.reproducer} ({r.kernel}){on}")
        if r.determinism is not None:
            lines += ["  " + line for line in r.determinism.text().splitlines()]
        if r.plan:
            seed = f" (seed {report.seed})"
            lines.append(f"  perturbation plan{seed}:")
            lines += [f"    {line}" for line in r.plan]
        for i in r.inputs:
            status = {"pass": "pass", "fail": "FAIL", "inconclusive": "INCONCLUSIVE", "baseline fault": "not covered",
                      "variant fault": "FAIL (variant faulted)"}[i.status]
            if i.covered and i.changed_bytes == 0:
                status += " (the captured kernel changed nothing here: a no-op passes this input)"
            lines.append(f"  {i.input}: {status}" + (f" [{i.mode}]" if i.mode != "-" else ""))
            lines += ["  " + format_check(c) for c in (i.checks if i.input == "captured input" else i.failures)]
            lines += [f"      {n}" for n in i.notes]
        lines += [f"  note: {n}" for n in r.notes]
    return "\n".join(lines)
