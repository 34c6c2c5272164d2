"""Compile the captured kernel's translation unit to a cubin: reduced when possible,
the whole TU otherwise, always with the captured module id.

    preprocess (gcc -E) ─┬─ reduce ─ cicc ─ ptxas ─ check ──▶ cubin      ("reduced")
                         └────────── cicc ─ ptxas ─────────▶ cubin      ("full")

The reduced path compiles only what the captured kernel needs (kerncap.recompile.devcompile.reduce);
the preprocessing is shared, so falling back costs only the full cicc + ptxas. A reduced
compile that fails is retried in full, and the result says so — unless every error it
reports is a hard error in the user's own code (a typo in the kernel): blanking host
bodies removes uses, never declarations, so the whole TU reports the same errors, and
the edit loop should not wait for it.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kerncap.recompile.devcompile import instantiate, phases
from kerncap.recompile.devcompile.module_id import module_id
from kerncap.recompile.devcompile.ptx_reach import globals_reached
from kerncap.recompile.devcompile.reduce import INSTANTIATION_FILE, Reduction, ReduceError, reduce_tu
from kerncap.core.fsio import scratch
from kerncap.errors import KerncapError
from kerncap.recompile.trust import directs_files, require_trust, resolve_program, review_steps, tool_env

# Diagnostics that blanking host code can raise in code it leaves (a static helper, a
# file-scope variable now referenced by nothing) and that -Werror would make fatal.
_REDUCED_DIAG_SUPPRESS = "--diag_suppress=177,550"
# "file(line): error: ..." (an error) or "file(line): error #177-D: ..." (a warning that
# -Werror promoted: discretionary, so possibly caused by the reduction).
_ERROR_AT = re.compile(r"^(.*?)\((\d+)\): (?:catastrophic )?error( #\d+-D)?", re.M)

MODES = ("auto", "reduced", "full")


class CompileFailed(KerncapError):
    """The compiler rejected the source; `log` is its output."""

    def __init__(self, message: str, hint: str, log: str):
        super().__init__(message, hint)
        self.log = log


@dataclass
class Build:
    cubin: bytes
    mode: str  # "reduced" | "full" | "nvcc" (nvcc run as one step: its steps were not recognized)
    timing: phases.Timing
    notes: list[str] = field(default_factory=list)  # what the user must know: a fallback and why
    log: str = ""
    summary: str = ""  # what the reduction did
    # the module globals the kernel's code can reach (ptx_reach), None: not known (nvcc run
    # as one step, no PTX kept)
    reach: frozenset[str] | None = None


@dataclass
class Request:
    nvcc: list[str]  # compiler + flags, without -o and the source
    tu: Path  # the reproducer's copy of the translation unit
    cwd: Path
    user_root: Path  # the reproducer's source/: code there may be reduced
    kernel: str  # mangled name of the captured kernel
    captured_names: list[str]  # symbol names of the captured cubin (module id)
    accept: object = None  # callable(cubin bytes, mode) raising KerncapError when unusable
    mode: str = "auto"
    trust: bool = False  # run steps outside the local toolkit (kerncap.recompile.trust.review_steps)
    reproducer: Path | None = None  # where the sources come from (no step may run a program from there)
    # split cicc's time into the front end and NVVM (--device-time-trace): on ggml's mmvq.cu
    # the trace costs ~0.12 s of cicc's 0.9 s, so only `recompile --verbose` asks for it
    split: bool = False


def compile_cubin(req: Request) -> Build:
    if req.mode not in MODES:
        raise KerncapError(f"unknown recompile mode {req.mode!r}", f"use one of {', '.join(MODES)}")
    with scratch("build") as work:  # the preprocessed source and the compilers' temporary files
        return _compile(req, work)


def _compile(req: Request, work: Path) -> Build:
    out = work / "out.cubin"
    argv = [*req.nvcc, "-cubin", "-o", str(out), str(req.tu)]
    if directs_files(req.nvcc[1:]):
        return _plain_nvcc(req, argv, out, "the recorded flags say where nvcc keeps its files: compiled with nvcc "
                                           "as one step, as recorded")
    try:
        plan = phases.plan(argv, req.cwd, work, env=tool_env(req.reproducer or req.user_root, work))
    except phases.PlanError as exc:
        return _plain_nvcc(req, argv, out, f"nvcc's steps were not recognized ({exc}): compiled with nvcc as one step")
    # kerncap runs these programs itself, each by the absolute path reviewed here (nvcc's
    # dry run sets the PATH its steps are found on; relative entries never count).
    path = plan.env.get("PATH")
    steps = {step.kind: resolve_program(step.argv[0], path) for step in (plan.preprocess, plan.cicc, plan.ptxas)}
    if not req.trust:  # only the local toolkit's
        require_trust(review_steps(req.nvcc[0], steps, req.reproducer or req.user_root), argv,
                      req.user_root / "build.json")
    for step in (plan.preprocess, plan.cicc, plan.ptxas):
        step.argv[0] = steps[step.kind] or step.argv[0]
    timing = phases.Timing()
    notes: list[str] = []
    try:
        seconds, log = phases.run_step("preprocess", plan.preprocess.argv, plan)
    except phases.StepFailed as exc:
        raise _failed(req, exc.log) from None
    timing.add("preprocess", seconds)

    mid = module_id(req.captured_names)
    id_file = None
    if mid:
        id_file = work / "captured.module_id"
        id_file.write_text(mid)

    if req.mode != "full":
        reduced = _reduce(req, plan, work, timing)
        if isinstance(reduced, str):
            if req.mode == "reduced":
                raise KerncapError(f"the translation unit cannot be reduced: {reduced}", "recompile without --reduced")
            notes.append(f"compiled the whole translation unit: {reduced}")
        else:
            attempt = phases.Timing()
            try:
                data, log = _cicc_ptxas(plan, reduced.path, id_file, [_REDUCED_DIAG_SUPPRESS], attempt, work,
                                        req.split)
                if req.accept is not None:
                    req.accept(data, "reduced")
                timing.phases += attempt.phases
                return Build(data, "reduced", timing, notes, log, reduced.summary, _reach(plan, req.kernel))
            except phases.StepFailed as exc:
                if req.mode == "reduced" or _users_own_errors(exc.log, reduced.user_file):
                    raise _failed(req, exc.log, reduced=True) from None
                attempt.add(exc.kind, exc.seconds)
                notes.append(f"the reduced compile failed ({_why_reduced_failed(exc.log, reduced)}); "
                             "compiled the whole translation unit instead")
            except KerncapError as exc:
                if req.mode == "reduced":
                    raise
                notes.append(f"the reduced compile's cubin was not usable ({exc.message.splitlines()[0]}); "
                             "compiled the whole translation unit instead")
            timing.add("reduced attempt", attempt.seconds())
    try:
        data, log = _cicc_ptxas(plan, plan.ii, id_file, [], timing, work, req.split)
    except phases.StepFailed as exc:
        raise _failed(req, exc.log) from None
    if req.accept is not None:
        req.accept(data, "full")
    return Build(data, "full", timing, notes, log, reach=_reach(plan, req.kernel))


def _reach(plan: phases.Plan, kernel: str) -> frozenset[str] | None:
    """The module globals the kernel's PTX reaches (apply copies only those)."""
    try:
        return globals_reached(plan.ptx.read_text(errors="surrogateescape"), kernel)
    except OSError:
        return None


