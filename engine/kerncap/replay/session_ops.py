"""Replay-server operations for validation you can trust and timing with intervals
(docs/replay.md): repeated runs of the captured kernel (is it deterministic?), runs on
perturbed pre-states, checks of a variant against references, and interleaved timing.

Each function takes the server's NativeSession and the request's arguments and answers
plain JSON. The orchestration (how many runs, which tolerance, the verdict) lives in the
client (kerncap.replay.differential, kerncap.replay.compare_timing); these only drive
the native primitives: restore, fill, run, keep_reference, compare, time.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from kerncap.reproducer.format import Region
from kerncap.errors import KerncapError
from kerncap.replay.clocks import ClockSampler
from kerncap.replay.native_session import MAX_PROGRAMS, item_label
from kerncap.replay.results import RegionCheck
from kerncap.replay.significance import TIMERS, rounds_needed

FLOOR_ITERATIONS = 50
MAX_ROUNDS = 100_000
# The reference slot that holds an input as it was before the captured kernel ran on it
# (op_reference's `changed`); timing inputs use 1..K-1.
INPUT_SLOT = 1000


def _item_index(ns) -> dict[int, int]:
    return {item.id: i for i, item in enumerate(ns.items) if isinstance(item, Region)}


def fill_specs(ns, fills: list[dict[str, Any]] | None) -> list:
    index = _item_index(ns)
    out = []
    for f in fills or []:
        if f["region"] not in index:
            raise KerncapError(f"perturbation names region {f['region']}, which this capture does not replay",
                               "plan the perturbation from the same capture")
        for offset, count in _backed_parts(ns, f):
            s = ns.core.FillSpec()
            s.item, s.offset, s.count, s.dtype, s.seed = index[f["region"]], offset, count, f["dtype"], int(f["seed"])
            s.mean, s.stddev, s.lo, s.hi, s.p_zero = (float(f[k]) for k in ("mean", "stddev", "lo", "hi", "p_zero"))
            out.append(s)
    return out


def _backed_parts(ns, f: dict[str, Any]) -> list[tuple[int, int]]:
    """(offset, count) of a perturbed span: itself, or in a sparse region its pieces in
    the backed parts (the zero-backed rest is read-only and stays the captured zeros;
    each piece draws from the span's seed, counting from its own start)."""
    offset, count = int(f["offset"]), int(f["count"])
    segments = getattr(ns, "plan", None) and ns.plan.segments.get(f["region"])
    if segments is None:
        return [(offset, count)]
    from kerncap.core import dtypes as dt

    unit = dt.itemsize(f["dtype"])
    end = offset + count * unit
    parts = []
    for lo, n in segments:
        a, b = max(offset, lo), min(end, lo + n)
        a += (offset - a) % unit  # element-aligned within the span
        if b - a >= unit:
            parts.append((a, (b - a) // unit))
    return parts


def compare_specs(ns, tolerances: dict | None) -> list:
    """One CompareSpec per item: region id -> [dtype, atol, rtol] compares element-wise,
    everything else (and every module global) byte-exact."""
    tolerances = {int(k): v for k, v in (tolerances or {}).items()}
    specs = []
    for item in ns.items:
        spec = ns.core.CompareSpec()
        t = tolerances.get(item.id) if isinstance(item, Region) else None
        spec.dtype, spec.atol, spec.rtol = (t[0], float(t[1]), float(t[2])) if t else ("", 0.0, 0.0)
        specs.append(spec)
    return specs


def _checks(ns, specs, outs, differing_only: bool = False) -> list[dict[str, Any]]:
    """Region checks as dicts; `differing_only`: just the items with a differing byte
    (a capture of 200,000 regions answers in kilobytes, not tens of megabytes)."""
    return [ns._check(item, spec.dtype or None, out, spec.atol, spec.rtol).to_dict()
            for item, spec, out in zip(ns.items, specs, outs)
            if not differing_only or out["mismatched_bytes"]]


def _run_on(ns, cubin, fills, against: str = "captured", keep_input: list[int] | None = None) -> None:
    ns.load(cubin)
    ns.session.restore()
    if fills:
        ns.session.fill(fills)
    if keep_input:
        ns.session.keep_reference(keep_input, INPUT_SLOT)
    ns.session.run()
    ns.after_run(against)  # a fused sequence variant's intermediates are not compared


def op_reference(ns, req: dict[str, Any]) -> dict[str, Any]:
    """Runs the captured kernel (or `cubin`) on the pre-state (perturbed by `fills`)
    `runs` times. The first run is compared with the capture (no fills: does replay match
    the captured post-state? with fills: how much did the outputs change?) and kept as
    the reference; the others are compared with it (run-to-run spread, element-wise for
    the regions in `tolerances`, whose atol/rtol should be 0 to measure). Only items
    with differing bytes are listed. With fills, `changed_bytes` counts what the first
    run changed in its own input: 0 means a kernel that does nothing matches it there."""
    runs = int(req.get("runs", 1))
    if runs < 1:
        raise KerncapError(f"runs must be >= 1 (got {runs})")
    fills = fill_specs(ns, req.get("fills"))
    specs = compare_specs(ns, req.get("tolerances"))
    exact = compare_specs(ns, None)
    perturbed = {f.item for f in fills}
    ns.session.clear_references()
    _run_on(ns, req.get("cubin"), fills, keep_input=sorted(perturbed))
    changed = sum(o["mismatched_bytes"] for o in ns.session.compare(exact, f"reference:{INPUT_SLOT}")) \
        if fills else None
    if not fills and req.get("cubin") is None:
        ns.captured_gap_bytes = _gap_bytes(ns)
    first_specs = specs if not fills else exact
    outs = ns.session.compare(first_specs, "captured")
    # The reference holds what this run left in every item it may have changed.
    keep = [i for i, (item, out) in enumerate(zip(ns.items, outs))
            if item.written or i in perturbed or out["mismatched_bytes"]]
    first = _checks(ns, first_specs, outs, differing_only=True)
    ns.session.keep_reference(keep)
    spread = []
    for _ in range(runs - 1):
        _run_on(ns, req.get("cubin"), fills, "reference")
        spread.append(_checks(ns, specs, ns.session.compare(specs, "reference"), differing_only=True))
    return {"first": first, "spread": spread, "references": [_label(ns.items[i]) for i in keep],
            "perturbed_items": sorted(perturbed), "changed_bytes": changed}


def op_check(ns, req: dict[str, Any]) -> dict[str, Any]:
    """Runs `cubin` on the (perturbed) pre-state and compares every item with the
    captured post-state (`against: "captured"`) or the references op_reference kept.
    `failures_only`: list just the items that fail."""
    fills = fill_specs(ns, req.get("fills"))
    specs = compare_specs(ns, req.get("tolerances"))
    _run_on(ns, req.get("cubin"), fills, req.get("against", "captured"))
    checks = _checks(ns, specs, ns.session.compare(specs, req.get("against", "captured")))
    padding = _padding_check(ns)
    if padding is not None:
        checks.append(padding)
    if req.get("failures_only"):
        checks = [c for c in checks if not c["passed"]]
    return {"checks": checks, "notes": list(ns.session.notes()), "not_compared": ns.not_compared()}


def _gap_bytes(ns) -> int:
    return int(ns.session.gap_bytes()) if getattr(ns, "gaps", None) else 0


def _padding_check(ns) -> dict[str, Any] | None:
    """A failing check when the program just run left bytes in the padding of mapped pages
    (outside every captured region) and the captured kernel leaves none there: memory no
    output of the kernel lives in, where a variant could keep state or hide work."""
    written = _gap_bytes(ns)
    if not written or getattr(ns, "captured_gap_bytes", None):
        return None
    base, _ = ns.gaps[0]
    return RegionCheck("padding", None, f"padding of mapped pages ({len(ns.gaps)} ranges outside every region)",
                       base, sum(n for _, n in ns.gaps), None, written, None, None, None, [], True).to_dict()


def op_read(ns, req: dict[str, Any]) -> dict[str, Any]:
    """Test hook: fills (optional) the pre-state and reads bytes of a region back (hex)."""
    index = _item_index(ns)
    ns.load(None)
    ns.session.restore()
    fills = fill_specs(ns, req.get("fills"))
    if fills:
        ns.session.fill(fills)
    raw = ns.session.read(index[int(req["region"])], int(req["offset"]), int(req["length"]))
    return {"hex": bytes(raw).hex()}


def op_time_compare(ns, req: dict[str, Any]) -> dict[str, Any]:
    """Interleaved timing of the captured cubin and variants: `rounds` rounds (more when
    `min_seconds` of kernel time per program needs more, at most `max_seconds` of wall
    time), each timing every program `iterations` times after `warmup` launches, in an
    order that rotates from round to round. Also the launch floor and the SM clock."""
    cubins = [None] + [c for c in req.get("cubins", []) if c is not None]
    if len(cubins) > MAX_PROGRAMS:
        raise KerncapError(f"{len(cubins) - 1} variants: at most {MAX_PROGRAMS - 1} can be compared at once",
                           "compare fewer variants per run")
    rounds, iterations, warmup = int(req.get("rounds", 30)), int(req.get("iterations", 10)), int(req.get("warmup", 2))
    flush_l2, warm_l2 = bool(req.get("flush_l2", False)), bool(req.get("warm_l2", False))
    min_seconds, max_seconds = float(req.get("min_seconds", 0.0)), float(req.get("max_seconds", 300.0))
    timer = timer_of(req)
    if rounds < 1 or iterations < 1 or warmup < 0:
        raise KerncapError(f"rounds and iterations must be >= 1 and warmup >= 0 (got {rounds}, {iterations}, {warmup})")
    keys = [ns.program_key(c) for c in cubins]
    labels = ["captured cubin"] + [str(c) for c in cubins[1:]]
    ns.session.time_empty(10)  # warm the empty kernel's module and the stream
    floor = statistics.median(ns.session.time_empty(FLOOR_ITERATIONS))
    sampler = _sampler(ns)
    times: list[list[list[float]]] = [[] for _ in keys]
    events: list[list[list[float]]] = [[] for _ in keys]  # the kernel timer's launches as the events saw them
    checks: list[list[list[list[int]]]] = [[] for _ in keys]
    notes: list[str] = []
    inputs = _timing_inputs(ns, keys[0], req.get("inputs") or [])
    check_specs = {}  # read once: the record of the captured kernel's tolerance does not change meanwhile
    for key in keys:
        ns.select(key)
        check_specs[key] = ns.check_specs()
    t0 = time.monotonic()
    target, done = rounds, 0
    sampler.sample()
    try:
        while done < target:
            for j in [(j + done) % len(keys) for j in range(len(keys))]:
                ns.select(keys[j])
                ns.session.set_check(True, check_specs[keys[j]])
                times[j].append([float(t) for t in ns.session.time(
                    iterations, warmup, flush_l2, warm_l2, **({"kernel_timer": True} if timer == "kernel" else {}))])
                if timer == "kernel":
                    events[j].append([float(t) for t in ns.session.last_events_ms()])
                checks[j].append([[int(i), int(n)] for i, n in ns.session.last_check()])
            sampler.sample()
            done += 1
            if min_seconds > 0:
                per_round = [sum(sum(r) for r in t) / len(t) for t in times]
                target = min(MAX_ROUNDS, rounds_needed(rounds, min_seconds, per_round))
            if time.monotonic() - t0 > max_seconds and done < target:
                notes.append(f"stopped after {done} of {target} rounds: the {max_seconds:g} s limit was reached")
                break
    finally:
        ns.session.set_time_inputs([[]])  # a plain replay times the captured input again
    report = sampler.report()
    ns.select(keys[0])
    return {
        "programs": [{"label": lab, "cubin": c, "rounds": t, "checks": k, **({"event_rounds": e} if e else {})}
                     for lab, c, t, k, e in zip(labels, cubins, times, checks, events)],
        "timer": timer,
        "inputs": inputs,
        "iterations": iterations, "warmup": warmup, "flush_l2": flush_l2, "warm_l2": warm_l2, "floor_ms": floor,
        "clock": report, "seconds": time.monotonic() - t0, "notes": notes + list(ns.session.notes()),
    }


def timer_of(req: dict[str, Any]) -> str:
    """The request's timer (requests.TIMERS), checked: the server is a door of its own."""
    timer = str(req.get("timer", "events"))
    if timer not in TIMERS:
        raise KerncapError(f"timer {timer!r} is none of {', '.join(TIMERS)}",
                           "events (the default) or kernel (CUPTI's record of the kernel's own run)")
    return timer


def _timing_inputs(ns, captured_key: str, perturbed: list[list[dict[str, Any]]]) -> int:
    """Sets the inputs the timing rotates over: the captured one, then each perturbed one
    (fills as `check` takes them), whose expected state is the captured kernel's own output
    on it, kept in reference slot j. A program whose speed comes from having seen an input
    before then meets each input only every K-th launch, with everything it could have
    kept restored in between. Returns K."""
    specs = [[]]
    for j, fills in enumerate(perturbed, start=1):
        fs = fill_specs(ns, fills)
        ns.select(captured_key)
        ns.session.restore()
        ns.session.fill(fs)
        ns.session.run()
        touched = {f.item for f in fs}
        ns.session.keep_reference([i for i, item in enumerate(ns.items) if item.written or i in touched], j)
        specs.append(fs)
    ns.session.set_time_inputs(specs)
    return len(specs)


def _sampler(ns) -> ClockSampler:
    """One NVML session per replay server (its setup takes a while); fresh samples per call."""
    sampler = getattr(ns, "_clock_sampler", None)
    if sampler is None:
        sampler = ns._clock_sampler = ClockSampler(ns.session.pci_bus_id())
    sampler.samples, sampler.reasons = [], set()
    return sampler


def _label(item) -> str:
    return item_label(item)
