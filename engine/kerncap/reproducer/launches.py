"""The app's kernels as the capture run saw them, kept in the reproducer (`launches.json`).

Every process of a captured app writes `proc-<pid>.json` with its launch count per
kernel (`kernels_seen`, the 200 most launched, demangled). `kerncap extract` merges them
into a ranking by launches up to the capture, with the captured kernel marked, so the
workbench shows where the kernel sits in the app without another run. A capture run
does not time kernels (that takes CUPTI activity records, `kerncap profile`), so there
are counts and no times.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kerncap.core.fsio import write_atomic
from kerncap.core.schema import check
from kerncap.core.units import short_kernel_name
from kerncap.reproducer.format import read_json
from kerncap.reproducer.schemas import LAUNCHES_JSON

LAUNCHES_FILE = "launches.json"
LAUNCHES_FORMAT = "kerncap-launches"
MAX_LAUNCHES_BYTES = 64 << 20
NO_TIMES = "launch counts up to the capture; a capture run does not time kernels (`kerncap profile` does)"


@dataclass
class KernelLaunches:
    name: str        # demangled, as the capture library reports it
    calls: int
    captured: bool = False


@dataclass
class AppLaunches:
    kernels: list[KernelLaunches]          # most launched first
    processes: int
    launches: int                          # all kernel launches of the reporting processes
    command: list[str] = field(default_factory=list)
    note: str = NO_TIMES

    @property
    def captured(self) -> KernelLaunches | None:
        return next((k for k in self.kernels if k.captured), None)

    def to_dict(self) -> dict[str, Any]:
        return {"format": LAUNCHES_FORMAT, **asdict(self)}

    @classmethod
    def from_reports(cls, procs: list[dict], kernel_demangled: str, command: list[str]) -> "AppLaunches":
        counts: dict[str, int] = {}
        launches = 0
        for p in procs:
            launches += int(p.get("launches") or 0)
            for name, n in (p.get("kernels_seen") or {}).items():
                counts[name] = counts.get(name, 0) + int(n or 0)
        target = _captured_name(kernel_demangled, counts)
        kernels = [KernelLaunches(name, n, name == target)
                   for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
        return cls(kernels=kernels, processes=len(procs), launches=launches or sum(counts.values()),
                   command=list(command))

    def save(self, directory: Path) -> Path:
        path = Path(directory) / LAUNCHES_FILE
        write_atomic(path, json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, reproducer: str | Path) -> "AppLaunches | None":
        """The reproducer's launches.json (checked against its schema); None when it has none."""
        path = Path(reproducer) / LAUNCHES_FILE
        if not path.exists() and not path.is_symlink():
            return None
        hint = "extract again to record the app's launches"
        d = read_json(path, MAX_LAUNCHES_BYTES, "", hint)
        check(d, LAUNCHES_JSON, path, hint)
        return cls(kernels=[KernelLaunches(k["name"], k["calls"], k.get("captured", False)) for k in d["kernels"]], processes=d["processes"],
                   launches=d["launches"], command=list(d.get("command") or []), note=d.get("note") or NO_TIMES)


def _captured_name(demangled: str, counts: dict[str, int]) -> str | None:
    """The kernels_seen entry of the captured kernel: the same demangled name, else the one
    whose short form (no arguments) matches."""
    if demangled in counts:
        return demangled
    want = short_kernel_name(demangled, width=10**6)
    same = [n for n in counts if short_kernel_name(n, width=10**6) == want]
    return same[0] if len(same) == 1 else None