@dataclass
class _Reduced:
    path: Path
    reduction: Reduction
    summary: str
    user_file: object  # callable(path) -> bool


def _reduce(req: Request, plan: phases.Plan, work: Path, timing: phases.Timing) -> _Reduced | str:
    """The reduced .ii, or why there is none."""
    start = time.perf_counter()
    spelling = instantiate.spell(req.kernel)
    if spelling.reason and not spelling.keep:
        return f"the captured instance cannot be instantiated alone: {spelling.reason}"
    root = str(req.user_root.resolve()) + "/"

    def user_file(path: str) -> bool:
        return path.startswith(root)

    try:
        text = plan.ii.read_text(errors="surrogateescape")
        reduction = reduce_tu(text, user_file, spelling.base, spelling.keep, spelling.instantiation)
    except ReduceError as exc:
        return f"the preprocessed source could not be followed ({exc})"
    path = work / "reduced.ii"
    path.write_text(reduction.text, errors="surrogateescape")
    timing.add("reduce", time.perf_counter() - start)
    what = "explicit instantiation" if spelling.instantiation else (
        f"instantiated by {', '.join(sorted(spelling.keep))}" if spelling.keep else "not a template")
    if reduction.instantiations_dropped:
        what += (f" (the source's own {reduction.instantiations_dropped} explicit kernel instantiation"
                 f"{'s' if reduction.instantiations_dropped > 1 else ''} left out)")
    unused = (f", {reduction.unused} functions nothing kept names and {reduction.asserts} static_asserts left out"
              if reduction.unused or reduction.asserts else "")
    return _Reduced(path, reduction, f"reduced translation unit: {reduction.stubbed} function bodies blanked "
                                     f"(host code, other kernels){unused}, the captured kernel {what}",
                    user_file)


