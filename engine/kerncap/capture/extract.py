"""`kerncap extract`: run the app, capture one dispatch of one kernel, write a reproducer.

Nothing is left half-written: the app writes into a run directory next to the output
(`<output>.run-<pid>`, same file system), the reproducer is assembled there and moved
to `<output>` with one rename once it is complete. On any failure the run directory is
removed and `<output>` is untouched.

Several dispatches (a list, or one per shape bucket with `buckets=True`) are captured in
one run of the app into a reproducer set (kerncap.capture.set_extract). `selection`
restricts which launches count: NVTX ranges, the process (rank / pid), the device
(kerncap.capture.selection).
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kerncap.capture.assemble import build_reproducer, captured_dirs, replace_output
from kerncap.capture.run import (
    AppOutcome,
    OutputSink,
    app_environment,
    check_command,
    check_intercept,
    command_text,
    cupti_subscriber_error,
    read_reports,
    report_errors,
    run_app,
)
from kerncap.capture.selection import Selection, diagnose as diagnose_selection, nvtx_environment, processes_note
from kerncap.capture.selection import stop_requested
from kerncap.capture import sequence_extract
from kerncap.capture.sequence_extract import SequenceRequest
from kerncap.capture.set_extract import SetExtractResult, assemble_set
from kerncap.core.fsio import find_leftovers
from kerncap.core.native import inject_library
from kerncap.core.units import short_kernel_name
from kerncap.errors import KerncapError, UsageError
from kerncap.prune.pruner import prune_reproducer
from kerncap.reproducer.format import Capture
from kerncap.reproducer.prune_report import PruneReport

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
    intercept: str | None = None,
    sequence: SequenceRequest | None = None,
) -> ExtractResult | SetExtractResult:
    """Capture dispatch `dispatch` (0-based, counted per process among launches whose
    name matches `kernel`) of the app `command` into the reproducer directory `output`.

    `env` adds to (or overrides) the current environment of the app. `prune`: then
    shrink the reproducer to its pointer closure if replay validates it (kerncap.prune.pruner);
    the verdict is `result.prune`. A list of dispatches, or `buckets` (the first
    dispatch of every launch signature), captures a reproducer set in one run
    (kerncap.capture.set_extract.SetExtractResult). `selection`: which launches count at all.
    `intercept`: how driver calls reach kerncap, "entry" (interposed entry points, CUPTI
    only at the dispatch; docs/interposer.md) or "cupti" (callbacks); None:
    KERNCAP_INTERCEPT, else entry. `sequence`: capture a window of launches instead of one
    dispatch (kerncap.capture.sequence_extract; docs/sequences.md).
    """
    start = time.monotonic()
    command = list(command)
    output = Path(output).absolute()
    dispatches = dispatch_list(dispatch)
    set_mode = buckets or len(dispatches) > 1
    selection = selection or Selection()
    _check_choice(kernel, match, dispatches, set_mode, selection, sequence, prune)
    env = _check_app(command, cwd, env, intercept, source_dir, build_dir)
    _check_output_free(output, force)
    stale = [left.advice() for left in find_leftovers(output.parent, output.name)]
    created_parents, run_dir = _make_run_dir(output)

    succeeded = False
    try:
        settings = _settings(kernel, match, dispatches, keep_running, selection, sequence, set_mode, buckets)
        outcome = run_app(
            command, env=app_environment(command, mode="capture", run_dir=run_dir, settings=settings, env=env),
            cwd=cwd, timeout=timeout, output=output_sink,
            stop_when=_done_check(run_dir, dispatches, set_mode, buckets, keep_running),
            # A set's counts and times are written at the app's exit: let a Python app unwind.
            timeout_signals=(signal.SIGINT, signal.SIGTERM) if set_mode else (signal.SIGTERM,))
        procs = read_reports(run_dir, "proc")
        if not captured_dirs(run_dir):
            raise (sequence is not None and sequence_extract.diagnose(sequence, kernel, dispatches[0], selection, procs)
                   or diagnose_failure(kernel, match, dispatches[0], procs, outcome, run_dir, timeout, selection))

        try:
            result = _assemble_kind(kernel, match, dispatches, buckets if set_mode else None, sequence, command,
                                    output, run_dir, source_dir, build_dir, force, env, procs)
        except OSError as exc:
            raise _unwritable(output, exc) from None
        result.outcome = outcome
        result.notes[:0] = stale
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


# How long to wait, once the manifest is there, for the capturing process's own report
# (it writes proc-<pid>.json right after the manifest, then exits).
PROC_REPORT_GRACE_S = 2.0


def _check_choice(kernel: str, match: str, dispatches: list[int], set_mode: bool, selection: Selection,
                  sequence: SequenceRequest | None, prune: bool) -> None:
    """Which launches to capture, checked before anything runs (UsageError)."""
    if sequence is not None:
        sequence.check(kernel, selection, dispatches, set_mode)
    if sequence is None or kernel:
        _check_pattern(kernel, match, dispatches[0])
    selection.check()
    if set_mode and prune:
        raise UsageError("--prune works on one reproducer, not on a set", "prune a member: kerncap prune SET/members/N")


def _check_app(command: list[str], cwd, env: dict[str, str] | None, intercept: str | None, source_dir,
               build_dir) -> dict[str, str] | None:
    """Everything about the app checked before anything is created; the app's added
    environment (with the intercept path asked for)."""
    inject_library()  # fail before anything is created if the capture library is missing
    if intercept is not None:
        env = {**(env or {}), "KERNCAP_INTERCEPT": intercept}
    base_env = {**os.environ, **(env or {})}
    check_intercept(base_env)
    check_command(command, cwd=cwd, env=base_env)
    if source_dir is not None and not Path(source_dir).is_dir():
        raise KerncapError(f"--source-dir {source_dir} is not a directory", "pass the root of the app's source tree")
    if build_dir is not None and not Path(build_dir).is_dir():
        raise KerncapError(f"--build-dir {build_dir} is not a directory", "pass the app's build directory")
    return env


def _make_run_dir(output: Path) -> tuple[list[Path], Path]:
    """The parents created for `output` and the staging directory the capture writes
    (`<name>.run-<pid>`, docs/architecture.md)."""
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
    return created_parents, run_dir


def _settings(kernel: str, match: str, dispatches: list[int], keep_running: bool, selection: Selection,
              sequence: SequenceRequest | None, set_mode: bool, buckets: bool) -> dict[str, str]:
    """The capture library's KERNCAP_* settings for this extraction."""
    settings = {
        "KERNCAP_KERNEL": kernel,
        "KERNCAP_MATCH": match,
        "KERNCAP_DISPATCH": ",".join(map(str, dispatches)),
        "KERNCAP_KEEP_RUNNING": "1" if keep_running else "0",
        **selection.settings(),
        **(sequence.settings() if sequence is not None else {}),
    }
    if set_mode:
        settings["KERNCAP_SET"] = "1"
        settings["KERNCAP_BUCKETS"] = "1" if buckets else "0"
    if selection.nvtx is not None:
        settings.update(nvtx_environment(inject_library()))
    return settings


