"""Perturbed inputs for differential validation (docs/replay.md, "Perturbed inputs").

A variant that is byte-exact on the one captured input may rely on a property of that
input (two buffers that happen to be equal, no negative values, mostly zeros). So the
captured kernel and the variant also run on K modified pre-states, and the variant's
outputs must match the captured kernel's outputs on the same modified state.

What is modified: spans of captured memory whose element type is known
(kerncap.replay.region_types) and numeric: floating-point data. Integer spans (indices,
offsets, expert ids), pointer tables, spans of unknown type, spans that hold device
addresses of captured regions and regions named in --keep stay as captured; the plan
says which and why. Each span is redrawn independently, matched to what the capture
holds there (statistics of up to SAMPLE_CHUNKS chunks of its pre-state):

  k = 0, 2, … (reported as perturbation 1, 3, …), "like the capture": N(mean, std)
      clipped to the captured [min, max], with the captured fraction of exact zeros;
  k = 1, 3, … (perturbation 2, 4, …), "widened": N(0, rms) clipped to
      ±max(|min|, |max|, 3·rms), no forced zeros: signs and sparsity the capture
      happened to have are broken.

The values are drawn on the GPU by perturb_kernels.cu from a counter-based hash, so a
span of any size costs one kernel; `reference_fill` computes the very same values with
numpy (the GPU test checks that they agree bit for bit).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kerncap.reproducer.format import Capture
from kerncap.errors import UsageError
from kerncap.core import dtypes as dt
from kerncap.core.units import human_bytes
from kerncap.replay.region_types import TypedSpan, typed_spans

MAX_PERTURBATIONS = 1000
SAMPLE_CHUNKS = 4  # chunks of a span's pre-state read for its statistics (4 MiB each)
# A span is taken to hold addresses when this many 8-byte words point into captured regions.
ADDRESS_WORDS = 4
MODES = ("like the capture", "widened")


@dataclass(frozen=True)
class Stats:
    """Of the finite values in a sample of a span's captured pre-state."""

    count: int  # values sampled
    finite: int
    mean: float
    std: float
    lo: float
    hi: float
    zero_fraction: float
    sampled_bytes: int

    def text(self) -> str:
        if not self.finite:
            return "no finite values"
        return (f"mean {self.mean:.3g}, std {self.std:.3g}, range [{self.lo:.3g}, {self.hi:.3g}], "
                f"{self.zero_fraction * 100:.0f}% zeros")


@dataclass(frozen=True)
class SpanPlan:
    span: TypedSpan
    perturbed: bool
    reason: str  # why it is (or is not) perturbed
    stats: Stats | None = None

    def describe(self) -> str:
        s = self.span
        what = f"region {s.region} +{s.offset:#x} ({human_bytes(s.length, trim=True)}"
        what += f" {s.dtype})" if s.dtype else ")"
        return f"{what}: {s.source}; {self.reason}"


@dataclass
class PerturbPlan:
    spans: list[SpanPlan]
    untyped: list[str]  # regions no typed span reaches, as report lines
    notes: list[str] = field(default_factory=list)

    @property
    def perturbed(self) -> list[SpanPlan]:
        return [p for p in self.spans if p.perturbed]

    @property
    def kept(self) -> list[SpanPlan]:
        return [p for p in self.spans if not p.perturbed]

    def fills(self, seed: int, k: int) -> list[dict[str, Any]]:
        """The fill requests of perturbation k (JSON for the replay server)."""
        return [fill_params(p, seed, k) for p in self.perturbed]

    def report_lines(self) -> list[str]:
        lines = [f"perturbed: {p.describe()}" for p in self.perturbed]
        lines += [f"not perturbed: {p.describe()}" for p in self.kept]
        lines += [f"not perturbed: {u}" for u in self.untyped]
        return lines

    def to_dict(self) -> dict[str, Any]:
        def one(p: SpanPlan) -> dict[str, Any]:
            s = p.span
            return {"region": s.region, "offset": s.offset, "length": s.length, "dtype": s.dtype, "role": s.role,
                    "source": s.source, "perturbed": p.perturbed, "reason": p.reason,
                    "stats": None if p.stats is None else p.stats.__dict__}

        return {"spans": [one(p) for p in self.spans], "untyped": list(self.untyped), "notes": list(self.notes)}


