"""`kerncap apply`: the unmodified app, with a variant standing in for the captured kernel
(issue 46, docs/apply.md).

The app runs under the interposer in apply mode (KERNCAP_MODE=apply, through the
preloaded entry points): every launch of the captured function (its mangled name, in a
module whose cubin has the captured cubin's sha256) is sent to the variant's kernel of
that name, loaded once per context, with the app's grid, block, shared memory, attributes
and arguments; the module's globals are copied into the variant's before each launch.
Each process writes `apply-<pid>.json` (and `profile-<pid>.json` when timed).

`--check` runs the app as is and with the variant, fingerprints what every launch of the
kernel wrote (the buffers its written parameters reach, read back after the launch) and
names the first launch that differs; a mismatch is then dumped from both runs to count
the bytes. Timing runs the app R times each way, interleaved.

What to run and how is one `ApplyRequest` (its options declared once, kerncap.core.option):
the CLI renders it into `kerncap apply`'s flags, MCP into its `apply` tool, and both hand
it to `Session.apply` (kerncap.session), which also records the outcome on the History row
of the variant applied (`in_app`, shown by the workbench).
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kerncap.capture.run import (OutputSink, app_environment, check_command, preload_entry_points, read_reports,
                                 run_app)
from kerncap.core.native import entry_library
from kerncap.core.option import Option, check_fields
from kerncap.errors import EXIT_CANNOT_RUN, EXIT_FAILED, KerncapError, UsageError
from kerncap.recompile.devcompile.module_id import compiler_constant
from kerncap.replay.tools import Cancelled
from kerncap.reproducer.format import Capture
from kerncap.reproducer.history import History
from kerncap.reproducer.variants import read_reach

EXIT_REFUSED = 4  # the variant cannot stand in for the captured kernel (docs/cli.md)

REFUSAL_HINTS = {
    "variant_lacks_kernel": "build the variant from the reproducer's source (kerncap recompile DIR) so it keeps the "
                            "kernel's name",
    "param_layout": "keep the kernel's parameter list as captured",
    "global_size": "keep the __constant__/__device__ variables' types as captured",
    "variant_load": "rebuild the variant for this GPU (kerncap recompile DIR uses the captured flags)",
    "variant_unreadable": "check the path given to --cubin",
    "graphs": "run an app that launches the kernel directly; substitution inside CUDA graphs is not supported yet",
    "not_launched": "check the command: it must run the code the reproducer was captured from",
}


IDENTIFY_MODES = ("cubin", "name")
# One run of the app may take this long before it is stopped (every front end: the CLI's
# --timeout, MCP's timeout_s, as MCP's profile and extract already did).
APP_TIMEOUT_S = 900.0


def dispatch_list(text: str) -> tuple[int, ...]:
    """--dispatch "0,3" -> (0, 3): launch numbers, from 0 (ValueError with the words)."""
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"{text!r} is not a list of launch numbers, e.g. 0,3") from None
    if any(n < 0 for n in out):
        raise ValueError(f"{text!r} holds a negative launch number (launches count from 0)")
    return tuple(out)


APPLY_CUBIN = Option("cubin", "--cubin", str, None, "the variant cubin (one of --cubin and --variant)", metavar="V",
                     nullable=True)
APPLY_VARIANT = Option("variant", "--variant", int, None, "the variant of history.json's row N (one of --cubin and "
                       "--variant); the outcome is recorded on that row", minimum=1, metavar="N", nullable=True)
APPLY_DISPATCH = Option("dispatch", "--dispatch", str, None, "substitute only these launches (from 0, as extract "
                        "counts; none: every launch)", metavar="N[,M…]", nullable=True, convert=dispatch_list,
                        mcp_kind=list[int])
APPLY_CHECK = Option("check", "--check", bool, False, "run as is and with the variant; compare each launch's "
                     "written buffers byte for byte")
COMPARE_OUTPUT = Option("compare_output", "--compare-output", str, (), "with --check: also compare this file the "
                        "app writes (repeatable; relative to its working directory)", metavar="PATH", many=True)
APPLY_RUNS = Option("runs", "--runs", int, 5, "timed runs of the app each way, interleaved (0: no timing)",
                    minimum=0, maximum=1000, metavar="R")
IDENTIFY = Option("identify", "--identify", str, "cubin", "identify the kernel by its cubin's sha256 and name, or by "
                  "name alone", choices=IDENTIFY_MODES)
APP_TIMEOUT = Option("timeout", "--timeout", float, APP_TIMEOUT_S, "stop each run of the app after S seconds",
                     above=0.0, metavar="S", mcp_name="timeout_s")


@dataclass(frozen=True)
class ApplyRequest:
    """The app's `command` (run in `cwd`) with a variant (`cubin`, or History row
    `variant`) standing in for the captured kernel; `check` compares what every launch
    wrote, `runs` times it. `command`, `cwd` and `env` are the front ends' own arguments
    (after `--`, MCP's `command`), not options."""

    command: tuple[str, ...] = ()
    cubin: str | None = APPLY_CUBIN.field()
    variant: int | None = APPLY_VARIANT.field()
    dispatch: tuple[int, ...] | None = APPLY_DISPATCH.field()
    check: bool = APPLY_CHECK.field()
    compare_output: tuple[str, ...] = COMPARE_OUTPUT.field()
    runs: int = APPLY_RUNS.field()
    identify: str = IDENTIFY.field()
    timeout: float = APP_TIMEOUT.field()
    cwd: str | None = None
    env: dict[str, str] | None = None  # added to the app's environment (MCP's `env`; the CLI: the shell's)

    def checked(self) -> ApplyRequest:
        if (self.cubin is None) == (self.variant is None):
            raise UsageError("give exactly one of --cubin V and --variant N", "e.g. --variant 3 (see kerncap info DIR)")
        if self.compare_output and not self.check:
            raise UsageError("--compare-output compares the runs of --check", "add --check")
        if not self.command:
            raise UsageError("no command to run", "give the app's command after `--` (MCP: `command`)")
        check_fields(self)
        dispatch = self.dispatch
        if isinstance(dispatch, str):
            dispatch = self._dispatch(dispatch)
        elif dispatch is not None:  # MCP's list
            dispatch = self._dispatch(",".join(str(n) for n in dispatch))
        return replace(self, command=tuple(self.command), compare_output=tuple(self.compare_output),
                       dispatch=dispatch or None)

    @staticmethod
    def _dispatch(text: str) -> tuple[int, ...]:
        try:
            return dispatch_list(text)
        except ValueError as exc:
            raise UsageError(f"--dispatch {exc}", APPLY_DISPATCH.help) from None


class ApplyRefused(KerncapError):
    """The variant cannot stand in for the captured kernel (the app ran unmodified)."""

    exit_code = EXIT_REFUSED


@dataclass
class Target:
    kernel: str       # mangled name
    demangled: str
    sha256: str       # the captured cubin's
    globals: list[tuple[str, int]]
    outputs: list[int]  # parameters that pointed at a written region at the capture
    # (parameter, byte offset from its pointer) of a pointer to a written region stored in
    # a buffer the launch left alone: outputs reached through a table (indirect_outputs)
    indirect: list[tuple[int, int]] = field(default_factory=list)
    indirect_left: int = 0  # such pointers found past MAX_INDIRECT: not compared
    # launched with programmatic dependent launch (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_
    # SERIALIZATION): the kernel may start while the one before it still runs
    pdl: bool = False
    # the module globals left out of the copies: the variant's code names none of them (its
    # build's record, variants/<n>.reach.json), so it can neither read nor write them
    unreached: list[str] = field(default_factory=list)
    # of `globals`, those the kernel can write (`__device__`: a `.nv.global*` section, not a
    # constant bank): copied back into the app's after each substituted launch, or what the
    # variant wrote there (a counter, a flag, a result read by cudaMemcpyFromSymbol) is lost
    returned: list[str] = field(default_factory=list)
    # the globals the capture found the kernel writing: outputs no parameter points at
    written_globals: list[str] = field(default_factory=list)

    @property
    def checked_globals(self) -> list[str]:
        """The module globals --check compares after each launch, as the app holds them:
        those the kernel wrote at the capture and those the variant may write (copied back)."""
        names = dict.fromkeys([*self.written_globals, *self.returned])
        return [n for n in names if _SYMBOL.fullmatch(n)]


def mirrored(target: Target, variant: Path) -> Target:
    """`target` with only the globals the variant's code can reach left to copy; all of
    them when the variant's build recorded nothing (a cubin from elsewhere, nvcc run as
    one step, Triton)."""
    reach = read_reach(variant, target.kernel)
    if reach is None:
        return target
    return replace(target, globals=[g for g in target.globals if g[0] in reach],
                   unreached=[n for n, _ in target.globals if n not in reach],
                   returned=[n for n in target.returned if n in reach])


def target_of(cap: Capture, *, tables: bool = True) -> Target:
    """What apply substitutes and compares; `tables`: look for outputs reached through
    tables of pointers (only --check compares them, and looking reads payloads)."""
    kernel = cap.kernel
    written = {r.id for r in cap.regions if getattr(r, "written", False)}
    outputs = [p.index for p in cap.params if p.region is not None and p.region in written]
    # the compiler's own constants are numbered per module: the variant keeps its own
    named = [g for g in cap.globals if not compiler_constant(g.name)]
    globals_ = [(g.name, g.size) for g in named]
    indirect = indirect_outputs(cap, written) if tables else []
    return Target(kernel=kernel["name"], demangled=kernel.get("demangled", kernel["name"]),
                  sha256=kernel["module"]["sha256"], globals=globals_,
                  outputs=outputs, indirect=indirect[:MAX_INDIRECT],
                  indirect_left=max(0, len(indirect) - MAX_INDIRECT),
                  returned=[g.name for g in named if g.section.startswith(".nv.global")],
                  written_globals=[g.name for g in named if g.written],
                  pdl=programmatic(cap.launch.get("attributes") or []))


_SYMBOL = re.compile(r"[A-Za-z_$][A-Za-z0-9_$.]*")  # a global's name as the interposer may use it in a file name

MAX_TABLE = 1 << 16     # bytes of a parameter's unwritten buffer searched for output pointers
MAX_INDIRECT = 64       # such pointers compared at most


def indirect_outputs(cap: Capture, written: set[int]) -> list[tuple[int, int]]:
    """(parameter, byte offset from its pointer) of each pointer to a region the launch
    wrote, stored in a small buffer a parameter points to that the launch left as it was: a
    kernel that reaches its outputs through a table of pointers (batched GEMMs' pointer
    arrays). Comparing the table itself would compare addresses, which differ run to run."""
    targets = [r for r in cap.regions if r.id in written]
    if not targets:
        return []
    from kerncap.prune.closure import PointerFinder  # numpy: not at the workbench's start

    finder = PointerFinder(targets)
    regions = {r.id: r for r in cap.regions}
    out: dict[tuple[int, int], None] = {}  # in the order found, each once
    for p in cap.params:
        r = regions.get(p.region) if p.region is not None and p.region not in written else None
        if r is None or r.size > MAX_TABLE:
            continue
        for i, h in enumerate(r.pre):
            if h is None:
                continue  # zeros: no pointer
            try:
                data = cap.read_chunk(h, cap.chunk_length(r.size, i))
            except KerncapError:
                continue  # a payload gone (`apply` without --check needs none): no output named through it
            for _, at in finder.hits(data):
                rel = i * cap.chunk_size + at - (p.region_offset or 0)
                if rel >= 0:
                    out.setdefault((p.index, rel))
    return list(out)


PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID


def programmatic(attributes: list[dict]) -> bool:
    """Whether a captured launch's attributes allow programmatic dependent launch."""
    for a in attributes:
        if a.get("id") == PROGRAMMATIC_STREAM_SERIALIZATION:
            try:
                return int.from_bytes(bytes.fromhex(a.get("value") or "")[:4], "little") != 0
            except ValueError:
                return False
    return False


def resolve_variant(root: Path, cubin: str | Path | None, variant: int | None) -> Path:
    """The variant cubin: --cubin, or history.json's row --variant N."""
    if variant is not None:
        v = History.load(root).get(variant)
        if not v.cubin:
            raise UsageError(f"variant {variant} is the captured cubin itself", "pick a built variant")
        path = (root / v.cubin).resolve()
        if root.resolve() not in path.parents:
            raise KerncapError(f"variant {variant}'s cubin {v.cubin} leads out of the reproducer",
                               "rebuild the variant")
    else:
        path = Path(cubin).resolve()
    if not path.is_file():
        raise KerncapError(f"variant cubin {path} does not exist", "build it with `kerncap recompile DIR`")
    return path


@dataclass
class RunResult:
    seconds: float
    returncode: int | None
    reports: list[dict]
    profiles: list[dict]
    procs: list[dict]
    run_dir: Path
    describe_exit: str = ""

    @property
    def launches(self) -> int:
        return sum(r.get("launches", 0) for r in self.reports)

    @property
    def substituted(self) -> int:
        return sum(r.get("substituted", 0) for r in self.reports)

    def fingerprints(self) -> list[dict]:
        out = [f for r in self.reports for f in r.get("fingerprints", [])]
        return sorted(out, key=fingerprint_key)

    def kernel_ms(self, kernel: str, demangled: str) -> tuple[float | None, float | None, int]:
        """The kernel's total GPU time and every kernel's (ms), and how many times the
        kernel ran, from the activity records (a graph's replays included: the launches
        the interposer counts are not every execution)."""
        mine = total = 0.0
        calls = 0
        seen = False
        for p in self.profiles:
            for k in p.get("kernels", []):
                ns = float(k.get("total_ns", 0))
                total += ns
                if k.get("name") == kernel or k.get("demangled") == demangled:
                    mine += ns
                    calls += int(k.get("calls") or 0)
                    seen = True
        return (mine / 1e6 if seen else None), (total / 1e6 if self.profiles else None), calls


@dataclass
class Apply:
    """One apply job: the reproducer's target, the variant and the app."""

    root: Path
    target: Target
    variant: Path
    command: list[str]
    dispatches: list[int] = field(default_factory=list)
    identify: str = "cubin"
    timeout: float | None = None
    cwd: str | None = None
    quiet: bool = False
    env: dict[str, str] | None = None
    output: OutputSink | None = None                # the app's output (None: passed through, unless quiet)
    cancelled: Callable[[], bool] | None = None     # asked while the app runs: True stops it (MCP's cancel)

    def run(self, *, substitute: bool, check: bool = False, dump_at: int | None = None,
            profile: bool = False) -> RunResult:
        run_dir = Path(tempfile.mkdtemp(prefix="kerncap-apply-"))
        t = self.target
        settings = {
            "KERNCAP_KERNEL": t.kernel, "KERNCAP_MATCH": "exact", "KERNCAP_APPLY_SHA256": t.sha256,
            "KERNCAP_APPLY_IDENTIFY": self.identify,
            "KERNCAP_APPLY_GLOBALS": ",".join(f"{n}:{s}" for n, s in t.globals),
        }
        if substitute:
            settings["KERNCAP_APPLY_CUBIN"] = str(self.variant)
            if t.returned:
                settings["KERNCAP_APPLY_GLOBALS_BACK"] = ",".join(t.returned)
            if self.dispatches:
                settings["KERNCAP_APPLY_DISPATCH"] = ",".join(map(str, self.dispatches))
        if check:
            settings["KERNCAP_APPLY_CHECK"] = "1"
            if t.outputs or t.indirect:
                settings["KERNCAP_APPLY_OUTPUTS"] = ",".join([*map(str, t.outputs),
                                                             *(f"{i}@{at}" for i, at in t.indirect)])
            if t.checked_globals:
                settings["KERNCAP_APPLY_CHECK_GLOBALS"] = ",".join(t.checked_globals)
        if dump_at is not None:
            settings["KERNCAP_APPLY_DUMP_AT"] = str(dump_at)
        if profile:
            settings["KERNCAP_APPLY_PROFILE"] = "1"
        env = app_environment(self.command, mode="apply", run_dir=run_dir, settings=settings, env=self.env)
        if entry_library() is None:
            raise KerncapError("kerncap apply needs libkerncap_entry.so, which was not built",
                               "reinstall kerncap with the CUDA toolkit (pip install .)")
        env["KERNCAP_INTERCEPT"] = "entry"
        env["LD_PRELOAD"] = preload_entry_points(env.get("LD_PRELOAD"))
        sink = self.output or ((lambda stream, data: None) if self.quiet else None)
        outcome = run_app(self.command, env=env, cwd=self.cwd, timeout=self.timeout, output=sink,
                          stop_when=self.cancelled)
        result = RunResult(seconds=outcome.seconds, returncode=outcome.returncode,
                           reports=read_reports(run_dir, "apply"), profiles=read_reports(run_dir, "profile"),
                           procs=read_reports(run_dir, "proc"), run_dir=run_dir,
                           describe_exit=outcome.describe_exit())
        if outcome.timed_out:
            raise KerncapError(f"the app ran past --timeout {self.timeout:g} s", "raise --timeout")
        if outcome.stopped:
            raise Cancelled("kerncap apply was cancelled (the app was stopped)")
        for proc in result.procs:
            for err in proc.get("errors", []):
                if err.get("kind") in ("config", "cupti_activity", "cupti_subscriber"):
                    raise KerncapError(f"kerncap could not run in the app: {err.get('message')}",
                                       "see docs/apply.md")
        if outcome.failed:
            raise KerncapError(f"the app {outcome.describe_exit()}"
                               + (" with the variant" if substitute else " (as is, under kerncap)") + "\n"
                               + outcome.stderr_excerpt(), "make the app run without kerncap first")
        if substitute:
            self._refusals(result)
        return result

    def _refusals(self, r: RunResult) -> None:
        for rep in r.reports:
            ref = rep.get("refusal")
            if ref:
                raise ApplyRefused(f"kerncap apply refused the variant {self.variant.name}: {ref['message']} "
                                   f"(the app ran its own kernel)", REFUSAL_HINTS.get(ref["kind"]))
        graphs = sum(rep.get("graph_launches", 0) for rep in r.reports)
        if r.launches == 0 and graphs:
            raise ApplyRefused(f"{self.target.demangled} was launched only from CUDA graphs ({graphs} launch(es) "
                               "recorded by stream capture); kerncap apply cannot substitute it there yet",
                               REFUSAL_HINTS["graphs"])
        if r.launches == 0:
            why = "; ".join(w for rep in r.reports for w in rep.get("unidentified", []))
            raise ApplyRefused(f"the app never launched the captured {self.target.demangled}"
                               + (f" (a kernel of that name ran, but {why})" if why else ""),
                               REFUSAL_HINTS["not_launched"])
        if r.substituted == 0 and not self.dispatches:
            raise ApplyRefused(f"no launch of {self.target.demangled} was substituted", None)


@dataclass
class Mismatch:
    launch: int
    param: int
    bytes_differing: int | None
    bytes_compared: int
    via: int | None = None  # the buffer the pointer at this offset of the parameter's buffer names
    global_name: str | None = None  # not a parameter's: this module global of the app's

    def where(self) -> str:
        if self.global_name is not None:
            return f"module global {self.global_name}"
        return (f"parameter {self.param}'s buffer" if self.via is None
                else f"the buffer named at +{self.via} of parameter {self.param}'s")

    def dump_name(self) -> str:  # as the interposer names it (apply_mode.cpp)
        if self.global_name is not None:
            return f"dump-{self.launch}-g{self.global_name}.bin"
        return f"dump-{self.launch}-p{self.param}" + ("" if self.via is None else f"+{self.via}") + ".bin"


@dataclass
class CheckResult:
    launches: int
    compared: int
    mismatch: Mismatch | None
    output_files: list[str] = field(default_factory=list)  # --compare-output paths that differ
    notes: list[str] = field(default_factory=list)
    # where two runs of the app AS IS first differed (its inputs change run to run: a
    # random seed, timing): from that launch on, a difference says nothing of the variant
    unsteady: Mismatch | None = None
    files_compared: int = 0  # --compare-output files that either run wrote

    @property
    def nothing_compared(self) -> bool:
        """No launch's outputs fingerprinted (no pointer parameter, parameters unreadable)
        and no file compared: no difference found in nothing is no pass."""
        return (self.compared == 0 and self.files_compared == 0 and self.mismatch is None and not self.output_files
                and self.unsteady is None)

    @property
    def passed(self) -> bool:
        return (self.mismatch is None and not self.output_files and self.unsteady is None
                and not self.nothing_compared)

    @property
    def inconclusive(self) -> bool:
        """The first difference is one the app makes by itself, or nothing was compared: no
        verdict on the variant."""
        return self.nothing_compared or (self.unsteady is not None and (
            self.mismatch is None or self.mismatch.launch >= self.unsteady.launch))

    @property
    def verdict(self) -> str:
        return ("pass" if self.passed else "nothing" if self.nothing_compared else "unsteady" if self.inconclusive
                else "fail")

    def text(self) -> str:
        lines = []
        if self.nothing_compared:
            lines.append(f"check: NO VERDICT: nothing was compared: the kernel ran {self.launches} time(s) but no "
                         "launch's outputs could be fingerprinted (the notes say why) and no output file was "
                         "compared; name the app's output files with --compare-output")
        elif self.inconclusive:
            u = self.unsteady
            lines.append(f"check: NO VERDICT: two runs of the app as is differ at launch {u.launch} ("
                         f"{u.where()}): the app does not give its kernel the same inputs each run (a "
                         f"random seed, timing), so only the {self.compared} launch(es) before it were compared "
                         "(all equal); make the app deterministic (e.g. a fixed seed) to check the rest")
        elif self.mismatch:
            m = self.mismatch
            diff = f"{m.bytes_differing} of {m.bytes_compared} bytes differ" if m.bytes_differing is not None \
                else f"{m.bytes_compared} bytes, fingerprints differ"
            lines.append(f"check: FAIL at launch {m.launch} (the {_ordinal(m.launch + 1)}): {m.where()} differs ({diff})")
        else:
            lines.append(f"check: all {self.compared} launches matched byte for byte")
        for p in self.output_files:
            lines.append(f"check: output file {p} differs")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _compare_files(paths: Sequence[str], cwd: str | None, keep: Path) -> dict[str, bytes | None]:
    out = {}
    for p in paths:
        src = Path(cwd or ".") / p
        out[p] = src.read_bytes() if src.is_file() else None
    return out


def run_check(job: Apply, compare_output: Sequence[str] = ()) -> CheckResult:
    base = job.run(substitute=False, check=True)
    base_files = _compare_files(compare_output, job.cwd, base.run_dir)
    var = job.run(substitute=True, check=True)
    var_files = _compare_files(compare_output, job.cwd, var.run_dir)
    a, b = base.fingerprints(), var.fingerprints()
    notes = []
    if any(r.get("fingerprints_truncated") for r in base.reports + var.reports):
        notes.append("only the first launches were fingerprinted (KERNCAP_APPLY_CHECK_MAX)")
    for rep in base.reports + var.reports:
        notes += rep.get("errors", [])
    if job.target.indirect_left:
        notes.append(f"{job.target.indirect_left} more output pointer(s) found in tables were not compared "
                     f"(at most {MAX_INDIRECT})")
    if base.launches != var.launches:
        notes.append(f"the kernel ran {base.launches} times as is but {var.launches} times with the variant")
    mismatch = first_difference(b, a)  # the variant's bytes where it has the launch
    unsteady = None
    if mismatch is not None:
        # Both runs once more, each dumping that launch's buffers: count the bytes. The
        # second run as is also says whether the app repeats itself up to that launch.
        da = job.run(substitute=False, check=True, dump_at=mismatch.launch)
        db = job.run(substitute=True, check=True, dump_at=mismatch.launch)
        unsteady = first_difference(a, da.fingerprints())
        if unsteady is not None and unsteady.launch > mismatch.launch:
            unsteady = None  # the app repeated itself past the variant's difference: a real one
        name = mismatch.dump_name()
        pa, pb = da.run_dir / name, db.run_dir / name
        if pa.is_file() and pb.is_file():
            x, y = pa.read_bytes(), pb.read_bytes()
            n = min(len(x), len(y))
            mismatch.bytes_differing = sum(1 for i in range(n) if x[i] != y[i]) + abs(len(x) - len(y))
            mismatch.bytes_compared = max(len(x), len(y))
        for r in (da, db):
            shutil.rmtree(r.run_dir, ignore_errors=True)
    differing = [p for p in compare_output if base_files.get(p) != var_files.get(p)]
    files = sum(1 for p in compare_output if base_files.get(p) is not None or var_files.get(p) is not None)
    for r in (base, var):
        shutil.rmtree(r.run_dir, ignore_errors=True)
    compared = len({f["launch"] for f in b if unsteady is None or f["launch"] < unsteady.launch})
    return CheckResult(launches=var.launches, compared=compared, mismatch=mismatch, output_files=differing,
                       notes=notes, unsteady=unsteady, files_compared=files)


def first_difference(a: list[dict], b: list[dict]) -> Mismatch | None:
    """The first (launch, parameter) whose fingerprint differs between two runs' lists, or
    that only one of them has."""
    key_a = {fingerprint_key(f): f for f in a}
    key_b = {fingerprint_key(f): f for f in b}
    for k in sorted(key_a.keys() | key_b.keys()):
        f, g = key_a.get(k), key_b.get(k)
        if f is None or g is None or f["hash"] != g["hash"] or f["bytes"] != g["bytes"]:
            return Mismatch(k[0], k[1], None, (f or g)["bytes"], via=None if k[2] < 0 else k[2],
                            global_name=k[3] or None)
    return None


def fingerprint_key(f: dict) -> tuple[int, int, int, str]:
    """(launch, parameter or -1 for a module global, offset of the pointer in its buffer
    or -1: the buffer itself, the global's name or "")."""
    return f["launch"], f.get("param", -1), f.get("via", -1), f.get("global", "")


@dataclass
class Timing:
    runs: int
    app_s: tuple[list[float], list[float]]        # as is, with the variant
    kernel_ms: tuple[list[float], list[float]]      # the kernel's total GPU time per run
    share: tuple[float | None, float | None]       # the kernel's share of GPU time (median)
    app_interval: object | None
    kernel_interval: object | None
    substituted: int
    notes: list[str] = field(default_factory=list)
    # how many times the kernel ran per run (activity records): the kernel speedup compares
    # its GPU time per execution, since an app that runs for a set time (a benchmark loop)
    # runs a faster or slower kernel a different number of times
    kernel_calls: tuple[list[int], list[int]] = ([], [])

    def text(self, name: str) -> str:
        def med(xs):
            return statistics.median(xs) if xs else float("nan")
        lines = [f"timing: {self.runs} interleaved runs each (as is / with the variant; "
                 f"{self.substituted} launch(es) substituted per run)"]
        a, v = self.app_s
        lines.append(f"  app wall time     {med(a):.3f} s / {med(v):.3f} s"
                     + (f"   speedup {self.app_interval.text()}" if self.app_interval else ""))
        ka, kv = self.kernel_ms
        if ka and kv:
            ca, cv = self.kernel_calls
            per = (f" ({med(ca):g} / {med(cv):g} executions, {1e3 * med(_per_call(ka, ca)):.2f} / "
                   f"{1e3 * med(_per_call(kv, cv)):.2f} us each)" if ca and cv else "")
            lines.append(f"  {name} GPU time  {med(ka):.3f} ms / {med(kv):.3f} ms{per}"
                         + (f"   speedup per execution {self.kernel_interval.text()}" if self.kernel_interval else ""))
        sa, sv = self.share
        if sa is not None and sv is not None:
            lines.append(f"  its share of the app's GPU time  {100 * sa:.1f} % / {100 * sv:.1f} %")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _per_call(ms: list[float], calls: list[int]) -> list[float]:
    return [m / c for m, c in zip(ms, calls) if c]


def run_timing(job: Apply, runs: int) -> Timing:
    from kerncap.replay.significance import MIN_ROUNDS, bootstrap_speedup

    app = ([], [])
    kern = ([], [])
    calls = ([], [])
    shares = ([], [])
    substituted = 0
    for i in range(runs):
        # ABBA order: drift (clocks, caches) falls on both sides alike.
        order = (False, True) if i % 2 == 0 else (True, False)
        for substitute in order:
            side = int(substitute)
            r = job.run(substitute=substitute, profile=True)
            app[side].append(r.seconds)
            mine, total, n = r.kernel_ms(job.target.kernel, job.target.demangled)
            if mine is not None:
                kern[side].append(mine)
                calls[side].append(n)
                if total:
                    shares[side].append(mine / total)
            if substitute:
                substituted = r.substituted
            shutil.rmtree(r.run_dir, ignore_errors=True)

    def interval(a, b):
        if len(a) < MIN_ROUNDS or len(a) != len(b):
            return None
        return bootstrap_speedup([[x] for x in a], [[y] for y in b])

    share = tuple(statistics.median(s) if s else None for s in shares)
    kernel_interval, notes = interval(_per_call(kern[0], calls[0]), _per_call(kern[1], calls[1])), []
    if calls[0] and calls[1] and statistics.median(calls[0]) != statistics.median(calls[1]):
        notes.append(f"the app ran the kernel {statistics.median(calls[0]):g} times as is and "
                     f"{statistics.median(calls[1]):g} times with the variant (medians per run; an app that runs "
                     "for a set time runs a faster or slower kernel more or less often): the kernel speedup "
                     "compares its GPU time per execution, and the totals and the app's wall time are not "
                     "the same work")
    if job.target.pdl and job.target.globals:
        # As is, the kernel may start early and wait in the GPU for the one before it (CUPTI
        # counts the wait); the variant's launch follows kerncap's copies of the globals on
        # the stream (docs/apply.md: ggml's mat-vec).
        kernel_interval = None
        notes.append(f"the capture launched the kernel with programmatic dependent launch (it may start early and "
                     f"wait in the GPU for the kernel before it, which its GPU time then counts) and the variant's "
                     f"launches follow kerncap's copies of {len(job.target.globals)} module global(s) on the "
                     "stream: the two GPU times are not comparable, so no kernel speedup is given (the app's "
                     "wall time still compares; the reproducer's speedup is the kernel's)")
    return Timing(runs=runs, app_s=app, kernel_ms=kern, share=share, app_interval=interval(*app),
                  kernel_interval=kernel_interval, substituted=substituted, notes=notes, kernel_calls=calls)


@dataclass
class ApplyResult:
    variant: Path
    launches: int
    substituted: int
    check: CheckResult | None
    timing: Timing | None
    skipped_globals: list[str]
    unreached_globals: list[str] = field(default_factory=list)  # not copied: the variant's code names none
    returned_globals: list[str] = field(default_factory=list)  # copied back after each launch (Target.returned)
    # launches recorded into CUDA graphs by stream capture: they ran the app's own kernel
    graph_launches: int = 0
    row: int | None = None  # the History row whose cubin was applied (its `in_app` records this)
    # that row's speedup in the reproducer, as `build` measured it ({speedup, low, high}), to
    # read beside the in-app one; None when the variant is no row or was not timed
    replay: dict[str, float | None] | None = None

    @property
    def replay_meets(self) -> bool | None:
        """Whether the in-app kernel interval meets the reproducer's (None: one is missing)."""
        iv, r = self.timing.kernel_interval if self.timing else None, self.replay
        if iv is None or r is None or r.get("low") is None or r.get("high") is None:
            return None
        return iv.low <= r["high"] and r["low"] <= iv.high

    @property
    def within_bound(self) -> bool:
        """Whether the in-app kernel interval meets [the reproducer's low end, its speedup
        with both medians less the launch floor] (False: no bound recorded)."""
        iv, r = self.timing.kernel_interval if self.timing else None, self.replay
        if iv is None or r is None or r.get("low") is None or not r.get("bound"):
            return False
        return iv.low <= r["bound"] and r["low"] <= iv.high

    @property
    def exit_status(self) -> int:
        if self.check is None or self.check.passed:
            return 0
        return EXIT_CANNOT_RUN if self.check.inconclusive else EXIT_FAILED

    def to_dict(self) -> dict[str, Any]:
        """`kerncap apply --json`, MCP's `apply` (docs/apply.md)."""
        doc = {"variant": str(self.variant), "row": self.row, "replay_speedup": self.replay, "launches": self.launches,
               "substituted": self.substituted, "skipped_globals": self.skipped_globals,
               "unreached_globals": self.unreached_globals, "returned_globals": self.returned_globals,
               "graph_launches": self.graph_launches,
               "check": {**asdict(self.check), "verdict": self.check.verdict} if self.check else None,
               "timing": None}
        if self.timing:
            t = self.timing
            doc["timing"] = {"runs": t.runs, "app_s": t.app_s, "kernel_ms": t.kernel_ms,
                             "kernel_calls": t.kernel_calls, "share": t.share,
                             "app_speedup": asdict(t.app_interval) if t.app_interval else None,
                             "kernel_speedup": asdict(t.kernel_interval) if t.kernel_interval else None,
                             "notes": t.notes}
        doc["replay_meets"] = self.replay_meets
        doc["within_bound"] = self.within_bound
        doc["exit_status"] = self.exit_status
        return doc

    def text(self) -> str:
        lines = [f"apply: {self.variant.name} substituted for {self.substituted} of {self.launches} launch(es)"]
        if self.skipped_globals:
            lines.append(f"  note: the variant has no {', '.join(self.skipped_globals)}: not mirrored")
        if self.unreached_globals:
            n = len(self.unreached_globals)
            lines.append(f"  note: the variant's code reaches none of {n} module global{'s' if n > 1 else ''} "
                         f"({_names(self.unreached_globals)}): not copied before its launches")
        if self.graph_launches:
            lines.append(f"  note: {self.graph_launches} launch(es) recorded into CUDA graphs ran the app's own "
                         "kernel (not substituted there yet): --check does not compare them, and the kernel's "
                         "GPU time counts their replays both ways, which pulls the speedup toward 1")
        if self.returned_globals:
            n = len(self.returned_globals)
            lines.append(f"  note: {n} module global{'s' if n > 1 else ''} the kernel can write "
                         f"({_names(self.returned_globals)}) copied back into the app's after each launch")
        if self.check:
            lines.append(self.check.text())
        if self.timing:
            lines.append(self.timing.text("kernel"))
        if self.replay is not None:
            r = self.replay
            interval = f" [{r['low']:.3f}–{r['high']:.3f}]" if r.get("low") is not None else ""
            bound = (f"; up to {r['bound']:.3f}× without the events around each timed launch (docs/replay.md)"
                     if r.get("bound") else "")
            timer = ", CUPTI's kernel records as here" if r.get("timer") == "kernel" else ""
            lines.append(f"  in the reproducer (History v{self.row}{timer}): kernel speedup {r['speedup']:.3f}×"
                         f"{interval}" + bound)
        if self.replay_meets is False and self.within_bound:
            lines.append("  note: the two intervals do not meet, but the app's reaches the reproducer's speedup "
                         "without the events around each timed launch: the reproducer times each launch between "
                         "CUDA events, here CUPTI times the kernel alone (docs/apply.md)")
        elif self.replay_meets is False and (self.replay or {}).get("timer") == "kernel":
            lines.append("  note: the two intervals do not meet on the same clock (CUPTI's kernel records both "
                         "ways): the app's launches see other inputs, another L2 state and another cadence than "
                         "the reproducer's (launched back to back, with no idle GPU before each, the README's "
                         "edit reads 0.3-0.6 % less than the reproducer says: facts §52); "
                         "`kerncap replay DIR --compare CUBIN --timer kernel --warm-l2` (or --flush-l2) shows how "
                         "far the L2's state moves the speedup (docs/apply.md)")
        elif self.replay_meets is False:
            lines.append("  note: the two intervals do not meet: the reproducer times each launch between CUDA "
                         "events, after restores and checks; here CUPTI times the kernel alone in the app's own "
                         "run. `kerncap build --timer kernel` times the reproducer on the app's clock, and "
                         "`kerncap replay DIR --compare CUBIN --warm-l2` (or --flush-l2) shows how far the L2's "
                         "state moves the speedup (docs/replay.md, docs/apply.md)")
        if self.row is not None:
            lines.append(f"  recorded on History row v{self.row} (in app)")
        return "\n".join(lines)

    def in_app(self, command: Sequence[str]) -> dict[str, Any]:
        """What the History row of the applied variant keeps (Variant.in_app): the --check
        verdict and the in-app speedups, with the command they hold for."""
        import shlex

        c, t = self.check, self.timing
        doc: dict[str, Any] = {"command": shlex.join(command)[:4096], "launches": self.launches,
                               "substituted": self.substituted,
                               "check": None if c is None else c.verdict,
                               "compared": None if c is None else c.compared,
                               "mismatch_launch": c.mismatch.launch if c is not None and c.mismatch else None}
        for key, iv in (("kernel", t.kernel_interval if t else None), ("app", t.app_interval if t else None)):
            doc[f"{key}_speedup"] = iv.speedup if iv else None
            doc[f"{key}_low"] = iv.low if iv else None
            doc[f"{key}_high"] = iv.high if iv else None
        doc["share"] = t.share[0] if t else None
        return doc


def history_row(root: Path, variant: Path) -> int | None:
    """The History row (not the baseline) whose cubin is `variant`, if any."""
    try:
        rows = History.load(root).variants
    except KerncapError:
        return None  # a damaged history: the apply still runs, nothing is recorded
    for v in reversed(rows):
        if v.id and v.cubin and (root / v.cubin).resolve() == variant:
            return v.id
    return None


def apply_request(reproducer: str | Path, request: ApplyRequest, *, output: OutputSink | None = None,
                  cancelled: Callable[[], bool] | None = None) -> ApplyResult:
    """Run a checked request (Session.apply is the front ends' door: it also records the
    outcome on the variant's History row)."""
    r = request
    cap = Capture.open(reproducer)
    root = cap.reproducer_dir
    variant = resolve_variant(root, r.cubin, r.variant)
    job = Apply(root=root, target=mirrored(target_of(cap, tables=r.check), variant), variant=variant,
                command=list(r.command), dispatches=list(r.dispatch or ()), identify=r.identify,
                timeout=r.timeout, cwd=r.cwd, env=r.env, output=output, cancelled=cancelled)
    check_command(job.command, cwd=r.cwd, env={**os.environ, **(r.env or {})})
    first = job.run(substitute=True)
    skipped = sorted({g["name"] for rep in first.reports for g in rep.get("skipped_globals", [])})
    graphs = sum(rep.get("graph_launches", 0) for rep in first.reports)
    shutil.rmtree(first.run_dir, ignore_errors=True)
    checked = run_check(job, r.compare_output) if r.check else None
    timing = run_timing(job, r.runs) if r.runs else None
    return ApplyResult(variant=job.variant, launches=first.launches, substituted=first.substituted,
                       check=checked, timing=timing, skipped_globals=skipped, unreached_globals=job.target.unreached,
                       returned_globals=[n for n in job.target.returned if n not in skipped], graph_launches=graphs,
                       row=r.variant if r.variant is not None else history_row(root, job.variant))


def _names(names: list[str], shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