def _assemble_kind(kernel: str, match: str, dispatches: list[int], buckets: bool | None,
                   sequence: SequenceRequest | None, command: list[str], output: Path, run_dir: Path, source_dir,
                   build_dir, force: bool, env: dict[str, str] | None, procs) -> ExtractResult | SetExtractResult:
    """The reproducer the run captured: a sequence, a set (`buckets` not None) or one dispatch."""
    if sequence is not None:
        notes = sequence_extract.assemble_sequence(kernel, match, dispatches[0], command, output, run_dir,
                                                   source_dir, build_dir, force, env, procs, sequence)
        return ExtractResult(reproducer_dir=output, capture=Capture.open(output), run_dir=run_dir, notes=notes)
    if buckets is not None:
        return assemble_set(kernel, match, dispatches, buckets, command, output, run_dir, source_dir, build_dir,
                            force, procs, env)
    return _assemble(kernel, match, dispatches[0], command, output, run_dir, source_dir, build_dir, force, env, procs)


def _unwritable(output: Path, exc: OSError) -> KerncapError:
    return KerncapError(f"the capture succeeded but the reproducer {output} could not be written: "
                        f"{exc.strerror or exc} ({exc.filename or output})",
                        "free space or fix permissions and extract again; --keep-run-dir keeps the raw capture")


