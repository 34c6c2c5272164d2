"""Nsight Compute on exactly one replayed launch: `kerncap replay DIR [--cubin V] --ncu`.

A fresh replay server runs under `ncu`, filtered to the captured kernel's mangled name;
the server's `replay` request makes W warm-up launches and one timed launch, and ncu
profiles only that last one (`--launch-skip W --launch-count 1`, counted among matching
launches). Cache and clock control are off unless --flush-l2, so ncu's duration is
measured under the conditions of `kerncap replay`'s timing. The report is stored next to
the variant (variants/<stem>.ncu-rep, the key metrics in <stem>.ncu.json) and read back
with `ncu --import … --csv` (page raw for metrics, page details for rule findings).
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from kerncap.reproducer.format import Capture, reproducer_dir
from kerncap.reproducer.variants import variants_dir
from kerncap.errors import KerncapError
from kerncap.replay.tools import (
    Cancellation,
    load_result,
    save_result,
    Cancelled,
    ToolTimeout,
    ToolRun,
    artifact_stem,
    cubin_label,
    find_tool,
    log_tail,
)

NCU_FORMAT = "kerncap-ncu"
DEFAULT_SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis")
DEFAULT_TIMEOUT = 600.0
IMPORT_TIMEOUT = 120.0
PERMISSION_HINT = (
    "GPU performance counters are restricted to administrators on this machine: run as root, or have the "
    "driver loaded with NVreg_RestrictProfilingToAdminUsers=0 (see https://developer.nvidia.com/ERR_NVGPUCTRPERM)"
)


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    ncu: str    # metric name as ncu's raw page lists it
    kind: str   # time (ns) | pct | bytes | count


# The key metrics, in display order. All exist on sm_70 and later.
KEY_METRICS = (
    Metric("duration_ns", "duration", "gpu__time_duration.sum", "time"),
    Metric("sm_pct", "SM throughput", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "pct"),
    Metric("memory_pct", "memory throughput", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "pct"),
    Metric("dram_read_bytes", "DRAM read", "dram__bytes_read.sum", "bytes"),
    Metric("dram_write_bytes", "DRAM written", "dram__bytes_write.sum", "bytes"),
    Metric("occupancy_pct", "achieved occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active", "pct"),
    Metric("registers", "registers/thread", "launch__registers_per_thread", "count"),
    Metric("l1_hit_pct", "L1 hit rate", "l1tex__t_sector_hit_rate.pct", "pct"),
    Metric("l2_hit_pct", "L2 hit rate", "lts__t_sector_hit_rate.pct", "pct"),
)
METRICS_BY_KEY = {m.key: m for m in KEY_METRICS}

# Units ncu may print (base units with --print-units base; scaled ones otherwise).
_UNIT_SCALE = {
    "nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9,
    "byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
    "kibyte": 1024.0, "mibyte": 1024.0 ** 2, "gibyte": 1024.0 ** 3,
}


@dataclass
class Finding:
    """One rule result of ncu's analysis (e.g. SOLBottleneck, a memory access pattern)."""
    rule: str
    type: str            # OPT | WRN | INF | ERR
    section: str
    description: str
    speedup_pct: float | None = None
    speedup_type: str = ""


@dataclass
class NcuResult:
    kernel: str
    cubin: str | None            # the variant's path as given; None: the captured cubin
    label: str                   # for display: "captured cubin" / "variants/3.cubin"
    cubin_sha256: str
    report: str                  # the stored .ncu-rep
    metrics: dict[str, float | None]
    findings: list[Finding] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)
    ncu_set: str | None = None
    warmup: int = 3
    flush_l2: bool = False
    seconds: float = 0.0
    created: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"format": NCU_FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "NcuResult":
        d = {k: v for k, v in d.items() if k != "format"}
        d["findings"] = [Finding(**f) for f in d.get("findings", [])]
        return cls(**d)

    def top_findings(self, n: int = 5) -> list[Finding]:
        order = {"ERR": 0, "OPT": 1, "WRN": 2}
        kept = [f for f in self.findings if f.type in order]
        return sorted(kept, key=lambda f: (order[f.type], -(f.speedup_pct or 0.0)))[:n]

    def same_setup(self, sha: str, sections: Sequence[str], ncu_set: str | None, warmup: int,
                   flush_l2: bool) -> bool:
        return (self.cubin_sha256 == sha and list(self.sections) == list(sections) and self.ncu_set == ncu_set
                and self.warmup == warmup and self.flush_l2 == flush_l2 and Path(self.report).is_file())


# -- parsing ncu's CSV pages -------------------------------------------------------------


