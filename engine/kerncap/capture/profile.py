"""`kerncap profile`: run the app once and rank its kernels by total GPU time.

The capture library aggregates per kernel inside each process and writes
`profile-<pid>.json` at exit; here the per-process tables are merged, ranked and saved.
By default ("exact" timing) CUPTI's activity record of every launch is read, at CUPTI's
cost (~20 % per launch on a PyTorch loop, docs/facts.md §28). `sampled` (--sampled)
counts every launch exactly through the interposed driver entry points and times a
sample of each kernel's launches with CUDA events on its own stream: each total is an
estimate with a 90 % interval and the number of launches timed (docs/interposer.md,
"Sampled profile"); it is opt-in until it ranks the suite's autotuned apps like exact
timing does (docs/facts.md §31). With --nvtx only launches inside matching NVTX ranges
count; --by-nvtx adds time per (range path, kernel) and --buckets time per launch
signature (docs/selection.md); those three need CUPTI's records and imply exact timing.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from kerncap import __version__
from kerncap.capture import nvtx_summary
from kerncap.capture.run import (
    AppOutcome,
    OutputSink,
    app_environment,
    check_command,
    command_text,
    cupti_subscriber_error,
    preload_entry_points,
    read_reports,
    report_errors,
    run_app,
)
from kerncap.capture.selection import Selection, nvtx_environment
from kerncap.core.fsio import fs_error, write_atomic
from kerncap.core.native import entry_library, inject_library
from kerncap.core.schema import check
from kerncap.errors import KerncapError
from kerncap.reproducer import buckets as bucket_tables
from kerncap.reproducer.schemas import PROFILE

PROFILE_FORMAT = "kerncap-profile"
PROFILE_VERSION = 1
TIMINGS = ("sampled", "exact")
Z90 = 1.6449  # a two-sided 90 % interval of a normal estimate


@dataclass
class KernelStat:
    name: str  # mangled, as the cubin's symbol table holds it
    demangled: str
    calls: int
    total_ns: int
    avg_ns: float
    min_ns: int
    max_ns: int
    grid: list[int]
    block: list[int]
    percent: float
    # Sampled timing: launches timed, and the 90 % interval of total_ns (sampling error
    # only, docs/interposer.md). None under exact timing. min/max are the timed ones'.
    timed: int | None = None
    # Sampled timing: timed launches left out because their pair read another context's
    # GPU time slice (native/capture/sample_stats.hpp); not in `timed`.
    preempted: int | None = None
    total_lo_ns: int | None = None
    total_hi_ns: int | None = None
    graph: bool = False  # a row for a whole executable CUDA graph (sampled timing ranks graphs whole)

    @property
    def display_name(self) -> str:
        return self.demangled or self.name

    @property
    def autotune_helper(self) -> bool:
        """A kernel XLA's autotuner launches while it compiles, not the app's own work."""
        return any(h in self.name for h in XLA_AUTOTUNE_KERNELS)


# XLA's autotuner runs each candidate config of a GEMM fusion, then these check it (the
# capture library's list, native/capture/xla_autotune.cpp, opens its candidate window on
# them), and stream_executor's timer delays the stream with DelayKernel meanwhile.
XLA_AUTOTUNE_KERNELS = ("RedzoneAllocatorKernel", "redzone_checker", "xla_fp_comparison", "xla_int_comparison",
                        "RepeatBufferKernel", "DelayKernel")


@dataclass
class ProfileResult:
    kernels: list[KernelStat]
    total_ns: int
    dispatches: int
    processes: int
    command: list[str] = field(default_factory=list)
    created: str = ""
    wall_seconds: float = 0.0
    exit_status: int | None = 0
    dropped_records: int = 0
    warnings: list[str] = field(default_factory=list)
    kerncap_version: str = __version__
    # Every reporting process detached CUPTI (cuptiFinalize) at exit; None: unknown
    # (a process that never reached its exit handler, or an older capture library).
    cupti_finalized: bool | None = None
    nvtx: dict[str, str] | None = None          # --nvtx: {"pattern", "match"}
    nvtx_ranges: list[dict] = field(default_factory=list)  # --by-nvtx: nvtx_summary.RangeKernel rows
    buckets: list[dict] = field(default_factory=list)      # --buckets: buckets.Bucket rows
    timing: str = "exact"  # "sampled" or "exact" (every process's)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {"format": PROFILE_FORMAT, "format_version": PROFILE_VERSION, **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str = "profile") -> "ProfileResult":
        if d.get("format") != PROFILE_FORMAT:
            raise KerncapError(f"{source} is not a kerncap profile", "pass a file written by `kerncap profile`")
        if not isinstance(d.get("format_version"), int) or d["format_version"] > PROFILE_VERSION:
            raise KerncapError(
                f"{source} has profile format version {d.get('format_version')}; this kerncap reads {PROFILE_VERSION}",
                "upgrade kerncap",
            )
        check(d, PROFILE, source, "profile again (`kerncap profile -- CMD`)")
        names = {f.name for f in fields(KernelStat)}
        kernels = [KernelStat(**{key: v for key, v in stat.items() if key in names}) for stat in d["kernels"]]
        totals = {k: d[k] for k in ("total_ns", "dispatches", "processes")}
        optional = ("command", "created", "wall_seconds", "exit_status", "dropped_records", "warnings", "kerncap_version",
                    "cupti_finalized", "nvtx", "nvtx_ranges", "buckets", "timing")
        return cls(kernels=kernels, **totals, **{k: d[k] for k in optional if k in d})

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically (temp file + rename in the same directory)."""
        path = Path(path)
        hint = "choose another --output or --workspace"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise fs_error(exc, f"write profile {path}", hint) from None
        try:
            write_atomic(path, json.dumps(self.to_dict(), indent=1) + "\n", what=f"write profile {path}")
        except KerncapError as exc:
            raise KerncapError(exc.message, hint) from None
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ProfileResult":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise KerncapError(f"profile {path} does not exist", "run `kerncap profile -- CMD` first") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise KerncapError(f"profile {path} cannot be read ({exc})", "profile again") from None
        if not isinstance(data, dict):
            raise KerncapError(f"{path} is not a kerncap profile", "pass a file written by `kerncap profile`")
        return cls.from_dict(data, source=str(path))