def _cicc_ptxas(plan: phases.Plan, ii: Path, id_file: Path | None, extra: list[str], timing: phases.Timing,
                work: Path, split: bool = False) -> tuple[bytes, str]:
    trace = work / "cicc-trace.json" if split else None
    if trace is not None:
        trace.unlink(missing_ok=True)
    plan.ptx.unlink(missing_ok=True)
    plan.cubin.unlink(missing_ok=True)
    seconds, log1 = phases.run_step("cicc", phases.cicc_argv(plan, ii, id_file, extra, trace), plan)
    parts = phases.cicc_split(trace) if trace is not None else None
    if parts:
        timing.add("front end", parts["front end"])
        timing.add("PTX", max(0.0, seconds - parts["front end"]))  # NVVM: optimizer + PTX code generation
    else:
        timing.add("front end + PTX", seconds)
    seconds, log2 = phases.run_step("ptxas", plan.ptxas.argv, plan)
    timing.add("ptxas", seconds)
    return plan.cubin.read_bytes(), (log1 + log2).strip()


def _plain_nvcc(req: Request, argv: list[str], out: Path, note: str) -> Build:
    timing = phases.Timing()
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=req.cwd, env=tool_env(req.reproducer or req.user_root, out.parent),
                              capture_output=True,
                              text=True, errors="surrogateescape", check=False)
    except OSError as exc:
        raise KerncapError(f"cannot run {argv[0]}: {exc.strerror}", "check the CUDA toolkit installation") from None
    timing.add("nvcc", time.perf_counter() - start)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise _failed(req, log)
    data = out.read_bytes()
    if req.accept is not None:
        req.accept(data, "nvcc")
    return Build(data, "nvcc", timing, [note], log.strip())


def _users_own_errors(log: str, user_file) -> bool:
    """Every error is a hard error located in the user's files (so the whole TU has it
    too); none is in the explicit instantiation or a promoted warning."""
    if INSTANTIATION_FILE in log:
        return False
    errors = _ERROR_AT.findall(log)
    return bool(errors) and all(user_file(path) and not promoted for path, _, promoted in errors)


def _why_reduced_failed(log: str, reduced: _Reduced) -> str:
    """The first error, saying whose code it is in when it is not the user's."""
    first = _first_error(log)
    if INSTANTIATION_FILE in first and reduced.reduction.instantiation:
        return f"kerncap's explicit instantiation of the captured kernel, {reduced.reduction.instantiation!r}, " \
               f"was rejected: {first.replace(INSTANTIATION_FILE, 'instantiation', 1)}"
    path = _ERROR_AT.match(first)
    if path and not reduced.user_file(path.group(1)):
        return f"in a header outside the reproducer's sources: {first}"
    return first


def _first_error(log: str) -> str:
    for line in log.splitlines():
        if ": error" in line:
            return line.strip()[:200]
    return (log.strip().splitlines() or ["no output"])[0][:200]


def _failed(req: Request, log: str, reduced: bool = False) -> CompileFailed:
    where = " (reduced to the captured kernel; `kerncap recompile --full` compiles the whole file)" if reduced else ""
    return CompileFailed(f"nvcc failed to compile {req.tu}{where}:\n{log.rstrip()}",
                         "fix the source and run `kerncap recompile` again", log)
