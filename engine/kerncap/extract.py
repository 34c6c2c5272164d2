"""`kerncap extract`: run the app, capture one dispatch of one kernel, write a reproducer.

Nothing is left half-written: the app writes into a run directory next to the output
(`<output>.run-<pid>`, same file system), the reproducer is assembled there and moved
to `<output>` with one rename once it is complete. On any failure the run directory is
removed and `<output>` is untouched.

Several dispatches (a list, or one per shape bucket with `buckets=True`) are captured in
one run of the app into a reproducer set (kerncap.sets). `selection` restricts which
launches count: NVTX ranges, the process (rank / pid), the device (kerncap.selection).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kerncap import __version__
from kerncap.capture.format import Capture
from kerncap.errors import KerncapError
from kerncap.native import inject_library
from kerncap.profile import short_kernel_name
from kerncap.selection import Selection, diagnose as diagnose_selection, nvtx_environment, stop_requested
from kerncap.run import (
    AppOutcome,
    OutputSink,
    app_environment,
    check_command,
    command_text,
    cupti_subscriber_error,
    read_reports,
    report_errors,
    run_app,
)

if TYPE_CHECKING:
    from kerncap.prune_report import PruneReport
    from kerncap.sets import SetExtractResult

MATCH_MODES = ("substring", "regex", "exact")


@dataclass
class ExtractResult:
    reproducer_dir: Path
    capture: Capture
    run_dir: Path  # removed at the end unless keep_run_dir
    sources: dict | None = None
    triton: dict | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    outcome: AppOutcome | None = None
    prune: PruneReport | None = None  # with extract(prune=True), unless pruning could not run (see notes)

    @property
    def warnings(self) -> list[str]:
        return self.capture.warnings + self.notes


def extract(
    kernel: str,
    command: Sequence[str],
    *,
    output: str | os.PathLike,
    dispatch: int | Sequence[int] = 0,
    match: str = "substring",
    keep_running: bool = False,
    timeout: float | None = None,
    source_dir: str | os.PathLike | None = None,
    build_dir: str | os.PathLike | None = None,
    cwd: str | os.PathLike | None = None,
    env: dict[str, str] | None = None,
    force: bool = False,
    keep_run_dir: bool = False,
    output_sink: OutputSink | None = None,
    prune: bool = False,
    selection: Selection | None = None,
    buckets: bool = False,
) -> ExtractResult | SetExtractResult:
    """Capture dispatch `dispatch` (0-based, counted per process among launches whose
    name matches `kernel`) of the app `command` into the reproducer directory `output`.

    `env` adds to (or overrides) the current environment of the app. `prune`: then
    shrink the reproducer to its pointer closure if replay validates it (kerncap.prune);
    the verdict is `result.prune`. A list of dispatches, or `buckets` (the first
    dispatch of every launch signature), captures a reproducer set in one run
    (kerncap.sets.SetExtractResult). `selection`: which launches count at all.
    """
    start = time.monotonic()
    command = list(command)
    output = Path(output).absolute()
    dispatches = dispatch_list(dispatch)
    set_mode = buckets or len(dispatches) > 1
    _check_pattern(kernel, match, dispatches[0])
    selection = selection or Selection()
    selection.check()
    if set_mode and prune:
        raise KerncapError("--prune works on one reproducer, not on a set", "prune a member: kerncap prune SET/members/N")
    inject_library()  # fail before anything is created if the capture library is missing
    base_env = {**os.environ, **(env or {})}
    check_command(command, cwd=cwd, env=base_env)
    if source_dir is not None and not Path(source_dir).is_dir():
        raise KerncapError(f"--source-dir {source_dir} is not a directory", "pass the root of the app's source tree")
    if build_dir is not None and not Path(build_dir).is_dir():
        raise KerncapError(f"--build-dir {build_dir} is not a directory", "pass the app's build directory")
    _check_output_free(output, force)

    created_parents = _make_parents(output.parent)
    run_dir = output.with_name(f"{output.name}.run-{os.getpid()}")
    try:
        if run_dir.exists():
            shutil.rmtree(run_dir)  # left over by an earlier process with our pid
        run_dir.mkdir()
    except OSError as exc:
        _remove_empty(created_parents)
        raise KerncapError(
            f"cannot write in the output directory {output.parent}: {exc.strerror or exc}",
            "choose a writable --output (the app was not started)",
        ) from None

    succeeded = False
    try:
        settings = {
            "KERNCAP_KERNEL": kernel,
            "KERNCAP_MATCH": match,
            "KERNCAP_DISPATCH": ",".join(map(str, dispatches)),
            "KERNCAP_KEEP_RUNNING": "1" if keep_running else "0",
            **selection.settings(),
        }
        if set_mode:
            settings["KERNCAP_SET"] = "1"
            settings["KERNCAP_BUCKETS"] = "1" if buckets else "0"
        if selection.nvtx is not None:
            settings.update(nvtx_environment(inject_library()))
        app_env = app_environment(command, mode="capture", run_dir=run_dir, settings=settings, env=env)
        done = _done_check(run_dir, dispatches, set_mode, buckets, keep_running)
        outcome = run_app(
            command, env=app_env, cwd=cwd, timeout=timeout, output=output_sink, stop_when=done,
            # A set's counts and times are written at the app's exit: let a Python app unwind.
            timeout_signals=(signal.SIGINT, signal.SIGTERM) if set_mode else (signal.SIGTERM,),
        )
        procs = read_reports(run_dir, "proc")
        if not captured_dirs(run_dir):
            raise diagnose_failure(kernel, match, dispatches[0], procs, outcome, run_dir, timeout, selection)

        try:
            if set_mode:
                from kerncap.sets import assemble_set

                result = assemble_set(kernel, match, dispatches, buckets, command, output, run_dir, source_dir,
                                      build_dir, force, procs, outcome)
            else:
                result = _assemble(kernel, match, dispatches[0], command, output, run_dir, source_dir, build_dir,
                                   force)
        except OSError as exc:
            raise KerncapError(
                f"the capture succeeded but the reproducer {output} could not be written: "
                f"{exc.strerror or exc} ({exc.filename or output})",
                "free space or fix permissions and extract again; --keep-run-dir keeps the raw capture",
            ) from None
        result.outcome = outcome
        result.notes.extend(outcome_notes(outcome, procs))
        result.seconds = time.monotonic() - start
        succeeded = True
    finally:
        if not keep_run_dir:
            shutil.rmtree(run_dir, ignore_errors=True)
        if not succeeded:
            _remove_empty(created_parents)
    if prune:
        _prune(result)
    return result


def _prune(result: ExtractResult) -> None:
    """Prune the fresh reproducer; a failure to prune is a note, never the loss of the capture
    (prune_reproducer leaves the full reproducer in place whenever it does not finish)."""
    from kerncap.prune import prune_reproducer

    try:
        result.prune = prune_reproducer(result.reproducer_dir)
    except KerncapError as exc:
        result.notes.append(f"not pruned: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""))
    except Exception as exc:  # a bug there must not cost the user the capture
        result.notes.append(f"not pruned: {type(exc).__name__}: {exc}; the full reproducer is complete")
    result.capture = Capture.open(result.reproducer_dir)


def outcome_notes(outcome: AppOutcome, procs: list[dict]) -> list[str]:
    """How the app ended after the capture, and which processes the selection left out."""
    from kerncap.selection import processes_note

    notes = []
    if outcome.returncode not in (0, None) and not outcome.stopped:
        notes.append(f"the app {outcome.describe_exit()} after the capture was written")
    stop = outcome.stop.describe()
    if stop and (outcome.stop.processes > 1 or outcome.stop.killed):  # a job, or one that resisted
        notes.append(f"after the capture kerncap {stop}")
    excluded = processes_note(procs)
    if excluded:
        notes.append(excluded)
    return notes


def _done_check(run_dir: Path, dispatches: list[int], set_mode: bool, buckets: bool, keep_running: bool):
    """When the app may be stopped: its capture(s) are on disk (a bucket set needs the
    whole run), or the interposer asked for it (a selection this job cannot meet)."""
    if not set_mode:
        wanted = [run_dir / "capture" / "manifest.json"]
    elif buckets or keep_running:
        wanted = []
    else:
        wanted = [run_dir / f"capture-{d}" / "manifest.json" for d in dispatches]

    def done() -> bool:
        if stop_requested(run_dir):
            return True
        return not keep_running and bool(wanted) and all(p.is_file() for p in wanted)

    return done


# -- input checks --------------------------------------------------------------------------


def dispatch_list(dispatch: int | str | Sequence[int]) -> list[int]:
    """3 -> [3]; "3,17,40" or [40, 3, 17] -> [3, 17, 40] (sorted, unique)."""
    if isinstance(dispatch, str):
        try:
            values = [int(x) for x in dispatch.split(",")]
        except ValueError:
            raise KerncapError(f"--dispatch {dispatch!r} is not a number or a comma-separated list of numbers",
                               "e.g. --dispatch 3 or --dispatch 3,17,40") from None
    elif isinstance(dispatch, int):
        values = [dispatch]
    else:
        values = [int(x) for x in dispatch]
    if not values:
        raise KerncapError("--dispatch lists no dispatch", "e.g. --dispatch 3,17,40")
    for v in values:
        if v < 0:
            raise KerncapError(f"--dispatch {v} is negative", "dispatches are counted from 0")
    return sorted(set(values))


NCCL_PREFIXES = ("ncclKernel", "ncclDevKernel")


def _refuse_nccl(kernel: str, match: str) -> None:
    """NCCL's own kernels wait for their peer ranks: one of them cannot run alone."""
    if match != "regex" and any(p in kernel for p in NCCL_PREFIXES):
        raise KerncapError(
            f"{kernel!r} names NCCL's own kernels (ncclKernel*/ncclDevKernel*); they cannot be captured: a "
            "collective waits for its peer ranks, so one rank's kernel never completes alone",
            "capture your own kernels around the collective instead (kerncap profile lists them)",
        )