def _number(text: str) -> float | None:
    t = (text or "").strip().replace(",", "")
    if not t or t.lower() in ("n/a", "nan", "-"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def _to_base(value: float, unit: str, kind: str) -> float:
    if kind in ("time", "bytes"):
        return value * _UNIT_SCALE.get(unit.strip().lower(), 1.0)
    return value


def parse_raw_page(text: str, kernel: str | None = None) -> dict[str, float | None]:
    """The key metrics from `ncu --import R --csv --page raw`: a header row of metric
    names, a row of units, then one row per profiled launch (the one naming `kernel`,
    else the last)."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    header_at = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if header_at is None or len(rows) < header_at + 3:
        raise KerncapError("ncu's raw page lists no profiled launch",
                           "open the report with `ncu --import R --page raw` to see what it holds")
    header, units, data = rows[header_at], rows[header_at + 1], rows[header_at + 2:]
    col = {name: i for i, name in enumerate(header)}
    row = data[-1]
    if kernel is not None:
        named = [r for r in data if len(r) > col["Kernel Name"] and r[col["Kernel Name"]] == kernel]
        row = named[-1] if named else row
    out: dict[str, float | None] = {}
    for m in KEY_METRICS:
        i = col.get(m.ncu)
        value = _number(row[i]) if i is not None and i < len(row) else None
        unit = units[i] if i is not None and i < len(units) else ""
        out[m.key] = None if value is None else _to_base(value, unit, m.kind)
    return out


_LINK = re.compile(r"@\w+:[^:\s]+:([^.@]*)")


def clean_description(text: str) -> str:
    """Rule text without ncu's cross-reference markup (@section:Id:Title -> Title)."""
    return re.sub(r"\s+", " ", _LINK.sub(r"\1", text or "")).strip()


def parse_details_page(text: str) -> list[Finding]:
    """Rule results from `ncu --import R --csv --page details`: rows whose Rule Name is set."""
    findings, seen = [], set()
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if '"Kernel Name"' in line), 0)  # past any ==WARNING== lines
    for row in csv.DictReader(io.StringIO("".join(lines[start:]))):
        rule = (row.get("Rule Name") or "").strip()
        if not rule:
            continue
        f = Finding(
            rule=rule, type=(row.get("Rule Type") or "").strip(), section=(row.get("Section Name") or "").strip(),
            description=clean_description(row.get("Rule Description") or ""),
            speedup_pct=_number(row.get("Estimated Speedup") or ""),
            speedup_type=(row.get("Estimated Speedup Type") or "").strip(),
        )
        key = (f.rule, f.section, f.description)
        if key not in seen:
            seen.add(key)
            findings.append(f)
    return findings


# -- running -------------------------------------------------------------------------------


def stored_path(root: Path, cubin: str | Path | None) -> Path:
    return artifact_stem(root, cubin).with_suffix(".ncu.json")


def load_stored(reproducer: str | Path, cubin: str | Path | None) -> NcuResult | None:
    """The metrics stored by an earlier --ncu run on this cubin, or None."""
    return load_result(stored_path(reproducer_dir(reproducer), cubin), NcuResult.from_dict)


def chosen_sections(sections: Sequence[str] | None, ncu_set: str | None) -> list[str]:
    """The sections a run collects: the caller's, none beside a --set, else the defaults."""
    return list(sections if sections is not None else ([] if ncu_set else DEFAULT_SECTIONS))


def stored_or_profile(reproducer: str | Path, cubin: str | Path | None, **options: Any) -> tuple[NcuResult, bool]:
    """The stored result of an earlier run on the same cubin bytes with the same setup
    (True), else a new profile (False). `options` as for profile()."""
    stored = load_stored(reproducer, cubin)
    if stored is not None:
        target = Path(cubin) if cubin is not None else Capture.open(reproducer_dir(reproducer)).cubin_path
        try:
            sha = hashlib.sha256(target.read_bytes()).hexdigest()
        except OSError:
            sha = None
        if sha and stored.same_setup(sha, chosen_sections(options.get("sections"), options.get("ncu_set")),
                                     options.get("ncu_set"), options.get("warmup", 3), options.get("flush_l2", False)):
            return stored, True
    return profile(reproducer, cubin, **options), False


