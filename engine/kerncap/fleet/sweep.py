"""`kerncap sweep`: many Triton configs or cubin variants of one reproducer, validated
and timed on every GPU of the fan-out.

Each config is compiled on a compile worker (`recompile --config`, Triton in-process),
then validated and timed on a GPU worker, whose resident replay server keeps the
capture restored between entries. The captured cubin is timed too: every speedup is
against it, measured in the same run.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kerncap.core.units import speedup_text
from kerncap.errors import EXIT_CANNOT_RUN, EXIT_FAILED, EXIT_OK, KerncapError, UsageError
from kerncap.fleet import junit
from kerncap.fleet.fanout import Fanout, Job, JobResult
from kerncap.fleet.ship import make_bundle
from kerncap.fleet.tasks import ERROR, FAIL, MeasureRequest, Outcome, Step, compile_config, measure, measure_compiled
from kerncap.reproducer.format import Capture

CAPTURED = "captured"


@dataclass
class SweepEntry:
    label: str                 # the config, the variant's file name, or "captured"
    kind: str                  # captured | config | variant
    status: str                # pass | fail | error
    cubin: str | None = None
    message: str = ""
    hint: str | None = None
    gpu_step: bool = False
    compile_s: float | None = None
    validation: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None
    speedup: float | None = None  # captured median / this median
    worker: str | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SweepReport:
    reproducer: str
    entries: list[SweepEntry]
    fanout: str
    gpu_workers: int
    seconds: float
    per_worker: dict[str, dict[str, float]] = field(default_factory=dict)  # entries and GPU seconds per worker

    @property
    def variants(self) -> list[SweepEntry]:
        return [e for e in self.entries if e.kind != CAPTURED]

    @property
    def best(self) -> SweepEntry | None:
        passed = [e for e in self.variants if e.status == "pass" and e.timing]
        return min(passed, key=lambda e: e.timing["median_ms"], default=None)

    @property
    def throughput(self) -> float:
        """Entries validated and timed per second of the sweep."""
        return len(self.entries) / self.seconds if self.seconds > 0 else 0.0

    @property
    def exit_status(self) -> int:
        """0 some variant passed; 1 variants ran, none passed; 3 none could run."""
        if any(e.status == "pass" for e in self.variants):
            return EXIT_OK
        if any(e.status == FAIL for e in self.variants):
            return EXIT_FAILED
        return EXIT_CANNOT_RUN

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return {"reproducer": self.reproducer, "exit_status": self.exit_status, "fanout": self.fanout,
                "gpu_workers": self.gpu_workers, "seconds": self.seconds, "throughput_per_s": self.throughput,
                "best": best.label if best else None, "per_worker": self.per_worker,
                "entries": [e.to_dict() for e in self.entries]}


def load_configs(path: str | os.PathLike) -> list[str]:
    """Configs from a file: one `--config` value per line (# comments), or a JSON list of
    such strings or of {name: value} objects."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read the configs file {path} ({exc.strerror or exc})", "pass an existing file") from None
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"{path} is not valid JSON ({exc})", "one config per line, or a JSON list") from None
        configs = [",".join(f"{k}={v}" for k, v in c.items()) if isinstance(c, dict) else str(c) for c in items]
    else:
        configs = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    configs = [c for c in configs if c]
    if not configs:
        raise UsageError(f"{path} holds no config", "write one per line, e.g. num_warps=4,num_stages=3")
    return configs


def sweep(reproducer: str | os.PathLike, fanout: Fanout, *, configs: Sequence[str] = (),
          variants: Sequence[str | os.PathLike] = (), options: MeasureRequest | None = None, ship: bool | None = None,
          on_entry: Callable[[SweepEntry], None] | None = None) -> SweepReport:
    start = time.monotonic()
    options = options or MeasureRequest()
    root = Path(reproducer)
    if Capture.open(root).sequence is not None:  # a damaged reproducer is refused before anything is sent
        raise UsageError(f"{root} is a sequence: sweep compiles configs of one kernel",
                         "compare a sequence's variants with kerncap replay DIR --compare V1 V2 ...")
    configs = list(dict.fromkeys(configs))
    if not configs and not variants:
        raise UsageError("nothing to sweep", "pass --configs FILE, --autotune or --variants CUBIN...")
    ship = fanout.remote if ship is None else ship
    handle = fanout.put(make_bundle(root)) if ship else str(root.resolve())
    jobs = [Job(key=CAPTURED, gpu_fn=measure, gpu_args=(handle, CAPTURED, None, options))]
    for c in configs:
        jobs.append(Job(key=f"config:{c}", cpu_fn=compile_config, cpu_args=(handle, c), gpu_fn=measure_compiled,
                        gpu_args=(handle, options)))
    for v in variants:
        name, files = _variant_files(Path(v))
        # Shipped, a variant travels into the worker's copy of the reproducer; here it is
        # measured where it lies, so sweeping leaves nothing in the reproducer's variants/.
        where = (f"variants/{name}", files) if ship else (str(Path(v).resolve()), None)
        jobs.append(Job(key=f"variant:{v}", gpu_fn=measure, gpu_args=(handle, Path(v).name, *where[:1], options,
                                                                        where[1])))
    entries: dict[str, SweepEntry] = {}

    def collect(r: JobResult) -> None:
        entries[r.key] = _entry(r)
        if on_entry is not None:
            on_entry(entries[r.key])

    fanout.run(jobs, on_result=collect)
    ordered = [entries[j.key] for j in jobs]
    base = ordered[0].timing["median_ms"] if ordered[0].timing else None
    per_worker: dict[str, dict[str, float]] = {}
    for e in ordered:
        if e.timing and base:
            e.speedup = base / e.timing["median_ms"]
        if e.worker:
            w = per_worker.setdefault(e.worker, {"entries": 0, "gpu_seconds": 0.0})
            w["entries"] += 1
            w["gpu_seconds"] += sum(s["seconds"] for s in e.steps if s["gpu"])
    return SweepReport(reproducer=str(root), entries=ordered, fanout=fanout.description,
                       gpu_workers=fanout.gpu_workers, seconds=time.monotonic() - start, per_worker=per_worker)