# -- merging ----------------------------------------------------------------------------


def merge_profiles(reports: Sequence[dict]) -> tuple[list[KernelStat], int]:
    """Merge per-process tables into one ranking (by total time, descending).

    Returns the kernels and the number of dropped CUPTI records. Grid and block are
    those of the process that spent the most time in the kernel. Sampled reports carry
    each total's variance (`total_var_ns2`): variances of processes add, and the merged
    total gets a 90 % interval from it.
    """
    merged: dict[str, dict[str, Any]] = {}
    dropped = 0
    for report in reports:
        where = f"profile-{report.get('pid', '?')}.json"
        dropped += int(report.get("dropped_records") or 0)
        for k in report.get("kernels") or []:
            try:
                name = str(k["name"])
                calls, total = int(k["calls"]), int(k["total_ns"])
                lo, hi = int(k["min_ns"]), int(k["max_ns"])
                timed = None if k.get("timed") is None else int(k["timed"])
                preempted = None if timed is None else int(k.get("preempted") or 0)
                if preempted is not None and preempted < 0:
                    raise ValueError(f"preempted {preempted} < 0")
                var = float(k.get("total_var_ns2") or 0.0)
            except (KeyError, TypeError, ValueError) as exc:
                raise KerncapError(
                    f"{where} in the run directory has a malformed kernel entry ({type(exc).__name__}: {exc})",
                    "the capture library and this kerncap may come from different builds; reinstall kerncap",
                ) from None
            m = merged.get(name)
            if m is None:
                merged[name] = {
                    "demangled": k.get("demangled") or "", "calls": calls, "total_ns": total,
                    "min_ns": lo if timed is None or timed else None, "max_ns": hi,
                    "grid": list(k.get("grid") or [0, 0, 0]), "block": list(k.get("block") or [0, 0, 0]),
                    "best_total": total, "timed": timed, "preempted": preempted, "var": var,
                    "graph": bool(k.get("graph")),
                }
                continue
            m["calls"] += calls
            m["total_ns"] += total
            if timed is None or timed:
                m["min_ns"] = lo if m["min_ns"] is None else min(m["min_ns"], lo)
            m["max_ns"] = max(m["max_ns"], hi)
            if timed is not None:
                m["timed"] = (m["timed"] or 0) + timed
                m["preempted"] = (m["preempted"] or 0) + (preempted or 0)
                m["var"] += var
            m["demangled"] = m["demangled"] or k.get("demangled") or ""
            if total > m["best_total"]:
                m["best_total"] = total
                m["grid"] = list(k.get("grid") or m["grid"])
                m["block"] = list(k.get("block") or m["block"])
    grand = sum(m["total_ns"] for m in merged.values())
    kernels = []
    for name, m in merged.items():
        half = Z90 * math.sqrt(m["var"]) if m["timed"] is not None else None
        kernels.append(KernelStat(
            name=name, demangled=m["demangled"], calls=m["calls"], total_ns=m["total_ns"],
            avg_ns=m["total_ns"] / m["calls"] if m["calls"] else 0.0, min_ns=m["min_ns"] or 0, max_ns=m["max_ns"],
            grid=m["grid"], block=m["block"], percent=100.0 * m["total_ns"] / grand if grand else 0.0,
            timed=m["timed"], preempted=m["preempted"], graph=m["graph"],
            total_lo_ns=None if half is None else max(0, round(m["total_ns"] - half)),
            total_hi_ns=None if half is None else round(m["total_ns"] + half),
        ))
    kernels.sort(key=lambda s: (-s.total_ns, s.name))
    return kernels, dropped