def ncu_command(ncu: Path, kernel: str, *, report_base: Path, log: Path, warmup: int, sections: Sequence[str],
                ncu_set: str | None, flush_l2: bool) -> list[str]:
    cmd = [str(ncu), "--target-processes", "all", "--kernel-name-base", "mangled", "--kernel-name", kernel,
           "--launch-skip", str(warmup), "--launch-count", "1",
           "--cache-control", "all" if flush_l2 else "none", "--clock-control", "none"]
    if ncu_set:
        cmd += ["--set", ncu_set]
    for s in sections:
        cmd += ["--section", s]
    cmd += ["--metrics", ",".join(m.ncu for m in KEY_METRICS),
            "--log-file", str(log), "--force-overwrite", "--export", str(report_base)]
    return cmd


def profile(
    reproducer: str | Path,
    cubin: str | Path | None = None,
    *,
    sections: Sequence[str] | None = None,
    ncu_set: str | None = None,
    warmup: int = 3,
    flush_l2: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    device: int = 0,
    cancel: Cancellation | None = None,
    progress: Callable[[str], None] | None = None,
) -> NcuResult:
    """Profile one replayed launch of the captured kernel (or the variant `cubin`) with
    Nsight Compute; stores the report and its key metrics next to the variant."""
    say = progress or (lambda text: None)
    t0 = time.monotonic()
    root = reproducer_dir(reproducer)
    capture = Capture.open(root)
    kernel = capture.kernel.get("name") or ""
    cubin_path = Path(cubin).resolve() if cubin is not None else capture.cubin_path
    try:
        sha = hashlib.sha256(cubin_path.read_bytes()).hexdigest()
    except OSError as exc:
        raise KerncapError(f"cannot read cubin {cubin_path}: {exc.strerror}", "check the --cubin path") from None
    if warmup < 0:
        raise KerncapError(f"--warmup must be >= 0 (got {warmup})")
    chosen = chosen_sections(sections, ncu_set)
    ncu = find_tool("ncu", "Nsight Compute")
    stem = artifact_stem(root, cubin)
    variants_dir(root, stem.parent.relative_to(root))  # never through a link out of the reproducer
    report = stem.with_suffix(".ncu-rep")
    label = cubin_label(root, cubin)

    # Written in a hidden directory beside the variant, renamed into place when complete.
    with tempfile.TemporaryDirectory(prefix=".ncu-", dir=stem.parent) as tmp:
        log = Path(tmp) / "ncu.log"
        tmp_base = Path(tmp) / "report"
        tmp_report = tmp_base.with_suffix(".ncu-rep")
        what = f"ncu on {label}"
        run = ToolRun(root, ncu_command(ncu, kernel, report_base=tmp_base, log=log, warmup=warmup,
                                        sections=chosen, ncu_set=ncu_set, flush_l2=flush_l2),
                      what=what, timeout=timeout, device=device, cancel=cancel, capture=capture)
        say(f"ncu: replaying {label} ({warmup} warm-up launches, then the profiled one)")
        try:
            run.request("replay", cubin=None if cubin is None else str(cubin_path), iterations=1, warmup=warmup,
                        flush_l2=flush_l2)
        except (Cancelled, ToolTimeout):
            raise
        except KerncapError as exc:
            run.kill()
            _raise_for_log(log, kernel)
            if type(exc) is KerncapError and "replay server died" in exc.message:
                raise KerncapError(f"{what} failed: the replay server under ncu died; ncu's log ends with:\n"
                                   f"{log_tail(log)}", exc.hint) from None
            raise
        say("ncu: writing the report")
        run.finish()
        _raise_for_log(log, kernel)
        if not tmp_report.is_file():
            raise KerncapError(f"{what} wrote no report; its log ends with:\n{log_tail(log)}",
                               "check that ncu can profile on this machine: ncu --version, and the log above")
        say("ncu: reading the report")
        raw = _import(ncu, tmp_report, "raw")
        details = _import(ncu, tmp_report, "details")
        metrics = parse_raw_page(raw, kernel)
        findings = parse_details_page(details)
        os.replace(tmp_report, report)
        os.replace(log, stem.with_suffix(".ncu.log"))
    result = NcuResult(
        kernel=kernel, cubin=None if cubin is None else str(cubin_path), label=label, cubin_sha256=sha,
        report=str(report), metrics=metrics, findings=findings, sections=chosen, ncu_set=ncu_set, warmup=warmup,
        flush_l2=flush_l2, seconds=round(time.monotonic() - t0, 2), created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    if all(v is None for v in metrics.values()):
        result.notes.append("the report holds none of the key metrics (a --section/--set without them?)")
    save_result(stem.with_suffix(".ncu.json"), result.to_dict())
    return result


def _raise_for_log(log: Path, kernel: str) -> None:
    """The errors ncu only reports in its log: counters not permitted, nothing profiled."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return
    if "ERR_NVGPUCTRPERM" in text:
        raise KerncapError("Nsight Compute may not read this GPU's performance counters (ERR_NVGPUCTRPERM)",
                           PERMISSION_HINT)
    if "No kernels were profiled" in text:
        raise KerncapError(f"ncu profiled no launch of {kernel}; its log ends with:\n{log_tail(log)}",
                           "the kernel filter did not match: report this with the log above")


def _import(ncu: Path, report: Path, page: str) -> str:
    cmd = [str(ncu), "--import", str(report), "--csv", "--page", page, "--print-units", "base"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=IMPORT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise KerncapError(f"`ncu --import … --page {page}` did not finish within {IMPORT_TIMEOUT:g} s",
                           f"open {report} with ncu-ui instead") from None
    except OSError as exc:
        raise KerncapError(f"cannot run {ncu}: {exc.strerror}", "check the Nsight Compute installation") from None
    if proc.returncode != 0:
        tail = "\n".join("    | " + line for line in (proc.stderr or proc.stdout).splitlines()[-10:])
        raise KerncapError(f"`ncu --import {report.name} --page {page}` failed (exit {proc.returncode}):\n{tail}",
                           "the report may be from a newer Nsight Compute; open it with ncu-ui")
    return proc.stdout


# -- display -------------------------------------------------------------------------------


def format_value(key: str, value: float | None) -> str:
    """One key metric (KEY_METRICS) in its unit."""
    if value is None:
        return "—"
    kind = METRICS_BY_KEY[key].kind
    if kind == "time":
        return f"{value / 1e3:,.2f} us" if value < 1e7 else f"{value / 1e6:,.3f} ms"
    if kind == "pct":
        return f"{value:.1f} %"
    if kind == "bytes":
        for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
            if value >= scale:
                return f"{value / scale:,.2f} {unit}"
        return f"{value:,.0f} B"
    return f"{value:,.0f}"


def format_delta(key: str, a: float | None, b: float | None) -> str:
    """B against A: percentage points for percentages, else relative change."""
    if a is None or b is None:
        return ""
    if METRICS_BY_KEY[key].kind == "pct":
        return f"{b - a:+.1f} pt"
    if a == 0:
        return "" if b == 0 else "new"
    return f"{(b - a) / a * 100:+.1f} %"


def _wrap(text: str, width: int, indent: str) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent + "  ") or [indent]


def format_result(r: NcuResult, *, replay_median_ms: float | None = None, findings: int = 5) -> str:
    """The text `kerncap replay --ncu` prints: key metrics and ncu's top findings."""
    lines = [f"ncu: {r.label}: {r.kernel}, launch {r.warmup + 1} (after {r.warmup} warm-up launches, not profiled)"]
    for m in KEY_METRICS:
        extra = ""
        if m.key == "duration_ns" and replay_median_ms is not None:
            extra = f"   (replay median {replay_median_ms * 1e3:,.2f} us)"
        lines.append(f"  {m.label:<20}{format_value(m.key, r.metrics.get(m.key)):>14}{extra}")
    top = r.top_findings(findings)
    if top:
        lines.append("findings:")
        for f in top:
            speed = f" (est. speedup {f.speedup_pct:.0f} %)" if f.speedup_pct else ""
            lines += _wrap(f"[{f.type}] {f.rule}{speed}: {f.description}", 100, "  ")
    lines += [f"  note: {n}" for n in r.notes]
    lines.append(f"report: {r.report}   (ncu-ui, or ncu --import … --page details)")
    return "\n".join(lines)


def format_compare(a: NcuResult, b: NcuResult) -> str:
    """The key metrics of two variants side by side, with B's change against A."""
    w = max(14, len(a.label), len(b.label)) + 2
    lines = [f"ncu: {a.kernel}", f"  A = {a.label}", f"  B = {b.label}",
             f"  {'':<20}{'A':>{w}}{'B':>{w}}{'B vs A':>12}"]
    for m in KEY_METRICS:
        va, vb = a.metrics.get(m.key), b.metrics.get(m.key)
        lines.append(f"  {m.label:<20}{format_value(m.key, va):>{w}}{format_value(m.key, vb):>{w}}"
                     f"{format_delta(m.key, va, vb):>12}")
    rules_a = {f.rule for f in a.top_findings(10)}
    rules_b = {f.rule for f in b.top_findings(10)}
    if rules_a - rules_b:
        lines.append("  findings gone in B: " + ", ".join(sorted(rules_a - rules_b)))
    if rules_b - rules_a:
        lines.append("  findings new in B: " + ", ".join(sorted(rules_b - rules_a)))
    lines.append(f"reports: {a.report}\n         {b.report}")
    return "\n".join(lines)
