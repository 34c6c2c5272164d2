"""Which launches count: NVTX ranges, the process (rank / pid) and the device.

`Selection` is what `extract` (and, for NVTX, `profile`) was asked for; it becomes
KERNCAP_* variables for the interposer (docs/selection.md). The interposer follows NVTX
through CUPTI's NVTX callbacks, which NVTX delivers only to the library named by
NVTX_INJECTION64_PATH: kerncap names its own capture library, which hands NVTX to the
libcupti it is bound to (in a PyTorch process that is the pip wheel's libcupti, loaded
by `import torch`, not the toolkit's).

When nothing was captured, `diagnose` turns the per-process reports into the one
message that explains what the selection excluded.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kerncap.errors import KerncapError, UsageError

NVTX_MATCH_MODES = ("substring", "regex")
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")
STOP_REQUEST = "stop-request"  # written by the interposer when the request cannot be met in this job


@dataclass(frozen=True)
class Selection:
    nvtx: str | None = None
    nvtx_match: str = "substring"
    rank: int | None = None
    pid: int | None = None
    device: int | None = None

    @property
    def empty(self) -> bool:
        return self.nvtx is None and self.rank is None and self.pid is None and self.device is None

    def check(self) -> None:
        """Refuse a malformed request before the app starts."""
        if self.nvtx is not None:
            if not self.nvtx:
                raise UsageError("--nvtx is empty", "pass a range name or a nesting path, e.g. --nvtx 'forward/layer.5'")
            if self.nvtx_match not in NVTX_MATCH_MODES:
                raise UsageError(f"unknown --nvtx-match mode {self.nvtx_match!r}",
                                   f"use one of: {', '.join(NVTX_MATCH_MODES)}")
            if self.nvtx_match == "regex":
                try:
                    re.compile(self.nvtx)
                except re.error as exc:
                    raise UsageError(f"--nvtx {self.nvtx!r} is not a valid regular expression ({exc})",
                                       "fix the pattern, or use --nvtx-match substring") from None
        for flag, value in (("--rank", self.rank), ("--pid", self.pid), ("--device", self.device)):
            if value is not None and value < 0:
                raise UsageError(f"{flag} {value} is negative", f"{flag} takes a number from 0")

    def settings(self) -> dict[str, str]:
        """The interposer's configuration (docs/capture-format.md, environment)."""
        out: dict[str, str] = {}
        if self.nvtx is not None:
            out["KERNCAP_NVTX"] = self.nvtx
            out["KERNCAP_NVTX_MATCH"] = self.nvtx_match
        for var, value in (("KERNCAP_RANK", self.rank), ("KERNCAP_PID", self.pid), ("KERNCAP_DEVICE", self.device)):
            if value is not None:
                out[var] = str(value)
        return out

    def describe(self) -> str:
        """'in NVTX ranges matching 'layer.5', rank 1, device 1' (empty without a selection)."""
        parts = []
        if self.nvtx is not None:
            parts.append(f"in NVTX ranges matching {self.nvtx!r}" + (" (regex)" if self.nvtx_match == "regex" else ""))
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        if self.pid is not None:
            parts.append(f"process {self.pid}")
        if self.device is not None:
            parts.append(f"device {self.device}")
        return ", ".join(parts)


def nvtx_environment(inject_library: Path) -> dict[str, str]:
    """NVTX_INJECTION64_PATH for an app whose NVTX ranges kerncap must see (see above)."""
    return {"NVTX_INJECTION64_PATH": str(inject_library)}


def stop_requested(run_dir: Path) -> bool:
    return (Path(run_dir) / STOP_REQUEST).is_file()


def closest(pattern: str, names: Sequence[str], n: int = 8) -> list[str]:
    """The `n` names most like `pattern`: those containing it first, then by similarity
    to the whole name or to any of its '/'-separated parts."""
    p = pattern.lower()

    def score(name: str) -> float:
        low = name.lower()
        parts = {low, *low.split("/")}
        whole = difflib.SequenceMatcher(None, p, low).ratio()  # ties: the closer whole name first
        return max(difflib.SequenceMatcher(None, p, s).ratio() for s in parts) + (1.0 if p in low else 0.0) + 0.1 * whole

    return sorted(set(names), key=lambda s: (-score(s), s))[:n]


# -- saying why nothing was selected ---------------------------------------------------------


def _errors(procs: list[dict], kind: str) -> list[tuple[int, str]]:
    return [(int(p.get("pid", 0)), e.get("message", "")) for p in procs for e in p.get("errors") or []
            if isinstance(e, dict) and e.get("kind") == kind]


def _nonneg(v) -> bool:
    return isinstance(v, int) and v >= 0


def _jobs(procs: list[dict]) -> list[tuple[int, dict]]:
    return [(int(p.get("pid", 0)), p["job"]) for p in procs if isinstance(p.get("job"), dict)]