def check_count(k: int) -> int:
    if k < 1 or k > MAX_PERTURBATIONS:
        raise UsageError(f"--perturb {k}: the number of perturbed inputs must be between 1 and {MAX_PERTURBATIONS}",
                           "e.g. --perturb 8 (each perturbation replays the captured kernel and the variant)")
    return k


def plan(capture: Capture, keep: list[int] | tuple[int, ...] = (), region_dtypes: dict[int, str] | None = None,
         reproducer_dir: Path | None = None) -> PerturbPlan:
    """Which spans of `capture` perturbed validation redraws, which it keeps and why."""
    by_id = {r.id: r for r in capture.regions}
    for rid in keep:
        if rid not in by_id:
            ids = sorted(by_id)
            raise UsageError(
                f"--keep {rid}: the capture has no region {rid}",
                f"its regions are {', '.join(map(str, ids[:20]))}{' …' if len(ids) > 20 else ''}; "
                "see `kerncap info DIR` or the perturbation report",
            )
    root = reproducer_dir if reproducer_dir is not None else capture.reproducer_dir
    spans, notes = typed_spans(capture, root, region_dtypes)
    bounds = _region_bounds(capture)
    plans = []
    for s in spans:
        plans.append(_decide(capture, s, set(keep), bounds))
    reached = {s.region for s in spans}
    untyped = [f"region {r.id} ({human_bytes(r.size, trim=True)}): no argument of known type points into it"
               for r in capture.regions if r.id not in reached and r.size > 0]
    return PerturbPlan(plans, untyped, notes)


def _decide(capture: Capture, s: TypedSpan, keep: set[int], bounds) -> SpanPlan:
    if s.region in keep:
        return SpanPlan(s, False, "kept (--keep)")
    if s.role == "pointers":
        return SpanPlan(s, False, "holds pointers: kept")
    if s.role == "integer" and not s.explicit:
        return SpanPlan(s, False, "integer elements (indices, offsets or ids?): kept; "
                                  f"--region-dtype {s.region}={s.dtype or 'int32'} perturbs them")
    if s.dtype is None:
        return SpanPlan(s, False, f"element type unknown: kept; --region-dtype {s.region}=T perturbs it")
    if s.offset % dt.itemsize(s.dtype):
        return SpanPlan(s, False, f"not aligned for {s.dtype}: kept")
    sample = _sample(capture, s)
    if _holds_addresses(sample, s, bounds):
        return SpanPlan(s, False, "holds device addresses of captured regions: kept")
    stats = compute_stats(sample, s.dtype)
    return SpanPlan(s, True, stats.text(), stats)


def _sample(capture: Capture, s: TypedSpan) -> bytes:
    """Up to SAMPLE_CHUNKS chunks of the span's pre-state, evenly spread, cut to whole
    elements of the span (verified reads)."""
    region = next(r for r in capture.regions if r.id == s.region)
    cs = capture.chunk_size
    first, last = s.offset // cs, (s.end - 1) // cs
    count = last - first + 1
    picks = sorted({first + round(i * (count - 1) / max(1, SAMPLE_CHUNKS - 1)) for i in range(min(SAMPLE_CHUNKS, count))})
    out = bytearray()
    size = dt.itemsize(s.dtype) if s.dtype else 1
    for c in picks:
        raw = capture.read_chunk(region.pre[c], capture.chunk_length(region.size, c))
        lo = max(s.offset - c * cs, 0)
        hi = min(s.end - c * cs, len(raw))
        lo += (-(c * cs + lo - s.offset)) % size  # start on an element boundary of the span
        piece = raw[lo:hi]
        out += piece[: len(piece) - len(piece) % size]
    return bytes(out)


def _region_bounds(capture: Capture):
    import numpy as np

    regions = sorted((r.base, r.end) for r in capture.regions)
    return np.array([b for b, _ in regions], dtype=np.uint64), np.array([e for _, e in regions], dtype=np.uint64)