def _check_pattern(kernel: str, match: str, dispatch: int) -> None:
    if not kernel:
        raise KerncapError("no kernel name given", "run `kerncap profile -- CMD` to see the kernel names")
    _refuse_nccl(kernel, match)
    if match not in MATCH_MODES:
        raise KerncapError(f"unknown --match mode {match!r}", f"use one of: {', '.join(MATCH_MODES)}")
    if match == "regex":
        try:
            re.compile(kernel)
        except re.error as exc:
            raise KerncapError(f"--match regex: {kernel!r} is not a valid regular expression ({exc})",
                               "fix the pattern, or use --match substring") from None
    if dispatch < 0:
        raise KerncapError(f"--dispatch {dispatch} is negative", "dispatches are counted from 0")


def _check_output_free(output: Path, force: bool) -> None:
    if output.exists() and not output.is_dir():
        raise KerncapError(f"output {output} exists and is not a directory", "choose another --output")
    if output.is_dir() and any(output.iterdir()) and not force:
        raise KerncapError(
            f"output directory {output} exists and is not empty",
            "choose another --output, or pass --force to replace it (it is replaced only after a capture succeeds)",
        )


def _make_parents(directory: Path) -> list[Path]:
    """Create `directory` and missing parents; return those created (deepest last)."""
    missing = []
    d = directory
    while not d.exists():
        missing.append(d)
        d = d.parent
    created = []
    for d in reversed(missing):
        try:
            d.mkdir()
        except OSError as exc:
            _remove_empty(created)
            raise KerncapError(
                f"cannot create the output directory {d}: {exc.strerror or exc}",
                "choose a writable --output (the app was not started)",
            ) from None
        created.append(d)
    return created