def _variant_files(cubin: Path) -> tuple[str, dict[str, bytes]]:
    """A cubin (and its .launch.json, for a Triton variant) under a content-addressed name,
    so that shipping it into the reproducer's variants/ never overwrites another file."""
    try:
        data = cubin.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the variant {cubin} ({exc.strerror or exc})",
                         "pass cubins built with `kerncap recompile`") from None
    stem = f"sweep-{hashlib.sha256(data).hexdigest()[:12]}"
    files = {f"{stem}.cubin": data}
    launch = cubin.with_suffix(".launch.json")
    if launch.is_file():
        files[f"{stem}.launch.json"] = launch.read_bytes()
    return f"{stem}.cubin", files


def _entry(r: JobResult) -> SweepEntry:
    kind, _, label = r.key.partition(":") if r.key != CAPTURED else (CAPTURED, "", CAPTURED)
    label = Path(label).name if kind == "variant" else label
    if not r.ok:
        return SweepEntry(label=label, kind=kind, status=ERROR, message=f"the job did not finish: {r.error}",
                          hint="rerun the sweep; if it repeats, run this entry alone", gpu_step=True)
    o: Outcome = r.value
    entry = SweepEntry(label=label, kind=kind, status="pass", cubin=o.cubin, validation=o.validation,
                       timing=o.timing, worker=o.worker.get("name") or f"{o.worker.get('host')}:{o.worker.get('pid')}",
                       steps=[asdict(s) for s in o.steps])
    compile_step = next((s for s in o.steps if s.name == "compile"), None)
    if compile_step is not None:
        entry.compile_s = compile_step.seconds
    problem: Step | None = o.problem
    if problem is not None:
        entry.status = FAIL if problem.status == FAIL else ERROR
        entry.message, entry.hint, entry.gpu_step = f"{problem.name}: {problem.message}", problem.hint, problem.gpu
    return entry


def junit_cases(report: SweepReport) -> list[junit.JUnitCase]:
    out = []
    for e in report.entries:
        lines = []
        if e.timing:
            lines.append(f"median {e.timing['median_ms'] * 1000:.3f} us"
                         + (f", {speedup_text(e.speedup, 3)} vs captured" if e.speedup else ""))
        status = {"pass": "pass", FAIL: "fail", ERROR: "error"}[e.status]
        detail = e.message + (f"\nhint: {e.hint}" if e.hint else "")
        out.append(junit.JUnitCase(classname=f"sweep.{Path(report.reproducer).name}", name=e.label,
                                   seconds=sum(s["seconds"] for s in e.steps), status=status, message=e.message,
                                   detail=detail, output=lines, properties={"worker": e.worker or ""}))
    return out


def format_report(report: SweepReport) -> str:
    """The table `kerncap sweep` prints."""
    head = ["status", "entry", "check", "compile s", "median us", "speedup", "worker"]
    rows = []
    for e in report.entries:
        rows.append([e.status.upper() if e.status != "pass" else "pass", e.label,
                     (e.validation or {}).get("mode", "") if e.validation else "",
                     f"{e.compile_s:.2f}" if e.compile_s is not None else "",
                     f"{e.timing['median_ms'] * 1000:.2f}" if e.timing else "-",
                     speedup_text(e.speedup, 3) if e.speedup else "", e.worker or ""])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(x.rjust(w) if i in (3, 4, 5) else x.ljust(w)
                         for i, (x, w) in enumerate(zip(cells, widths))).rstrip()

    lines = [line(head)]
    for e, r in zip(report.entries, rows):
        lines.append(line(r))
        if e.status != "pass":
            lines.append(f"      {e.message}" + (" [GPU step]" if e.status == ERROR and e.gpu_step else ""))
    best = report.best
    n_pass = sum(1 for e in report.variants if e.status == "pass")
    lines.append(f"{len(report.variants)} variant(s): {n_pass} passed; best: "
                 + (f"{best.label} ({speedup_text(best.speedup, 3)} vs captured)" if best and best.speedup else
                    best.label if best else "none"))
    lines.append(f"{len(report.entries)} entries in {report.seconds:.1f} s ({report.throughput:.2f}/s) on "
                 f"{report.fanout}")
    return "\n".join(lines)


def check_variant_paths(variants: Sequence[str | os.PathLike]) -> None:
    for v in variants:
        if not Path(v).is_file():
            raise KerncapError(f"variant cubin {v} does not exist", "build it with `kerncap recompile DIR`")