def _holds_addresses(sample: bytes, s: TypedSpan, bounds) -> bool:
    import numpy as np

    bases, ends = bounds
    skip = (-s.offset) % 8
    words = np.frombuffer(sample[skip : skip + (len(sample) - skip) // 8 * 8], dtype=np.uint64)
    if not len(words) or not len(bases):
        return False
    i = np.searchsorted(bases, words, side="right") - 1
    inside = (i >= 0) & (words < ends[np.clip(i, 0, None)])
    return int(inside.sum()) >= max(ADDRESS_WORDS, len(words) // 1000)


def decode(raw: bytes, dtype: str):
    """Elements of `raw` as float64 (numpy)."""
    import numpy as np

    if dtype == "bfloat16":
        u = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64)
    return np.frombuffer(raw, dtype=dt.numpy_type(dtype)).astype(np.float64)


def compute_stats(sample: bytes, dtype: str) -> Stats:
    import numpy as np

    x = decode(sample, dtype)
    finite = x[np.isfinite(x)]
    if not len(finite):
        return Stats(len(x), 0, 0.0, 0.0, 0.0, 0.0, 0.0, len(sample))
    return Stats(len(x), len(finite), float(finite.mean()), float(finite.std()), float(finite.min()),
                 float(finite.max()), float((x == 0).mean()), len(sample))


# -- draws ------------------------------------------------------------------------------------


def span_seed(seed: int, k: int, s: TypedSpan) -> int:
    """Each span of each perturbation gets its own stream: equal buffers become unequal."""
    h = hashlib.blake2b(f"{seed}:{k}:{s.region}:{s.offset}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little")


def draw_params(stats: Stats, dtype: str, k: int) -> dict[str, float]:
    """mean, stddev, lo, hi, p_zero of perturbation k's draw for a span with `stats`."""
    if not stats.finite:
        mean, std, lo, hi, zeros = 0.0, 1.0, -1.0, 1.0, 0.0
    else:
        mean, std, lo, hi, zeros = stats.mean, stats.std, stats.lo, stats.hi, stats.zero_fraction
    if hi <= lo or std == 0.0:  # a constant in the capture: spread around it
        scale = max(abs(mean), 1.0)
        lo, hi, std = mean - scale, mean + scale, scale / 2
        zeros = 0.0
    if k % 2 == 1:  # widened
        rms = math.sqrt(mean * mean + std * std) or 1.0
        bound = max(abs(lo), abs(hi), 3 * rms)
        mean, std, lo, hi, zeros = 0.0, rms, -bound, bound, 0.0
    tmin, tmax = dt.value_range(dtype)
    if not dt.is_float(dtype):
        lo, hi = float(max(math.ceil(lo), tmin)), float(min(math.floor(hi), tmax))
        if hi < lo:
            lo = hi = float(min(max(round(mean), tmin), tmax))
    else:
        lo, hi = max(lo, tmin), min(hi, tmax)
    return {"mean": mean, "stddev": std, "lo": lo, "hi": hi, "p_zero": zeros}


def fill_params(p: SpanPlan, seed: int, k: int) -> dict[str, Any]:
    s = p.span
    return {"region": s.region, "offset": s.offset, "count": s.length // dt.itemsize(s.dtype), "dtype": s.dtype,
            "seed": span_seed(seed, k, s), "mode": MODES[k % 2], **draw_params(p.stats, s.dtype, k)}


_M64 = (1 << 64) - 1


def reference_fill(count: int, dtype: str, seed: int, mean: float, stddev: float, lo: float, hi: float,
                   p_zero: float, **_ignored) -> bytes:
    """The bytes perturb_kernels.cu writes for these parameters, computed with numpy."""
    import numpy as np

    i = np.arange(count, dtype=np.uint64)

    def mix(z):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))

    def uniform(j: int):
        h = mix(np.uint64(seed & _M64) ^ mix(i * np.uint64(8) + np.uint64(j)))
        return (h >> np.uint64(11)).astype(np.float64) * 2.0 ** -53

    with np.errstate(over="ignore"):
        u = [uniform(j) for j in range(5)]
    z = (((u[0] + u[1]) + (u[2] + u[3])) - 2.0) * 1.7320508075688772
    v = np.minimum(np.maximum(mean + stddev * z, lo), hi)
    v = np.where(u[4] < p_zero, 0.0, v)
    if dtype == "float64":
        return v.astype(np.float64).tobytes()
    f = v.astype(np.float32)
    if dtype == "float32":
        return f.tobytes()
    if dtype == "float16":
        return f.astype(np.float16).tobytes()
    if dtype == "bfloat16":
        bits = f.view(np.uint32)
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
        return rounded.astype(np.uint16).tobytes()
    ints = np.rint(v)
    return ints.astype(dt.numpy_type(dtype)).tobytes()