def job_summary(procs: list[dict]) -> str:
    """'2 processes: pid 101 rank 0, pid 102 rank 1 (world size 2)' from the reports."""
    jobs = _jobs(procs)
    if not jobs:
        return ""
    ranks = [f"pid {pid} rank {j['rank']}" if _nonneg(j.get("rank")) else f"pid {pid} (no rank)" for pid, j in jobs]
    sizes = {j["world_size"] for _, j in jobs if _nonneg(j.get("world_size"))}
    return f"{len(jobs)} process(es): " + ", ".join(ranks) + (f" (world size {sizes.pop()})" if len(sizes) == 1 else "")


def diagnose(selection: Selection, procs: list[dict], target: str) -> KerncapError | None:
    """The error explaining that the selection, not the kernel, kept the capture from
    happening; None when the selection is not the reason."""
    if selection.empty:
        return None
    for kind in ("rank_out_of_range", "selection_conflict"):
        found = _errors(procs, kind)
        if found:
            hint = ("pick a rank below the world size" if kind == "rank_out_of_range" else
                    "give --rank or --pid alone, or a pid and rank that belong to the same process")
            return KerncapError(f"{found[0][1]}; the app was stopped", f"{hint} ({job_summary(procs) or 'no job info'})")
    if selection.rank is not None:
        jobs = _jobs(procs)
        ranks = sorted({j["rank"] for _, j in jobs if _nonneg(j.get("rank"))})
        if jobs and not ranks:
            return KerncapError(
                f"--rank {selection.rank}: no process of the job sets a rank variable ({', '.join(RANK_VARIABLES)})",
                "run the app under its launcher (torchrun, mpirun, srun), or select the process with --pid or the "
                "device with --device",
            )
        if ranks and selection.rank not in ranks:
            return KerncapError(f"--rank {selection.rank}: no process of the job has that rank "
                                f"(ranks seen: {', '.join(map(str, ranks))})",
                                f"pick one of the ranks the job has ({job_summary(procs)})")
    if selection.pid is not None and procs and all(int(p.get("pid", 0)) != selection.pid for p in procs):
        pids = sorted(int(p.get("pid", 0)) for p in procs)
        return KerncapError(f"--pid {selection.pid}: no CUDA process of the app has that pid "
                            f"(pids seen: {', '.join(map(str, pids))})",
                            "pids change on every run: select by --rank or --device instead")
    selected = [p for p in procs if (p.get("job") or {}).get("selected", True)]
    if selection.device is not None:
        seen = sorted({d for p in selected for d in (p.get("selection") or {}).get("target_devices") or []})
        off = sum(int((p.get("selection") or {}).get("off_device") or 0) for p in selected)
        if off and selection.device not in seen:
            return KerncapError(f"{target} ran {off} time(s), but never on device {selection.device} "
                                f"(it ran on device(s) {', '.join(map(str, seen))})",
                                "pass one of those devices to --device (CUDA ordinals as the app sees them)")
    if selection.nvtx is not None:
        return _diagnose_nvtx(selection, selected, target)
    return None


def _diagnose_nvtx(selection: Selection, procs: list[dict], target: str) -> KerncapError | None:
    sections = [p["nvtx"] for p in procs if isinstance(p.get("nvtx"), dict)]
    if not sections:
        return None
    inside = sum(int(s.get("target_in_range") or 0) for s in sections)
    outside = sum(int(s.get("target_outside") or 0) for s in sections)
    if inside:
        return None  # the kernel ran inside a matching range: the selection is not why
    if not any(s.get("calls_seen") for s in sections):
        return KerncapError(
            f"--nvtx {selection.nvtx!r}: kerncap saw no NVTX range at all in the app",
            "does the app annotate with NVTX (torch.cuda.nvtx, nvtx3)? Ranges opened before the process's first "
            "CUDA call are not seen; open them after CUDA is initialised",
        )
    names = sorted({n for s in sections for n in s.get("names") or []})
    paths = sorted({n for s in sections for n in s.get("paths") or []})
    candidates = closest(selection.nvtx, names + paths)
    listing = "\n".join(f"    {c}" for c in candidates)
    where = (f"{target} ran {outside} time(s), none inside a range matching it" if outside else
             f"{target} never ran inside any NVTX range kerncap saw")
    return KerncapError(
        f"--nvtx {selection.nvtx!r} ({selection.nvtx_match}) matched no range the target ran in: {where}. "
        f"The range names and paths seen, closest first:\n{listing}",
        "a launch's path is its open start/end ranges then its thread's push/pop ranges, joined with '/'; "
        "named domains show as 'domain:name'",
    )


def processes_note(procs: list[dict]) -> str:
    """A one-line account of which processes were excluded by the selection."""
    skipped = [(int(p.get("pid", 0)), p["job"].get("why_not")) for p in procs
               if isinstance(p.get("job"), dict) and not p["job"].get("selected", True)]
    if not skipped:
        return ""
    return f"{len(skipped)} process(es) not selected: " + "; ".join(f"{why}" for _, why in skipped[:4])