def _remove_empty(dirs: list[Path]) -> None:
    for d in reversed(dirs):
        try:
            d.rmdir()
        except OSError:
            break


# -- success: assembling the reproducer ----------------------------------------------------


def captured_dirs(run_dir: Path) -> list[Path]:
    """The complete capture directories of a run: `capture`, or a set's `capture-<N>`
    (by dispatch)."""
    found = [d for d in run_dir.glob("capture*") if (d / "manifest.json").is_file()
             and (d.name == "capture" or (d.name.startswith("capture-") and d.name[8:].isdigit()))]
    return sorted(found, key=lambda d: int(d.name[8:]) if d.name != "capture" else -1)


def build_reproducer(
    stage: Path, capture_dir: Path, run_dir: Path, kernel: str, match: str, dispatch: int, command: list[str],
    source_dir, build_dir,
) -> dict[str, Any]:
    """Turns one capture directory of the run into a reproducer at `stage`: moves the
    capture in, attaches sources and the Triton record, writes reproducer.json."""
    stage.mkdir(parents=True)
    os.rename(capture_dir, stage / "capture")
    capture = Capture.open(stage)
    notes: list[str] = []

    sources = None
    if source_dir is not None:
        sources = _attach("kerncap.sources", "attach_sources", notes, stage, capture, Path(source_dir),
                          Path(build_dir) if build_dir is not None else None)
    triton = None
    if any(run_dir.glob("triton-*.json")):
        triton = _attach("kerncap.triton", "attach_triton", notes, stage, capture, run_dir)

    record: dict[str, Any] = {
        "kerncap_version": __version__,
        "kernel": capture.kernel.get("name"),
        "demangled": capture.kernel.get("demangled"),
        "match": {"pattern": kernel, "mode": match},
        "dispatch": dispatch,
        "command": command,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        # A Triton kernel's sources are the hook's snapshot, whatever --source-dir found.
        "sources": triton if triton else sources,
        "triton": triton,
        "notes": notes,
    }
    tmp = stage / ".reproducer.json.tmp"
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, stage / "reproducer.json")
    return record