# -- running ------------------------------------------------------------------------------


def run_profile(
    command: Sequence[str],
    *,
    cwd: str | os.PathLike | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    run_dir: str | os.PathLike | None = None,
    output: OutputSink | None = None,
    nvtx: str | None = None,
    nvtx_match: str = "substring",
    by_nvtx: bool = False,
    buckets: bool = False,
    sampled: bool = False,
) -> ProfileResult:
    """Run `command` once under the capture library in profile mode and rank its kernels.

    `env` adds to (or overrides) the current environment. `run_dir` keeps the
    per-process reports there; by default a temporary directory is used and removed.
    `nvtx`: only launches inside matching NVTX ranges count; `by_nvtx`: time per
    (range path, kernel); `buckets`: time per launch signature of each kernel. `sampled`:
    count every launch and time a sample instead of CUPTI's record of every launch (not
    with the three before, nor where libkerncap_entry.so was not built; `result.timing`
    says which).
    """
    command = list(command)
    base_env = {**os.environ, **(env or {})}
    check_command(command, cwd=cwd, env=base_env)
    selection = Selection(nvtx=nvtx, nvtx_match=nvtx_match)
    selection.check()
    settings = selection.settings()
    if by_nvtx:
        settings["KERNCAP_PROFILE_NVTX"] = "1"
    if buckets:
        settings["KERNCAP_PROFILE_BUCKETS"] = "1"
    if nvtx is not None or by_nvtx:
        settings.update(nvtx_environment(inject_library()))
    inject_library()  # fail before anything is created if the capture library is missing
    sampled = sampled and not (nvtx is not None or by_nvtx or buckets) and entry_library() is not None
    settings["KERNCAP_PROFILE_TIMING"] = "sampled" if sampled else "exact"
    if sampled:
        settings["LD_PRELOAD"] = preload_entry_points(base_env.get("LD_PRELOAD"))
    own_dir = run_dir is None
    rdir = Path(tempfile.mkdtemp(prefix="kerncap-profile-")) if own_dir else Path(run_dir)
    try:
        rdir.mkdir(parents=True, exist_ok=True)
        app_env = app_environment(command, mode="profile", run_dir=rdir, settings=settings, env=env)
        created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        # On timeout: SIGINT first, so a Python app unwinds and its atexit handlers
        # (where the capture library writes the profile) still run.
        outcome = run_app(
            command, env=app_env, cwd=cwd, timeout=timeout, output=output,
            timeout_signals=(signal.SIGINT, signal.SIGTERM),
        )
        profiles = read_reports(rdir, "profile")
        procs = read_reports(rdir, "proc")
        result = _build_result(command, created, outcome, profiles, procs, timeout, selection)
        _add_tables(result, profiles, by_nvtx, buckets)
        return result
    finally:
        if own_dir:
            shutil.rmtree(rdir, ignore_errors=True)