def _capture_written(run_dir: Path):
    """stop_when for run_app: the capture is complete and the capturing process has written
    its proc-<pid>.json (its launch counts go into launches.json), or a grace period passed."""
    manifest = run_dir / "capture" / "manifest.json"
    seen_at: list[float] = []

    def done() -> bool:
        if not manifest.is_file():
            return False
        if not seen_at:
            seen_at.append(time.monotonic())
        try:
            pid = int((run_dir / "capture.lock").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pid = None
        if pid is not None and (run_dir / f"proc-{pid}.json").is_file():
            return True
        return time.monotonic() - seen_at[0] >= PROC_REPORT_GRACE_S

    return done


def _prune(result: ExtractResult) -> None:
    """Prune the fresh reproducer; a failure to prune is a note, never the loss of the capture
    (prune_reproducer leaves the full reproducer in place whenever it does not finish)."""
    try:
        result.prune = prune_reproducer(result.reproducer_dir)
    except KerncapError as exc:
        result.notes.append(f"not pruned: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""))
    except Exception as exc:  # a bug there must not cost the user the capture
        result.notes.append(f"not pruned: {type(exc).__name__}: {exc}; the full reproducer is complete")
    result.capture = Capture.open(result.reproducer_dir)


def outcome_notes(outcome: AppOutcome, procs: list[dict]) -> list[str]:
    """How the app ended after the capture, and which processes the selection left out."""
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
    """When the app may be stopped: its capture(s) are on disk (one capture: with the
    capturing process's report; a bucket set needs the whole run), or the interposer
    asked for it (a selection this job cannot meet)."""
    written = _capture_written(run_dir) if not set_mode else None
    wanted = [] if buckets else [run_dir / f"capture-{d}" / "manifest.json" for d in dispatches]
    last = max(dispatches, default=0)

    def timed() -> bool:
        # The bucket table written after the last capture (it counts past it): the members'
        # weights come from it, so stopping the app before it lands gave them equal shares.
        try:
            return any(int(r.get("dispatches_counted") or 0) > last for r in read_reports(run_dir, "buckets"))
        except (KerncapError, ValueError, TypeError):
            return False

    def done() -> bool:
        if stop_requested(run_dir):
            return True
        if keep_running:
            return False
        if written is not None:
            return written()
        return bool(wanted) and all(p.is_file() for p in wanted) and timed()

    return done


# -- input checks --------------------------------------------------------------------------


def dispatch_list(dispatch: int | str | Sequence[int]) -> list[int]:
    """3 -> [3]; "3,17,40" or [40, 3, 17] -> [3, 17, 40] (sorted, unique)."""
    if isinstance(dispatch, str):
        try:
            values = [int(x) for x in dispatch.split(",")]
        except ValueError:
            raise UsageError(f"--dispatch {dispatch!r} is not a number or a comma-separated list of numbers",
                               "e.g. --dispatch 3 or --dispatch 3,17,40") from None
    elif isinstance(dispatch, int):
        values = [dispatch]
    else:
        values = [int(x) for x in dispatch]
    if not values:
        raise UsageError("--dispatch lists no dispatch", "e.g. --dispatch 3,17,40")
    for v in values:
        if v < 0:
            raise UsageError(f"--dispatch {v} is negative", "dispatches are counted from 0")
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
        raise UsageError("no kernel name given", "run `kerncap profile -- CMD` to see the kernel names")
    _refuse_nccl(kernel, match)
    if match not in MATCH_MODES:
        raise UsageError(f"unknown --match mode {match!r}", f"use one of: {', '.join(MATCH_MODES)}")
    if match == "regex":
        try:
            re.compile(kernel)
        except re.error as exc:
            raise UsageError(f"--match regex: {kernel!r} is not a valid regular expression ({exc})",
                               "fix the pattern, or use --match substring") from None
    if dispatch < 0:
        raise UsageError(f"--dispatch {dispatch} is negative", "dispatches are counted from 0")


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


def _assemble(
    kernel: str, match: str, dispatch: int, command: list[str], output: Path, run_dir: Path,
    source_dir, build_dir, force: bool, env: dict[str, str] | None = None, procs: list[dict] | None = None,
) -> ExtractResult:
    stage = run_dir / "reproducer"
    record = build_reproducer(stage, run_dir / "capture", run_dir, kernel, match, dispatch, command, source_dir,
                              build_dir, env, procs)
    replace_output(stage, output, force)
    return ExtractResult(
        reproducer_dir=output, capture=Capture.open(output), run_dir=run_dir,
        sources=record["sources"], triton=record["triton"], notes=record["notes"],
    )


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

    found = _reported_failure(target, procs, run_dir)
    if found is not None:
        return found
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
    # Through CUPTI the subscription fails at start (nothing matches); through entry
    # points it fails at the dispatch, when kerncap subscribes to read the cubin.
    subscriber = report_errors(procs, "cupti_subscriber")
    if subscriber:
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
    ran = _runs_of(kernel, match, procs)
    if not any(matches) and ran:
        return _ran_uncounted(target, cmd, ran, procs, in_graphs)
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


def _reported_failure(target: str, procs: list[dict], run_dir: Path) -> KerncapError | None:
    """What the capture library itself reported: a disk error, a failed capture, a graph
    it cannot capture from."""
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
    return None


def _runs_of(kernel: str, match: str, procs: list[dict]) -> dict[str, int]:
    """The kernels the app launched whose name `kernel` matches as --match `match` does
    (kernels_seen holds demangled names: an exact pattern is compared demangled too)."""
    if match == "regex":
        try:
            pattern = re.compile(kernel)
        except re.error:
            return {}
        hit = lambda name: pattern.search(name) is not None  # noqa: E731
    elif match == "exact":
        from kerncap.sources.names import demangle

        wanted = {kernel, demangle(kernel)}
        hit = lambda name: name in wanted  # noqa: E731
    else:
        hit = lambda name: kernel in name  # noqa: E731
    out: dict[str, int] = {}
    for p in procs:
        for name, count in (p.get("kernels_seen") or {}).items():
            if count and hit(name):
                out[name] = out.get(name, 0) + int(count)
    return out


def _ran_uncounted(target: str, cmd: str, ran: dict[str, int], procs: list[dict], in_graphs: str) -> KerncapError:
    """The target's kernel ran but no launch of it was a dispatch: say which launches those
    were (never that it never ran)."""
    names = ", ".join(f"{short_kernel_name(n, 120)} ({c} launches)" for n, c in sorted(ran.items(), key=lambda x: -x[1]))
    autotuner = sum(int((p.get("not_counted") or {}).get("autotuner") or 0) for p in procs)
    recorded = sum(int((p.get("not_counted") or {}).get("recorded_into_graphs") or 0) for p in procs)
    why = []
    if autotuner:
        why.append(f"{autotuner} were XLA autotuner candidate runs, which are not the app's dispatches")
    if recorded:
        why.append(f"{recorded} were recorded into CUDA graphs by stream capture (they run, and count, at the "
                   "graph's launches)")
    reason = "; ".join(why) if why else "kerncap counted none of them as a dispatch"
    return KerncapError(
        f"{target} ran in `{cmd}` ({names}) but no launch of it counted as a dispatch: {reason}{in_graphs}",
        "a kernel that runs inside CUDA graphs is counted at each launch of its executable graph (docs/graphs.md); "
        "`kerncap profile -- CMD` shows where it ran; KERNCAP_XLA_AUTOTUNE_MS=0 counts XLA's autotuner runs too",
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
