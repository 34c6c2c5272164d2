"""Shape buckets: a kernel's launches grouped by launch signature (docs/selection.md).

The interposer classifies each launch by grid, block, dynamic shared memory and the
values of its scalar arguments (pointer values left out) and times each bucket from
CUPTI's activity records; this module reads those tables (profile-<pid>.json's
"buckets", a set capture's buckets-<pid>.json), merges them across processes, writes
them for people, and turns per-bucket speedups into the workload's speedup.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kerncap.core.units import format_dim
from kerncap.errors import KerncapError


@dataclass
class Bucket:
    kernel: str  # mangled
    demangled: str
    grid: list[int]
    block: list[int]
    shared_mem_bytes: int
    scalars: list[dict[str, Any]]  # {"index", "size", "hex"}
    scalars_known: bool = True
    launches: int = 0
    timed: int = 0  # launches with an activity record
    total_ns: int = 0
    min_ns: int = 0
    max_ns: int = 0
    first_dispatch: int | None = None
    captured_dispatch: int | None = None
    capture_dir: str | None = None
    refused: str | None = None
    failed: bool = False

    @property
    def key(self) -> tuple:
        return (self.kernel, tuple(self.grid), tuple(self.block), self.shared_mem_bytes,
                tuple((s["index"], s["hex"]) for s in self.scalars), self.scalars_known)

    @property
    def avg_ns(self) -> float:
        return self.total_ns / self.timed if self.timed else 0.0

    @property
    def time_ns(self) -> float:
        """In-app time: measured, extended to the launches without a record (a run the
        capture ended early flushed only part of its records)."""
        if self.timed >= self.launches or not self.timed:
            return float(self.total_ns)
        return self.avg_ns * self.launches

    def signature(self) -> str:
        """'grid 1024 block 256 smem 0 | #3=1048576 #4=2.0' (scalars as the app passed them)."""
        text = f"grid {format_dim(self.grid)} block {format_dim(self.block)} smem {self.shared_mem_bytes}"
        if not self.scalars_known:
            return text + " | args unknown (seen only in a CUDA graph's records)"
        args = " ".join(f"#{s['index']}={scalar_text(s)}" for s in self.scalars)
        return text + (f" | {args}" if args else "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_native(cls, d: dict[str, Any], demangled: str = "") -> "Bucket":
        """One entry of the interposer's bucket table (launch_buckets.cpp)."""
        try:
            return cls(
                kernel=str(d["kernel"]), demangled=demangled or str(d.get("demangled") or ""),
                grid=list(d["grid"]), block=list(d["block"]), shared_mem_bytes=int(d["shared_mem_bytes"]),
                scalars=list(d.get("scalars") or []), scalars_known=bool(d.get("scalars_known", True)),
                launches=int(d.get("launches") or 0), timed=int(d.get("timed") or 0),
                total_ns=int(d.get("total_ns") or 0), min_ns=int(d.get("min_ns") or 0),
                max_ns=int(d.get("max_ns") or 0),
                first_dispatch=_opt(d.get("first_dispatch")), captured_dispatch=_opt(d.get("captured_dispatch")),
                capture_dir=d.get("capture_dir"), refused=d.get("refused"), failed=bool(d.get("failed")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise KerncapError(f"a bucket table entry is malformed ({type(exc).__name__}: {exc})",
                               "the capture library and this kerncap may come from different builds; reinstall") from None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Bucket":
        """A bucket as to_dict wrote it (set.json, a saved profile: checked against
        reproducer.schemas.BUCKET first)."""
        return cls(**{"demangled": "", "scalars": [],
                      **{k: v for k, v in d.items() if k in cls.__dataclass_fields__}})


def _opt(v: Any) -> int | None:
    return None if v is None or (isinstance(v, int) and v < 0) else int(v)


def scalar_text(s: dict[str, Any]) -> str:
    """A scalar argument for people: an integer when it reads as a modest one, else a
    float when it reads as a finite one, else its hex bytes."""
    hx = str(s.get("hex", ""))
    if hx.startswith("xxh64:"):
        return f"<{s.get('size')}-byte struct {hx[6:14]}>"
    try:
        raw = bytes.fromhex(hx)
    except ValueError:
        return hx
    if len(raw) in (1, 2, 4, 8):
        as_int = int.from_bytes(raw, "little", signed=True)
        if abs(as_int) < 1 << 24:
            return str(as_int)
        if len(raw) in (4, 8):
            f = struct.unpack("<f" if len(raw) == 4 else "<d", raw)[0]
            if math.isfinite(f) and f != 0 and 1e-6 < abs(f) < 1e9:
                return f"{f:g}"
    return "0x" + raw[::-1].hex()


def merge(tables: Iterable[list[Bucket]]) -> list[Bucket]:
    """Buckets of several processes, merged by signature; most in-app time first."""
    out: dict[tuple, Bucket] = {}
    for table in tables:
        for b in table:
            m = out.get(b.key)
            if m is None:
                out[b.key] = Bucket.from_dict(asdict(b))
                continue
            if b.timed:
                m.min_ns = min(m.min_ns, b.min_ns) if m.timed else b.min_ns
            m.launches += b.launches
            m.timed += b.timed
            m.total_ns += b.total_ns
            m.max_ns = max(m.max_ns, b.max_ns)
    return sorted(out.values(), key=lambda b: (-b.time_ns, -b.launches, b.signature()))


def time_shares(buckets: Sequence[Bucket]) -> list[float]:
    """Each bucket's share of the in-app time of all of them (sums to 1); by launch
    counts when no bucket was timed."""
    times = [b.time_ns for b in buckets]
    total = sum(times)
    if total <= 0:
        counts = [b.launches for b in buckets]
        total = sum(counts)
        return [c / total if total else 1.0 / len(buckets) for c in counts] if buckets else []
    return [t / total for t in times]


@dataclass
class WorkloadSpeedup:
    """A variant's speedup on the workload: each member's baseline time in the app,
    scaled by the variant's ratio on that member (Amdahl over the set's buckets)."""

    weighted: float                      # 1 / sum(w_i * t_variant_i / t_baseline_i)
    worst_member: int                    # index of the member with the lowest speedup
    speedups: list[float] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)


def weighted_speedup(weights: Sequence[float], speedups: Sequence[float]) -> WorkloadSpeedup:
    if not speedups or len(weights) != len(speedups):
        raise KerncapError("weighted speedup needs one weight per member", "this is a kerncap bug")
    if any(s <= 0 for s in speedups):
        raise KerncapError("a member's speedup is not positive", "time every member before weighting")
    total = sum(weights)
    w = [x / total for x in weights] if total > 0 else [1.0 / len(weights)] * len(weights)
    fraction = sum(wi / si for wi, si in zip(w, speedups))
    worst = min(range(len(speedups)), key=lambda i: speedups[i])
    return WorkloadSpeedup(weighted=1.0 / fraction, worst_member=worst, speedups=list(speedups), weights=w)