def _add_tables(result: ProfileResult, profiles: list[dict], by_nvtx: bool, buckets: bool) -> None:
    demangled = {k.name: k.demangled for k in result.kernels}
    if by_nvtx:
        result.nvtx_ranges = [r.to_dict() for r in nvtx_summary.merge(profiles, demangled)]
    if buckets:
        tables = [[bucket_tables.Bucket.from_native(b, demangled.get(str(b.get("kernel")), ""))
                   for b in p.get("buckets") or []] for p in profiles]
        result.buckets = [b.to_dict() for b in bucket_tables.merge(tables)]


# Why a launch the sampler chose has no time: the sampler's counters (launch_sampler.cpp).
_LOSSES = (("overdue", "held over 5 ms"), ("unfinished", "unfinished at exit"), ("no_event", "no free hold word"),
           ("interleaved", "another thread launched inside the pair"), ("failed_launches", "the launch failed"),
           ("errors", "timing errors"))


def _lost_samples(profiles: list[dict]) -> str:
    """`; chosen but left out: 2 held over 5 ms, ...` (every process's counts), or ''."""
    counts = {key: sum(int((p.get("sampling") or {}).get(key) or 0) for p in profiles) for key, _ in _LOSSES}
    lost = [f"{counts[key]} {why}" for key, why in _LOSSES if counts[key]]
    return f"; timed launches left out: {', '.join(lost)}" if lost else ""


def sampling_warnings(kernels: list[KernelStat], profiles: list[dict], procs: list[dict]) -> list[str]:
    """What a user must know about sampled times: a process that fell back to exact timing,
    a sampler that failed, kernels launched but never timed, overlapping streams, graphs."""
    out = []
    for p in procs:
        timing = p.get("profile_timing") or {}
        if timing.get("requested") == "sampled" and timing.get("used") == "exact":
            out.append(f"process {p.get('pid')}: timed every launch through CUPTI ({timing.get('why', '')})")
    for prof in profiles:
        s = prof.get("sampling") or {}
        if s.get("errors"):
            out.append(f"process {prof.get('pid')}: {s['errors']} timing error(s), launches there were counted but "
                       f"not all timed (first: {s.get('first_error', '')}); without --sampled every launch is timed through CUPTI")
        if s.get("unheld"):
            out.append(f"process {prof.get('pid')}: launches were timed without holding their stream ({s['unheld']}): "
                       "a launch on an idle stream then reads long by the CPU's launch latency; without --sampled CUPTI times them")
        calibration = str(s.get("calibration") or "")
        if calibration.startswith("failed") or calibration.startswith("empty pair"):
            out.append(f"process {prof.get('pid')}: the timed pairs' calibration {calibration}; short kernels may "
                       "read long by what a pair adds on the GPU (~1 us); without --sampled CUPTI times them")
        if int(s.get("streams") or 0) > 1:
            out.append(f"process {prof.get('pid')}: kernels were timed on {s['streams']} streams of one context; a "
                       "timed launch that overlapped another stream's kernels includes time spent waiting for the "
                       "GPU, so concurrent kernels may read long (docs/interposer.md); without --sampled CUPTI times them apart")
        if int(s.get("shared_streams") or 0):
            out.append(f"process {prof.get('pid')}: {s['shared_streams']} stream(s) had timed launches from several "
                       f"threads; {int(s.get('interleaved') or 0)} timed launch(es) there were left out because another "
                       "thread launched while their pair was open (its launch may have run inside it); without "
                       "--sampled CUPTI times every launch apart")
        lost = int(s.get("overdue") or 0) + int(s.get("unfinished") or 0)
        timed = sum(int(k.get("timed") or 0) for k in prof.get("kernels") or [])
        if lost > 0.01 * (timed + lost):  # a few (a thread preempted while it held its stream) change nothing
            out.append(f"process {prof.get('pid')}: {lost} of {timed + lost} timed launches could not be read "
                       "(held over 5 ms, or unfinished at exit) and were left out")
    preempted = [k for k in kernels if k.preempted]
    if preempted:
        names = ", ".join(k.display_name for k in sorted(preempted, key=lambda k: -(k.preempted or 0))[:3])
        out.append(f"{sum(k.preempted or 0 for k in preempted)} timed launch(es) of {len(preempted)} kernel(s) "
                   f"({names}) were left out: each read at least 1 ms more than its kernel's other samples, and 4x "
                   "their mean, as when the GPU runs another process's work inside the pair; those totals come from "
                   "the other samples (docs/interposer.md); without --sampled CUPTI times every launch")
    untimed = [k for k in kernels if k.timed == 0]
    if untimed:
        names = ", ".join(k.display_name for k in sorted(untimed, key=lambda k: -k.calls)[:3])
        out.append(f"{len(untimed)} kernel(s) ran but none of their launches was timed: {names}; their time is unknown "
                   f"and shown as 0{_lost_samples(profiles)} (without --sampled CUPTI times every launch)")
    if any(k.graph for k in kernels):
        out.append("CUDA graphs are timed as a whole (one row per executable graph); without --sampled their time "
                   "is split by kernel")
    return out


