"""What a fusion's History row holds (Session.build_fusion, docs/sequences.md): the record
of the fusion (its name, the launches it replaced, the buffers its comparison left out,
the fused launch's time against the replaced launches') and how it is said."""

from __future__ import annotations

from typing import Any

from kerncap.reproducer.history import Variant


def record(name: str, first: int, last: int, excluded: list[dict[str, Any]], fused: list[float] | None,
           captured: list[float] | None) -> dict[str, Any]:
    """Variant.fusion: `excluded` as api.fused_variant_info lists them; `fused` and
    `captured` every launch's median of the fused and the captured sequence (None: not
    timed per launch)."""
    fused_ms, replaced_ms = fused_against_replaced(fused, captured, first, last)
    return {"name": name, "first": first, "last": last,
            "excluded": [{k: e[k] for k in ("name", "address", "bytes", "why") if k in e} for e in excluded],
            "fused_ms": fused_ms, "replaced_ms": replaced_ms}


def fused_against_replaced(fused: list[float] | None, captured: list[float] | None, first: int,
                           last: int) -> tuple[float | None, float | None]:
    """(the fused launch's median, the replaced launches' medians summed), from the fused
    sequence's launches (the fused one at `first`) and the captured sequence's."""
    if not fused or not captured or len(captured) <= last or len(fused) != len(captured) - (last - first):
        return None, None
    return fused[first], sum(captured[first:last + 1])


def fusion_phrase(v: Variant) -> str:
    """"fused launch 0.0110 ms vs 0.0200 ms for launches 2-3 (1.82×); not compared: buf1"."""
    f = v.fusion or {}
    excluded = ", ".join(e["name"] for e in f.get("excluded") or []) or "nothing"
    fused, replaced = f.get("fused_ms"), f.get("replaced_ms")
    if fused is None or replaced is None:
        timing = "the fused launch not timed per launch"
    else:
        ratio = f" ({replaced / fused:.2f}×)" if fused > 0 else ""
        timing = f"fused launch {fused:.4f} ms vs {replaced:.4f} ms for launches {f['first']}-{f['last']}{ratio}"
    return f"{timing}; not compared: {excluded}"
