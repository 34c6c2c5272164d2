"""The replay server's operations only sequences have (docs/sequences.md): each launch
timed, and the first launch after which a variant's state departs from the captured
program's (`validate --per-launch`)."""

from __future__ import annotations

import statistics
from typing import Any

from kerncap.errors import KerncapError
from kerncap.replay.sequence_replay import SeqProgram, mask_spans
from kerncap.replay.session_ops import _checks, compare_specs


def op_sequence_time(ns, req: dict[str, Any]) -> dict[str, Any]:
    """The whole sequence and each launch timed (CUDA events around each launch on its
    stream, `iterations` runs after `warmup`), for the captured program or `cubin`."""
    iterations, warmup = int(req.get("iterations", 10)), int(req.get("warmup", 2))
    prog = ns.sequence_program(req.get("cubin"))
    rows = [list(map(float, r)) for r in ns.session.time_steps(iterations, warmup)]
    whole = [r[0] for r in rows]
    launches = []
    for k, (step, label, stream) in enumerate(zip(prog.launch_steps, prog.launch_labels, prog.launch_streams)):
        times = [r[1 + k] for r in rows]
        launches.append({"launch": k, "step": step, "label": label, "stream": stream,
                         "median_ms": statistics.median(times), "min_ms": min(times), "times_ms": times})
    return {"whole_ms": whole, "median_ms": statistics.median(whole), "launches": launches,
            "sum_ms": sum(l["median_ms"] for l in launches), "iterations": iterations, "warmup": warmup,
            "order": ns.sequence_order, "notes": prog.notes}


def _boundaries(ns, captured: SeqProgram, variant: SeqProgram) -> list[tuple[int, int, str]]:
    """(captured end step, variant end step, label) after each launch both programs share a
    state at: every launch, the fused range as one (its launches leave the variant's steps
    but the last, which the fused launch takes the place of)."""
    seq = ns.capture.sequence
    out = []
    fuse = variant.variant.fuse if variant.variant else None
    step_of = {s.launch: i for i, s in enumerate(seq.steps) if s.op == "launch"}
    for launch, step in sorted(step_of.items(), key=lambda kv: kv[1]):
        removed = 0 if fuse is None else sum(1 for j in range(fuse.first, fuse.last) if step_of[j] < step + 1)
        if fuse and fuse.first <= launch < fuse.last:
            continue
        label = f"launches {fuse.first}-{fuse.last}, fused" if fuse and launch == fuse.last else seq.launch_label(launch)
        out.append((step + 1, step + 1 - removed, label))
    return out


def op_localize(ns, req: dict[str, Any]) -> dict[str, Any]:
    """The first launch after which `cubin`'s state differs from the captured program's,
    both run from the captured pre-state up to it (so a divergence is the launch's own,
    not inherited). Spans a fusion leaves out are masked after its range."""
    captured = ns.sequence_program(None)
    variant = ns.sequence_program(req.get("cubin"))
    if ns.sequence_order == "graph":
        raise KerncapError("--per-launch runs the sequence launch by launch; the graph order runs it whole",
                           "validate --per-launch in the streams or serial order")
    specs = compare_specs(ns, req.get("tolerances"))
    every = list(range(len(ns.items)))
    spans = mask_spans(ns.items, variant.excluded)
    checked = []
    for cend, vend, label in _boundaries(ns, captured, variant):
        ns.select(captured.key)
        ns.session.restore()
        ns.session.run_steps(0, cend)
        ns.session.clear_references()
        ns.session.keep_reference(every)
        ns.select(variant.key)
        ns.session.restore()
        ns.session.run_steps(0, vend)
        if spans and variant.fused_at is not None and vend > variant.fused_at:
            ns.session.mask(spans, "reference")
        outs = ns.session.compare(specs, "reference")
        bad = [c for c in _checks(ns, specs, outs) if not c["passed"]]
        checked.append(label)
        if bad:
            return {"diverged": True, "at": label, "launches_checked": len(checked), "checks": bad,
                    "notes": list(ns.session.notes())}
    return {"diverged": False, "at": None, "launches_checked": len(checked), "checks": [],
            "notes": list(ns.session.notes())}