def _build_result(
    command: list[str], created: str, outcome: AppOutcome, profiles: list[dict], procs: list[dict],
    timeout: float | None, selection=None,
) -> ProfileResult:
    kernels, dropped = merge_profiles(profiles)
    warnings: list[str] = []
    cmd = command_text(command)
    subscriber = report_errors(procs, "cupti_subscriber")
    nvtx = None if selection is None or selection.nvtx is None else {"pattern": selection.nvtx,
                                                                      "match": selection.nvtx_match}

    if not kernels:
        if nvtx and profiles:
            raise nvtx_summary.unmatched_error(nvtx["pattern"], nvtx["match"], profiles)
        if subscriber:
            raise cupti_subscriber_error(subscriber, "no kernel could be profiled")
        if outcome.timed_out:
            raise KerncapError(
                f"`{cmd}` did not finish within {timeout:g} s and was stopped before any profile was written",
                "the capture library writes the profile when each process exits; raise --timeout or shorten the run",
            )
        if outcome.failed:
            raise KerncapError(
                f"`{cmd}` {outcome.describe_exit()} and no profile was written; its stderr ended with:\n"
                + outcome.stderr_excerpt(),
                "fix the app so it runs to completion without kerncap first",
            )
        if not procs:
            raise KerncapError(
                f"no process of `{cmd}` loaded the capture library (no proc-*.json was written)",
                "does the app use CUDA? The driver loads the library only in processes that initialise CUDA "
                "(check CUDA_VISIBLE_DEVICES and that the app really runs on the GPU)",
            )
        raise KerncapError(f"`{cmd}` launched no CUDA kernels", "check that the app does GPU work in this run")

    for pid, error in subscriber:
        warnings.append(f"process {pid}: {error.get('message', 'another CUPTI subscriber')}; its kernels are missing")
    if outcome.timed_out:
        warnings.append(f"the app was stopped after --timeout {timeout:g} s; the profile covers what ran until then")
    elif outcome.failed:
        warnings.append(f"the app {outcome.describe_exit()}; the profile covers what ran until then")
    if dropped:
        warnings.append(f"{dropped} CUPTI activity records were dropped; totals are lower bounds")
    finalize = [p.get("cupti_finalize") for p in procs if p.get("cupti_finalize") != "not used"]
    for p in procs:
        result = p.get("cupti_finalize")
        if result not in (None, "ok", "unsubscribed", "not used"):
            warnings.append(f"process {p.get('pid')}: CUPTI was not detached at exit ({result})")
    warnings += sampling_warnings(kernels, profiles, procs)
    reporting = {int(p.get("pid", 0)) for p in profiles}
    timings = {p.get("timing", "exact") for p in profiles}
    return ProfileResult(
        timing="sampled" if timings == {"sampled"} else "exact",
        cupti_finalized=all(r == "ok" for r in finalize) if finalize and None not in finalize else None,
        nvtx=nvtx,
        kernels=kernels,
        total_ns=sum(k.total_ns for k in kernels),
        dispatches=sum(k.calls for k in kernels),
        processes=len(reporting),
        command=command,
        created=created,
        wall_seconds=round(outcome.seconds, 3),
        exit_status=outcome.returncode,
        dropped_records=dropped,
        warnings=warnings,
    )

