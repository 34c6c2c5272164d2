"""`kerncap check`: a corpus of reproducers as a regression test.

Every reproducer found under the given directories is validated (byte-exact unless a
tolerance is given) and timed, and so is its best recorded variant (the fastest one the
workbench recorded as passing in history.json). A case fails when its validation fails
or, against a stored baseline, when its median is more than `threshold_pct` above the
baseline's; it is an error when it could not run (damaged reproducer, no GPU). Cases
run on the fan-out (kerncap.fleet.fanout): one worker per GPU.

Also compared: the stack each reproducer recorded (kerncap.core.stack) with the stack
of the worker that replays it; a difference is a warning on the case.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kerncap.capture.apply import APPLY_RUNS
from kerncap.core.stack import differences, recorded_stack
from kerncap.errors import EXIT_CANNOT_RUN, EXIT_FAILED, EXIT_OK, KerncapError, UsageError
from kerncap.fleet import baseline as baseline_file
from kerncap.fleet import junit
from kerncap.fleet.fanout import Fanout, Job, JobResult
from kerncap.fleet.ship import make_bundle
from kerncap.fleet.tasks import ERROR, FAIL, MeasureRequest, Outcome, Step, check_reproducer
from kerncap.reproducer.format import Capture
from kerncap.reproducer.history import Variant, best_variant
from kerncap.reproducer.sets import is_set

MAX_DEPTH = 4
PASS, REGRESSED = "pass", "regressed"


@dataclass
class CheckCase:
    key: str                  # "<reproducer key>#<label>": the baseline's key
    reproducer: str           # as given (on this machine)
    label: str                # baseline | v<N>
    cubin: str | None
    status: str               # pass | fail | regressed | error
    message: str = ""
    hint: str | None = None
    gpu_step: bool = False    # the step that failed or could not run needs a GPU
    validation: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None
    baseline_ms: float | None = None
    change_pct: float | None = None   # (median - baseline) / baseline, percent
    warnings: list[str] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    worker: dict[str, Any] = field(default_factory=dict)
    gpu: str | None = None    # the GPU the worker replayed on, when it could tell
    seconds: float = 0.0
    in_app: dict[str, Any] | None = None  # --apply: the winner run in its app (ApplyResult.to_dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CheckReport:
    cases: list[CheckCase]
    threshold_pct: float
    baseline: str | None
    fanout: str
    seconds: float
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        """0 all pass; 1 a verdict failed (validation or regression); 3 a case could not run."""
        states = {c.status for c in self.cases}
        if states & {FAIL, REGRESSED}:
            return EXIT_FAILED
        if ERROR in states:
            return EXIT_CANNOT_RUN
        return EXIT_OK

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for c in self.cases if c.status == s) for s in (PASS, FAIL, REGRESSED, ERROR)}

    def to_dict(self) -> dict[str, Any]:
        return {"exit_status": self.exit_status, "counts": self.counts(), "threshold_pct": self.threshold_pct,
                "baseline": self.baseline, "fanout": self.fanout, "seconds": self.seconds, "warnings": self.warnings,
                "cases": [c.to_dict() for c in self.cases]}


# -- the corpus --------------------------------------------------------------------------------


def find_corpus(dirs: Sequence[str | os.PathLike]) -> list[tuple[str, Path]]:
    """(key, path) of every reproducer at or below each of `dirs` (up to MAX_DEPTH levels;
    a reproducer's own subdirectories are not searched). The key is the path relative to
    the directory given, or the reproducer's name when it was given itself."""
    found: list[tuple[str, Path]] = []
    for d in map(Path, dirs):
        if not d.exists():
            raise UsageError(f"{d} does not exist", "pass reproducer directories or directories that hold them")
        if _is_reproducer(d):
            found.append((d.resolve().name, d))
            continue
        before = len(found)
        _walk(d, d, 1, found)
        if len(found) == before:
            raise UsageError(f"no reproducer under {d} (searched {MAX_DEPTH} levels for capture/manifest.json)",
                             "pass a directory made by `kerncap extract`, or one that holds such directories")
    keys: dict[str, Path] = {}
    for key, path in found:
        if key in keys and keys[key].resolve() != path.resolve():
            raise UsageError(f"two reproducers have the key {key!r}: {keys[key]} and {path}",
                             "pass their parent directories instead, so that their relative paths tell them apart")
        keys[key] = path
    return list(keys.items())


def _is_reproducer(d: Path) -> bool:
    return (d / "capture" / "manifest.json").is_file() or (d / "manifest.json").is_file() and d.name == "capture"


def _walk(root: Path, d: Path, depth: int, found: list[tuple[str, Path]]) -> None:
    try:
        children = sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return
    for child in children:
        if _is_reproducer(child):
            found.append((child.relative_to(root).as_posix(), child))
        elif depth < MAX_DEPTH:
            _walk(root, child, depth + 1, found)


def cases_of(path: Path) -> list[tuple[str, str | None]]:
    """(label, cubin) to check for one reproducer: the captured cubin, and its best
    recorded variant if it has one."""
    out: list[tuple[str, str | None]] = [("baseline", None)]
    try:
        best = best_variant(path)
    except KerncapError:
        best = None  # an unreadable history is reported on the baseline case (see _recorded)
    if best is not None:
        out.append((best.label, best.cubin))
    return out


def _recorded(path: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """The stack the reproducer recorded, and warnings about its records."""
    warnings = []
    try:
        best_variant(path)
    except KerncapError as exc:
        warnings.append(exc.message)
    try:
        rec = json.loads((path / "reproducer.json").read_text()) if (path / "reproducer.json").is_file() else None
        return recorded_stack(rec if isinstance(rec, dict) else None, Capture.open(path).provenance), warnings
    except (KerncapError, OSError, ValueError):
        return None, warnings  # the worker's open step reports the damage


# -- running ----------------------------------------------------------------------------------


def check(dirs: Sequence[str | os.PathLike], fanout: Fanout, *, options: MeasureRequest | None = None,
          baseline: str | os.PathLike | None = None, threshold_pct: float = 10.0, ship: bool | None = None,
          on_case: Callable[[CheckCase], None] | None = None, apply: bool = False, apply_runs: int = APPLY_RUNS.default,
          trust: bool = False) -> CheckReport:
    """Validate and time every case of the corpus under `dirs` on `fanout`.
    `ship`: send the reproducers' files with the jobs (default: when the fan-out's
    workers may be remote); otherwise workers read them at the same path.
    `apply`: then run each reproducer's (and set's) winner in the app it was captured
    from, here, with --check and `apply_runs` timed runs each way (apply_winners); the
    recorded commands run only with `trust` (a corpus may come from someone else)."""
    start = time.monotonic()
    options = options or MeasureRequest()
    if threshold_pct < 0:
        raise UsageError(f"--threshold {threshold_pct:g} is negative", "give a percentage, e.g. --threshold 10")
    stored = baseline_file.load(baseline) if baseline is not None else None
    corpus = find_corpus(dirs)
    if apply_runs < 0:
        raise UsageError(f"--apply-runs {apply_runs} is negative", "give a run count, e.g. --apply-runs 5 (0: no timing)")
    winners = app_winners(corpus) if apply else []
    runnable = [w for w in winners if w.command]
    if runnable and not trust:
        raise UsageError("--apply runs the command each reproducer recorded: "
                         + "; ".join(w.shown for w in runnable[:3])
                         + (f" and {len(runnable) - 3} more" if len(runnable) > 3 else ""),
                         "read them, then add --trust to run them (kerncap info DIR shows each reproducer's command)")
    ship = fanout.remote if ship is None else ship
    jobs, plans = [], {}
    for key, path in corpus:
        variants = cases_of(path)
        handle = fanout.put(make_bundle(path)) if ship else str(path.resolve())
        jobs.append(Job(key=key, gpu_fn=check_reproducer, gpu_args=(handle, variants, options)))
        plans[key] = (path, variants, *_recorded(path))
    cases: list[CheckCase] = []

    def collect(r: JobResult) -> None:
        path, variants, recorded, warnings = plans[r.key]
        for case in _cases(r, path, variants, recorded, warnings, stored, threshold_pct):
            cases.append(case)
            if on_case is not None:
                on_case(case)

    fanout.run(jobs, on_result=collect)
    order = {key: i for i, (key, _) in enumerate(corpus)}
    cases.sort(key=lambda c: (order[c.key.rsplit("#", 1)[0]], c.label != "baseline", c.label))
    report_warnings = []
    if apply:
        if not winners:
            report_warnings.append("--apply: no reproducer has a passing recorded variant to apply")
        cases += apply_winners(winners, cases, runs=apply_runs, on_case=on_case)
    if stored is not None:
        seen = {c.key for c in cases}
        missing = sorted(set(stored) - seen)
        if missing:
            report_warnings.append(f"{len(missing)} case(s) of the baseline were not checked: {', '.join(missing[:5])}"
                                   + (" ..." if len(missing) > 5 else ""))
    return CheckReport(cases=cases, threshold_pct=threshold_pct, baseline=str(baseline) if baseline else None,
                       fanout=fanout.description, seconds=time.monotonic() - start, warnings=report_warnings)


def _cases(r: JobResult, path: Path, variants: list[tuple[str, str | None]], recorded: dict | None,
           warnings: list[str], stored, threshold_pct: float) -> list[CheckCase]:
    outcomes: list[Outcome]
    if r.ok:
        outcomes = list(r.value)
    else:  # the job itself did not finish: every case of it says why
        outcomes = [Outcome(reproducer=str(path), label=label, cubin=cubin,
                            steps=[Step("run", True, ERROR, message=f"the job did not finish: {r.error}",
                                        hint="see the worker's log; rerun `kerncap check` on this reproducer alone")])
                    for label, cubin in variants]
    out = []
    for o in outcomes:
        key = f"{r.key}#{o.label}"
        case = CheckCase(key=key, reproducer=str(path), label=o.label, cubin=o.cubin, status=PASS,
                         validation=o.validation, timing=o.timing, worker=o.worker,
                         steps=[asdict(s) for s in o.steps], seconds=sum(s.seconds for s in o.steps),
                         warnings=list(warnings), gpu=((o.stack or {}).get("gpu") or {}).get("name"))
        if recorded is not None and o.stack is not None:
            case.warnings += [f"stack differs from the recorded one: {d}" for d in differences(recorded, o.stack)]
        problem = o.problem
        if problem is not None:
            case.status = FAIL if problem.status == FAIL else ERROR
            case.message = f"{problem.name}: {problem.message}"
            case.hint, case.gpu_step = problem.hint, problem.gpu
        elif stored is not None and o.timing:
            _compare(case, stored.get(key), o, threshold_pct)
        out.append(case)
    return out


# -- --apply: each winner in its app (issue 46, docs/apply.md) ---------------------------------


@dataclass
class Winner:
    key: str            # the reproducer's key, or the set's
    root: Path          # the reproducer, or the set whose History holds the winner
    variant: Variant
    command: list[str]  # what the capture recorded
    cwd: str | None
    env: dict[str, str]

    @property
    def shown(self) -> str:
        """What --apply will run, as the trust message names it."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return f"{env + ' ' if env else ''}{shlex.join(self.command)} (in {self.cwd or '?'})"


# Recorded variables the app's own run needs again: those the capture library records
# (native/capture/provenance_util.hpp kept_env) but kerncap's own KERNCAP_* (the capture's
# settings) and CUDA_VISIBLE_DEVICES (the capturing machine's GPUs: this shell's rule). An
# allow-list: a hostile manifest's env (LD_PRELOAD, PATH…) never reaches the app, and what
# is passed is shown before --trust (Winner.shown).
APP_ENV = ("CUDA_MODULE_LOADING", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_LAUNCH_BLOCKING", "CUDA_DEVICE_ORDER",
           "CUBLAS_WORKSPACE_CONFIG")


def _app_env(recorded: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in recorded.items()
            if isinstance(k, str) and (k in APP_ENV or k.startswith("TRITON_"))}


def app_winners(corpus: Sequence[tuple[str, Path]]) -> list[Winner]:
    """The best recorded variant of every reproducer of the corpus that has one, with the
    command its capture recorded. A set's members are found as reproducers; the set's own
    History holds its winner, applied once for the set."""
    out: list[Winner] = []
    seen: set[Path] = set()
    for key, path in corpus:
        root = path
        if path.parent.name == "members" and is_set(path.parent.parent):
            root = path.parent.parent
            key = key.rsplit("/members/", 1)[0] if "/members/" in key else root.resolve().name
        if root.resolve() in seen:
            continue
        seen.add(root.resolve())
        try:
            best = best_variant(root)
            prov = Capture.open(path).provenance if best is not None else {}
        except KerncapError:
            continue  # the baseline case reports the damage
        if best is None:
            continue
        command = prov.get("command") or []  # none recorded: the winner's case says so
        out.append(Winner(key, root, best, shlex.split(command) if isinstance(command, str) else list(command),
                          prov.get("cwd"), _app_env(prov.get("env") or {})))
    return out


def apply_winners(winners: Sequence[Winner], cases: Sequence[CheckCase], *, runs: int,
                  on_case: Callable[[CheckCase], None] | None = None) -> list[CheckCase]:
    """Each winner substituted in its app (Session/SetSession.apply, on this machine's GPU):
    --check over every launch, `runs` timed runs each way; the outcome is also kept on the
    winner's History row. A winner whose replay check failed in this run is not applied."""
    from kerncap.session.opening import open_session
    from kerncap.session.options import ApplyRequest
    from kerncap.session.session import needs_gpu

    status = {c.key: c.status for c in cases}
    out = []
    for w in winners:
        label = f"{w.variant.label}-in-app"
        case = CheckCase(key=f"{w.key}#{label}", reproducer=str(w.root), label=label, cubin=w.variant.cubin,
                         status=PASS)
        replayed = status.get(f"{w.key}#{w.variant.label}")
        started = time.monotonic()
        if not w.command:
            case.status, case.message = ERROR, "not applied: the capture recorded no command of the app"
            case.hint = f"apply it by hand: kerncap apply {w.root} --variant {w.variant.id} --check -- CMD…"
        elif replayed not in (None, PASS):
            case.status, case.message = ERROR, f"not applied: {w.variant.label} did not pass its replay check ({replayed})"
            case.hint = "fix the variant first; `kerncap check` on the reproducer alone shows why"
        else:
            request = ApplyRequest(command=tuple(w.command), variant=w.variant.id, check=True, runs=runs, cwd=w.cwd,
                                   env=w.env or None)
            try:
                with open_session(w.root, compile_worker=False) as session:
                    result = session.apply(request, output=lambda _stream, _data: None)
                case.in_app = result.to_dict()
                if result.check is not None and result.check.inconclusive:
                    case.status, case.message = ERROR, "in the app: " + result.check.text().splitlines()[0]
                    case.hint = ("name the app's output files (kerncap apply --compare-output)"
                                 if result.check.nothing_compared else
                                 "make the app deterministic (a fixed seed), then apply again")
                elif result.exit_status:
                    case.status, case.message = FAIL, "in the app: " + result.check.text().splitlines()[0]
                    case.hint = f"kerncap apply {w.root} --variant {w.variant.id} --check -- … shows the launch"
            except KerncapError as exc:
                case.status, case.message, case.hint = ERROR, f"apply: {exc.message}", exc.hint
                case.gpu_step = needs_gpu(exc)
        case.seconds = time.monotonic() - started
        out.append(case)
        if on_case is not None:
            on_case(case)
    return out


def _compare(case: CheckCase, entry, o: Outcome, threshold_pct: float) -> None:
    if entry is None:
        case.warnings.append("not in the baseline (new case): timed, not compared")
        return
    if entry.gpu and case.gpu and entry.gpu != case.gpu:
        case.warnings.append(f"baseline measured on {entry.gpu}, this run on {case.gpu}: not compared")
        return
    median = o.timing["median_ms"]
    case.baseline_ms = entry.median_ms
    case.change_pct = (median - entry.median_ms) / entry.median_ms * 100.0
    if case.change_pct > threshold_pct:
        case.status = REGRESSED
        case.message = (f"median {median * 1000:.2f} us is {case.change_pct:.1f}% above the baseline's "
                        f"{entry.median_ms * 1000:.2f} us (threshold {threshold_pct:g}%)")
        case.hint = "find the change that slowed it (`kerncap tui` on the reproducer shows its history)"


def baseline_cases(report: CheckReport) -> dict[str, dict[str, Any]]:
    """What --write-baseline stores: the timing of every passing case."""
    out = {}
    for c in report.cases:
        if c.status == PASS and c.timing:
            out[c.key] = {"median_ms": c.timing["median_ms"], "min_ms": c.timing["min_ms"],
                          "iterations": c.timing["iterations"], "gpu": c.gpu}
    return out


def junit_cases(report: CheckReport) -> list[junit.JUnitCase]:
    out = []
    for c in report.cases:
        lines = []
        if c.timing:
            lines.append(f"median {c.timing['median_ms'] * 1000:.3f} us, min {c.timing['min_ms'] * 1000:.3f} us, "
                         f"spread {c.timing['spread_pct']:.1f}% over {c.timing['iterations']} iterations")
        if c.baseline_ms is not None:
            lines.append(f"baseline {c.baseline_ms * 1000:.3f} us ({c.change_pct:+.1f}%)")
        lines += [f"warning: {w}" for w in c.warnings]
        status = {PASS: "pass", FAIL: "fail", REGRESSED: "fail", ERROR: "error"}[c.status]
        detail = c.message + (f"\nhint: {c.hint}" if c.hint else "")
        if c.status == ERROR:
            detail += "\n(a GPU step)" if c.gpu_step else "\n(a CPU step)"
        props = {"reproducer": c.reproducer, "worker": str(c.worker.get("name") or c.worker.get("host") or "")}
        out.append(junit.JUnitCase(classname=c.key.rsplit("#", 1)[0], name=c.label, seconds=c.seconds, status=status,
                                   message=c.message, detail=detail, output=lines, properties=props))
    return out


def format_report(report: CheckReport) -> str:
    """The table `kerncap check` prints."""
    head = ["status", "case", "check", "median us", "vs base"]
    rows = []
    for c in report.cases:
        rows.append([c.status.upper() if c.status != PASS else "pass", c.key,
                     "in app" if c.label.endswith("-in-app") else (c.validation or {}).get("mode", "") or "",
                     f"{c.timing['median_ms'] * 1000:.2f}" if c.timing else "-",
                     f"{c.change_pct:+.1f}%" if c.change_pct is not None else ""])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(x.ljust(w) if i < 3 else x.rjust(w) for i, (x, w) in enumerate(zip(cells, widths))).rstrip()

    lines = [line(head)]
    for c, r in zip(report.cases, rows):
        lines.append(line(r))
        if c.status != PASS:
            lines.append(f"      {c.message}" + (" [GPU step]" if c.status == ERROR and c.gpu_step else ""))
            if c.hint:
                lines.append(f"      hint: {c.hint}")
        if c.in_app:
            lines.append(f"      {in_app_line(c.in_app)}")
        lines += [f"      warning: {w}" for w in c.warnings]
    n = report.counts()
    lines.append(f"{len(report.cases)} case(s): {n[PASS]} passed, {n[FAIL]} failed, {n[REGRESSED]} regressed, "
                 f"{n[ERROR]} could not run; {report.seconds:.1f} s on {report.fanout}")
    lines += [f"warning: {w}" for w in report.warnings]
    return "\n".join(lines)


def in_app_line(doc: dict[str, Any]) -> str:
    """One line of an applied winner (ApplyResult.to_dict): launches compared, speedups."""
    check = doc.get("check") or {}
    parts = [f"{doc['substituted']} of {doc['launches']} launch(es) substituted",
             f"{check.get('compared', 0)} compared, " + (
                 f"no verdict: the app's own runs differ at launch {check['unsteady']['launch']}"
                 if check.get("verdict") == "unsteady" else "no verdict: nothing compared"
                 if check.get("verdict") == "nothing" else "byte-exact" if not check.get("mismatch") else
                 f"launch {check['mismatch']['launch']} differs")]
    timing = doc.get("timing") or {}
    for what in ("kernel", "app"):
        iv = timing.get(f"{what}_speedup")
        if iv:
            parts.append(f"{what} {iv['speedup']:.3f}x [{iv['low']:.3f}, {iv['high']:.3f}]")
    share = (timing.get("share") or [None])[0]
    if share is not None:
        parts.append(f"share {100 * share:.1f} % of GPU time")
    return "in app: " + "; ".join(parts)


def write_baseline(report: CheckReport, path: str | os.PathLike) -> Path:
    """Store the medians of the passing cases of `report` for a later `check(baseline=path)`."""
    return baseline_file.save(path, baseline_cases(report))