def replace_output(stage: Path, output: Path, force: bool) -> None:
    """Moves the finished `stage` to `output` (checked empty before the run)."""
    if output.exists():
        if force:
            shutil.rmtree(output)
        else:
            output.rmdir()  # checked empty before the run; fails loudly if filled since
    os.rename(stage, output)


def _assemble(
    kernel: str, match: str, dispatch: int, command: list[str], output: Path, run_dir: Path,
    source_dir, build_dir, force: bool,
) -> ExtractResult:
    stage = run_dir / "reproducer"
    record = build_reproducer(stage, run_dir / "capture", run_dir, kernel, match, dispatch, command, source_dir,
                              build_dir)
    replace_output(stage, output, force)
    return ExtractResult(
        reproducer_dir=output, capture=Capture.open(output), run_dir=run_dir,
        sources=record["sources"], triton=record["triton"], notes=record["notes"],
    )


def _attach(module_name: str, function: str, notes: list[str], *args) -> dict | None:
    """Call an optional attach step; its failure is a note, never the loss of the capture."""
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        notes.append(f"{module_name} is not part of this kerncap build; {function} was skipped")
        return None
    try:
        return getattr(module, function)(*args)
    except KerncapError as exc:
        notes.append(f"{function}: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""))
    except Exception as exc:  # a bug there must not cost the user the capture
        notes.append(f"{function} failed ({type(exc).__name__}: {exc}); the capture itself is complete")
    return None


# -- failure: saying why ---------------------------------------------------------------------


def diagnose_failure(
    kernel: str, match: str, dispatch: int, procs: list[dict], outcome: AppOutcome, run_dir: Path,
    timeout: float | None, selection: Selection | None = None,
) -> KerncapError:
    """The one error that best explains why no capture was written."""
    cmd = command_text(outcome.command)
    target = f"kernel {kernel!r} (--match {match})"
    if selection is not None and stop_requested(run_dir):
        found = diagnose_selection(selection, procs, target)
        if found is not None:
            return found

    for kind in ("disk", "capture_failed"):
        found = report_errors(procs, kind)
        if found:
            pid, error = found[0]
            msg = error.get("message", "")
            if kind == "disk":
                return KerncapError(
                    f"the capture of {target} in process {pid} failed writing to disk: {msg}; "
                    "the partial capture was removed and the app was not harmed",
                    f"free space under {run_dir.parent} or choose an --output on another file system",
                )
            stopped = report_errors(procs, "app_stopped")
            return KerncapError(
                f"the capture of {target} in process {pid} failed: {msg}"
                + (f"; {stopped[0][1].get('message', '')}" if stopped else ""),
                "see docs/interposer.md; rerun with --keep-run-dir and look at the run directory's interposer.log",
            )
    found = report_errors(procs, "graph_refused")
    if found:
        pid, error = found[0]
        return KerncapError(
            f"{target} runs in a CUDA graph kerncap cannot capture it from (process {pid}): {error.get('message', '')}",
            "docs/graphs.md lists what kerncap follows in graphs; for this run, launch the target outside that "
            "construct or pick a --dispatch before it",
        )
    if selection is not None:
        found = diagnose_selection(selection, procs, target)
        if found is not None:
            return found
    matches = [int(p.get("target_matches") or 0) for p in procs]
    refused_nccl = sorted({n for p in procs for n in p.get("refused_kernels") or []})
    if refused_nccl and not any(matches):
        return KerncapError(
            f"{target} matches only NCCL's own kernels ({', '.join(short_kernel_name(n, 60) for n in refused_nccl[:3])}):"
            " a collective waits for its peer ranks, so one rank's NCCL kernel cannot run alone and is never captured",
            "capture your own kernels around the collective instead; narrow the pattern (kerncap profile lists them)",
        )
    subscriber = report_errors(procs, "cupti_subscriber")
    if subscriber and not any(matches):
        return cupti_subscriber_error(subscriber, f"{target} could not be captured")
    partial = _partial_capture(run_dir)
    if partial is not None:
        where, log = partial
        return KerncapError(
            f"the capture of {target} did not finish ({where} left incomplete); the app {outcome.describe_exit()}"
            + (f"; interposer.log ends with:\n{log}" if log else ""),
            "rerun with --keep-run-dir to inspect the partial capture",
        )
    if outcome.timed_out:
        seen = f"{max(matches)} matching dispatches seen" if any(matches) else "the kernel was not seen"
        return KerncapError(
            f"`{cmd}` did not finish within --timeout {timeout:g} s ({seen}); the app was stopped",
            "raise --timeout, or pick an earlier --dispatch",
        )
    if outcome.failed:
        return KerncapError(
            f"`{cmd}` {outcome.describe_exit()} before {target} was captured; its stderr ended with:\n"
            + outcome.stderr_excerpt(),
            "fix the app so it runs to completion without kerncap first",
        )
    if not procs:
        return KerncapError(
            f"no process of `{cmd}` loaded the capture library (no proc-*.json was written)",
            "does the app use CUDA? The driver loads the library only in processes that initialise CUDA",
        )
    graphs = report_errors(procs, "graph_unreached")
    in_graphs = f"; in CUDA graphs: {graphs[0][1].get('message', '')}" if graphs else ""
    if not any(matches):
        return KerncapError(
            f"{target} never ran in `{cmd}`{in_graphs}" + _closest_listing(kernel, procs),
            "pass one of these names (or a substring of it); `kerncap profile -- CMD` lists every kernel",
        )
    if max(matches) <= dispatch:
        return KerncapError(
            f"{target} ran only {max(matches)} time(s) in any one process{in_graphs}; --dispatch {dispatch} asks for "
            f"dispatch #{dispatch} (counted from 0, per process, eager launches and graph nodes alike, excluding "
            "autotuner benchmark runs)",
            f"use --dispatch between 0 and {max(matches) - 1}",
        )
    return KerncapError(
        f"{target} matched {max(matches)} dispatches but no capture was written",
        "rerun with --keep-run-dir and look at the proc-*.json files of the run directory",
    )


def _partial_capture(run_dir: Path) -> tuple[Path, str] | None:
    for d in sorted(run_dir.glob("capture*.partial-*")):
        log = d / "interposer.log"
        try:
            tail = "\n".join("    | " + line for line in log.read_text(errors="replace").splitlines()[-10:])
        except OSError:
            tail = ""
        return d.name, tail
    return None


def closest_kernel_names(pattern: str, names: Sequence[str], n: int = 5) -> list[str]:
    """The `n` names most like `pattern`: names containing it first, then by similarity
    of the pattern to the whole name or to its short form (no namespace/arguments)."""
    p = pattern.lower()

    def score(name: str) -> float:
        low = name.lower()
        base = short_kernel_name(name, width=1000).lower()
        ident = re.split(r"::", base.split("<", 1)[0])[-1]
        ratio = max(difflib.SequenceMatcher(None, p, s).ratio() for s in {low, base, ident})
        return ratio + (1.0 if p in low else 0.0)

    return sorted(set(names), key=lambda s: (-score(s), s))[:n]


def _closest_listing(kernel: str, procs: list[dict]) -> str:
    counts: dict[str, int] = {}
    for p in procs:
        for name, count in (p.get("kernels_seen") or {}).items():
            counts[name] = counts.get(name, 0) + int(count or 0)
    if not counts:
        return " (the app launched no kernels at all)"
    best = closest_kernel_names(kernel, list(counts))
    lines = "\n".join(
        f"    {name if len(name) <= 120 else short_kernel_name(name, 120)}  ({counts[name]} launches)" for name in best
    )
    return f"; the closest of the {len(counts)} kernel names it launched:\n{lines}"
