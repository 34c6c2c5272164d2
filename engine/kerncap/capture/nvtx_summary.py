"""`kerncap profile --by-nvtx`: GPU time per (NVTX range path, kernel), like Nsight
Systems' NVTX kernel summary. The interposer attributes each kernel's activity record to
the NVTX path open at its launch (launch_attribution.cpp); this merges the per-process
tables and ranks them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from kerncap.errors import KerncapError
from kerncap.capture.selection import closest

NO_RANGE = "(no range)"


@dataclass
class RangeKernel:
    path: str  # "forward.S1024/layer.5"; "" outside every range
    kernel: str  # mangled
    demangled: str
    calls: int
    total_ns: int
    min_ns: int
    max_ns: int
    percent: float = 0.0  # of all the GPU time in the table

    @property
    def avg_ns(self) -> float:
        return self.total_ns / self.calls if self.calls else 0.0

    @property
    def path_text(self) -> str:
        return self.path or NO_RANGE

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def merge(reports: Sequence[dict], demangled: dict[str, str]) -> list[RangeKernel]:
    """The "nvtx_ranges" tables of several profile-<pid>.json, merged and ranked."""
    rows: dict[tuple[str, str], RangeKernel] = {}
    for report in reports:
        for r in report.get("nvtx_ranges") or []:
            try:
                key = (str(r["path"]), str(r["kernel"]))
                calls, total = int(r["calls"]), int(r["total_ns"])
                lo, hi = int(r["min_ns"]), int(r["max_ns"])
            except (KeyError, TypeError, ValueError) as exc:
                raise KerncapError(f"profile-{report.get('pid', '?')}.json has a malformed NVTX row "
                                   f"({type(exc).__name__}: {exc})", "reinstall kerncap") from None
            m = rows.get(key)
            if m is None:
                rows[key] = RangeKernel(key[0], key[1], demangled.get(key[1], ""), calls, total, lo, hi)
                continue
            m.calls += calls
            m.total_ns += total
            m.min_ns = min(m.min_ns, lo)
            m.max_ns = max(m.max_ns, hi)
    grand = sum(r.total_ns for r in rows.values())
    for r in rows.values():
        r.percent = 100.0 * r.total_ns / grand if grand else 0.0
    return sorted(rows.values(), key=lambda r: (-r.total_ns, r.path, r.kernel))


def unmatched_error(pattern: str, match: str, reports: Sequence[dict]) -> KerncapError:
    """`profile --nvtx` kept no kernel: list the range names and paths seen, closest first."""
    sections = [r["nvtx"] for r in reports if isinstance(r.get("nvtx"), dict)]
    names = sorted({n for s in sections for n in (s.get("names") or []) + (s.get("paths") or [])})
    if not names:
        return KerncapError(f"--nvtx {pattern!r}: kerncap saw no NVTX range at all in the app",
                            "does the app annotate with NVTX (torch.cuda.nvtx, nvtx3)? Ranges opened before the "
                            "process's first CUDA call are not seen")
    listing = "\n".join(f"    {n}" for n in closest(pattern, names))
    return KerncapError(f"--nvtx {pattern!r} ({match}) matched no range any kernel ran in; the range names and "
                        f"paths seen, closest first:\n{listing}",
                        "a path is the open start/end ranges then the thread's push/pop ranges, joined with '/'")
