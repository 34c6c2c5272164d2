"""kerncap's public API: the one door the front ends (the `kerncap` CLI, the workbench,
an MCP server) use to reach the engine. Everything here is typed and documented; the
modules behind it may move, these names stay.

Every function raises `kerncap.errors.KerncapError` (or a subclass) for anything the
user can fix, with `.message` naming the thing and `.hint` the next step; its
`.exit_code` is the CLI's exit status for it (docs/cli.md). Nothing here prints.

    from kerncap import api
    prof = api.profile(["python", "train.py"])              # rank the app's kernels
    res = api.extract("gemm", ["./app"], output="gemm-repro")
    with api.open("gemm-repro") as s:           # the reproducer's session: every verb on it
        v = s.validate(api.ValidateRequest(cubin="gemm-repro/variants/1.cubin", perturb=4))
    assert v.passed
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kerncap import recompile as _recompile
from kerncap import sources as _sources
from kerncap.capture import extract as _extract
from kerncap.capture import profile as _profile
from kerncap.capture import profile_table as _profile_table
from kerncap.capture import run as _run
from kerncap.capture import selection as _selection
from kerncap.capture import sequence_extract as _sequence_extract
from kerncap.reproducer import sequence as _sequence
from kerncap.reproducer import sequence_text as _sequence_text
from kerncap.recompile import fusion as _fusion
from kerncap.recompile import sequence_kernel as _sequence_kernel
from kerncap.capture import set_extract as _set_extract
from kerncap.core import stack as _stack
from kerncap.errors import UsageError
from kerncap.fleet import baseline as _baseline
from kerncap.fleet import check as _check
from kerncap.fleet import fanout as _fanout
from kerncap.fleet import junit as _junit
from kerncap.fleet import sweep as _sweep
from kerncap.fleet.check import CheckCase, CheckReport
from kerncap.fleet.fanout import Fanout
from kerncap.fleet.sweep import SweepEntry, SweepReport
from kerncap.fleet.tasks import MeasureRequest
from kerncap.prune import pruner as _pruner
from kerncap.replay import differential as _differential
from kerncap.replay import ncu as _ncu
from kerncap.replay import sanitize as _sanitize
from kerncap.replay import set_run as _set_run
from kerncap.replay import significance as _significance
from kerncap.replay.differential import DEFAULT_RUNS, TrustReport
from kerncap.replay.ncu import KEY_METRICS, Metric, NcuResult
from kerncap.replay.perturb import MAX_PERTURBATIONS
from kerncap.replay.significance import DEFAULT_CONFIDENCE, MIN_ROUNDS, TimingComparison
from kerncap.replay.sanitize import SanitizeResult
from kerncap.replay.tools import Cancellation, Cancelled
from kerncap.replay import dump as _dump
from kerncap.replay import mismatch as _mismatch
from kerncap.replay import tensor_view as _tensor_view
from kerncap.replay.results import (
    RegionCheck,
    ReplayResult,
    ValidationResult,
    format_replay,
)
from kerncap.reproducer import editable as _editable
from kerncap.reproducer import info as _info
from kerncap.reproducer import listing as _listing
from kerncap.reproducer import pack as _pack
from kerncap.reproducer import set_info as _set_info
from kerncap.reproducer import sets as _sets
from kerncap.reproducer import stored as _stored
from kerncap.reproducer.editable import SourceFile
from kerncap.reproducer.format import Capture
from kerncap.reproducer.history import History, Variant
from kerncap.reproducer.launches import AppLaunches
from kerncap.reproducer.pack import Limits as UnpackLimits
from kerncap.reproducer.pack import PackResult
from kerncap.reproducer.prune_report import PruneReport
from kerncap.reproducer.store import Store
from kerncap.reproducer.stored import HydrateResult, StoreResult
from kerncap.reproducer.summaries import ReproducerInfo, ReproducerRow, SetInfo
from kerncap.reproducer.sets import Member, ReproducerSet
from kerncap.reproducer.variants import RecompileResult
from kerncap.recompile import set_variant as _set_variant
from kerncap.recompile.set_variant import SetVariant
from kerncap.replay.set_run import MemberRun, SetRun
from kerncap.reproducer.workspace import DEFAULT_WORKSPACE, Workspace
from kerncap.session import fusions as _fusion_row
from kerncap.session import opening as _opening
from kerncap.session import options as _options
from kerncap.session import pool as _pool
from kerncap.session import session as _session
from kerncap.session import sets as _session_sets
from kerncap.sources import locate as _locate
from kerncap.sources.discover import Discovery
from kerncap.sources.locate import KernelSite
from kerncap.triton import configs as _configs
from kerncap.triton import pinned as _pinned

__all__ = [
    # capture side
    "MATCH_MODES", "INTERCEPT_PATHS", "AppOutput", "ExtractResult", "KernelStat", "ProfileResult", "app_command", "extract",
    "format_profile", "load_profile", "print_app_output", "profile",
    # the reproducer and its storage
    "DEFAULT_WORKSPACE", "Capture", "HydrateResult", "PackResult", "StoreResult", "UnpackLimits", "Workspace", "format_info",
    "hydrate", "info", "list_reproducers", "open_capture", "pack", "store", "unpack", "AppLaunches", "app_launches",
    "History", "Variant", "ReproducerInfo", "ReproducerRow", "SetInfo",
    # sources, recompile, replay, prune
    "AutotuneConfigs", "Discovery", "KernelSite", "PruneReport", "kernel_site", "RecompileResult", "RegionCheck",
    "ReplayResult", "ValidationResult", "autotune_configs", "find_sources", "format_replay",
    "prune", "recompile", 
    # validation you can trust: determinism, perturbed inputs, interleaved timing with intervals
    "DEFAULT_CONFIDENCE", "DEFAULT_RUNS", "MAX_PERTURBATIONS", "MIN_ROUNDS", "TimingComparison",
    "TrustReport", "format_comparison", "format_trust_report", 
    "validate_request",
    # the open reproducer: one session per reproducer, the edit loop and its requests (issue 28)
    "BuildRequest", "BuildResult", "CompareRequest", "ReplayNotRun", "ReplayRequest", "SequenceReplay", "Session", "SessionPool",
    "SetSession", "ValidateRequest", "build", "needs_gpu", "open", "open_session", "options", "speedup_phrase",
    # Nsight Compute and compute-sanitizer on one replayed launch
    "NCU_SECTIONS", "SANITIZE_TOOLS", "KEY_METRICS", "Cancellation", "Cancelled", "Metric", "NcuResult",
    "SanitizeResult", "format_metric", "format_metric_change", "format_ncu", "format_ncu_compare",
    "format_sanitize", "ncu", "sanitize", "stored_ncu", "stored_sanitize",
    # editable sources, stacks (MCP server)
    "SourceFile", "is_source_file", "list_sources", "read_source", "source_fingerprint",
    "stack_differences", "write_source",
    # which launches count, reproducer sets (docs/selection.md)
    "NVTX_MATCH_MODES", "Member", "MemberRun", "ReproducerSet", "Selection", "SetExtractResult", "SetRun", "SetVariant",
    "dispatch_list", "format_nvtx_table", "format_bucket_tables", "format_set_extract", "format_set_info",
    "format_set_run", "is_set", "launch_context", "open_set", "recompile_set", "set_info",
    # many reproducers and variants on many GPUs
    "CheckCase", "CheckReport", "Fanout", "MeasureRequest", "SweepEntry", "SweepReport", "check", "format_check",
    "format_sweep", "load_sweep_configs", "open_fanout", "sweep", "write_check_baseline", "write_junit",
    # looking at the data: arrays out, where a variant differs (issue 30)
    "DUMP_STATES", "DumpResult", "FirstMismatch", "Item", "Layout", "MismatchMap", "TensorView", "dump",
    "format_dump", "format_mismatch", "item_layouts", "mismatch_bin_label", "mismatch_map_arrays", "mismatch_maps",
    "parse_shape",
    # a sequence of launches as one reproducer (issue 29, docs/sequences.md)
    "SEQUENCE_MODES", "SEQUENCE_ORDERS", "SequenceRequest", "format_sequence_extract", "format_localization",
    "format_sequence_launches", "fuse_build", "fuse_skeleton", "is_sequence", "recompile_sequence_kernel",
    "fuse_edit", "fused_variant_info", "fusion_info",
    "changed_launch_ms", "sequence_kernel_of_source", "sequence_extract_arguments",
    "fusions", "fusion_name", "fusion_of_source", "fusion_phrase",
]

PathLike = str | os.PathLike
ExtractResult = _extract.ExtractResult
ProfileResult = _profile.ProfileResult
KernelStat = _profile.KernelStat
MATCH_MODES: tuple[str, ...] = _extract.MATCH_MODES
INTERCEPT_PATHS: tuple[str, ...] = _run.INTERCEPT_PATHS
NVTX_MATCH_MODES: tuple[str, ...] = _selection.NVTX_MATCH_MODES
Selection = _selection.Selection  # which launches count: nvtx (+ nvtx_match), rank, pid, device
SetExtractResult = _set_extract.SetExtractResult
SequenceRequest = _sequence_extract.SequenceRequest  # --sequence nvtx|graph|run, --count, --until
SEQUENCE_MODES: tuple[str, ...] = _sequence_extract.SEQUENCE_MODES
SEQUENCE_ORDERS: tuple[str, ...] = _options.SEQUENCE_ORDERS  # how a sequence replays (docs/sequences.md)
# Receives ("stdout" | "stderr", raw bytes) as the captured app writes them.
AppOutput = Callable[[str, bytes], None]


# -- the capture side ------------------------------------------------------------------------


def app_command(after_dashes: Sequence[str], cmd_string: str | None = None) -> list[str]:
    """The app's argv from the words after `--`, or from one shell-quoted string (`--cmd`)."""
    return _run.resolve_app_command(after_dashes, cmd_string)


def apply(reproducer: PathLike, command: Sequence[str], **options: Any):
    """Run the app with a variant in place of the captured kernel (`kerncap apply`,
    docs/apply.md): kerncap.capture.apply.apply's ApplyResult."""
    from kerncap.capture import apply as _apply

    return _apply.apply(reproducer, command, **options)


def print_app_output(stream: str, data: bytes) -> None:
    """The default AppOutput: the app's stdout and stderr go to ours, as it writes them."""
    _run.default_sink(stream, data)


def profile(command: Sequence[str], *, cwd: PathLike | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None, output: AppOutput | None = None, nvtx: str | None = None,
            nvtx_match: str = "substring", by_nvtx: bool = False, buckets: bool = False,
            sampled: bool = False) -> ProfileResult:
    """Run the app once under the capture library and rank its kernels by total GPU time.
    `env` adds to the current environment; `timeout` stops the app after that many seconds
    (the profile then covers what ran). `nvtx`: count only launches inside NVTX ranges
    whose path matches (`nvtx_match`: substring or regex); `by_nvtx`: also the time per
    (range path, kernel) in `result.nvtx_ranges`; `buckets`: each kernel's launches by
    signature in `result.buckets` (docs/selection.md). `sampled`: count every launch and
    time a sample instead of CUPTI's record of every launch (`result.timing`). Save the result with
    `ProfileResult.save(path)`."""
    return _profile.run_profile(command, cwd=cwd, env=env, timeout=timeout, output=output, nvtx=nvtx,
                                nvtx_match=nvtx_match, by_nvtx=by_nvtx, buckets=buckets, sampled=sampled)


def format_profile(result: ProfileResult, *, top: int = 20, width: int | None = None, wide: bool = False) -> str:
    """The table `kerncap profile` prints: the `top` kernels (0: all), every number column
    in full and the kernel names fitted into `width` (default: the terminal's, 80 in a
    pipe; `wide`: full names), then a summary line."""
    lines = _profile_table.format_table(result, top=top, width=width, wide=wide)
    return "\n".join([*lines, _profile_table.summary_line(result, len(lines) - 1)])


def format_nvtx_table(result: ProfileResult, *, top: int = 20, width: int | None = None, wide: bool = False) -> str:
    """The table `kerncap profile --by-nvtx` adds: GPU time per (NVTX range path, kernel)."""
    return "\n".join(_profile_table.format_nvtx_table(result, top=top, width=width, wide=wide))


def format_bucket_tables(result: ProfileResult, *, top: int = 20, width: int | None = None,
                         wide: bool = False) -> str:
    """The tables `kerncap profile --buckets` adds: each ranked kernel's launch signatures
    with count and share of its time."""
    return "\n".join(_profile_table.format_bucket_tables(result, top=top, width=width, wide=wide))


def load_profile(path: PathLike) -> ProfileResult:
    """A profile saved by `kerncap profile` (validated against its format)."""
    return _profile.ProfileResult.load(path)


def extract(kernel: str, command: Sequence[str], *, output: PathLike, dispatch: int | Sequence[int] = 0,
            match: str = "substring", keep_running: bool = False, timeout: float | None = None,
            source_dir: PathLike | None = None, build_dir: PathLike | None = None, cwd: PathLike | None = None,
            env: dict[str, str] | None = None, force: bool = False, keep_run_dir: bool = False,
            app_output: AppOutput | None = None, prune: bool = False, selection: Selection | None = None,
            buckets: bool = False, intercept: str | None = None,
            sequence: SequenceRequest | None = None) -> ExtractResult | SetExtractResult:
    """Capture dispatch `dispatch` (from 0, per process) of the kernel matching `kernel`
    (`match`: substring, regex or exact mangled name) of the app `command` into the new
    reproducer directory `output`. With `source_dir` (and `build_dir`) the kernel's
    sources are copied in for `recompile`; with `prune` the reproducer is then shrunk
    to its pointer closure if replay validates it (needs the GPU). `selection`: only
    launches in matching NVTX ranges, of one rank or pid, on one device count. A list
    of dispatches, or `buckets` (the first dispatch of every launch signature), captures
    a reproducer set in one run (a SetExtractResult; docs/selection.md). `intercept`:
    "entry" (interposed driver entry points, CUPTI only at the dispatch; docs/interposer.md)
    or "cupti"; None: KERNCAP_INTERCEPT, else entry. `sequence`: a window of launches as one
    reproducer instead of one dispatch (docs/sequences.md). Nothing is left at `output` unless
    the capture succeeded."""
    return _extract.extract(kernel, command, output=output, dispatch=dispatch, match=match, keep_running=keep_running,
                            timeout=timeout, source_dir=source_dir, build_dir=build_dir, cwd=cwd, env=env, force=force,
                            keep_run_dir=keep_run_dir, output_sink=app_output, prune=prune, selection=selection,
                            buckets=buckets, intercept=intercept, sequence=sequence)


def dispatch_list(dispatch: int | str | Sequence[int]) -> list[int]:
    """`--dispatch` as a sorted list without repeats: 3 -> [3]; "3,17,40" -> [3, 17, 40]
    (UsageError for anything else)."""
    return _extract.dispatch_list(dispatch)


def launch_context(capture: Capture) -> str:
    """Where a capture was made, when a selection or a job made it matter: "rank 1 of 2
    (RANK), local rank 1, NVTX forward.S1024/layer.5"; "" otherwise."""
    return _info.launch_context(capture)


def format_set_extract(result: SetExtractResult) -> str:
    """The text `kerncap extract` prints for a reproducer set."""
    return _set_extract.format_set_extract(result)


# -- the reproducer and its storage ------------------------------------------------------------


def open_capture(path: PathLike) -> Capture:
    """The capture of a reproducer directory (or of a capture directory itself), checked
    against the capture format; payloads are read and verified on demand."""
    return Capture.open(path)


def capture_lacks(capture: Capture) -> list[str]:
    """What a capture from an older kerncap does not hold (host memory contents, the
    closure check, arrays), one sentence each; [] for a capture of this kerncap."""
    return _info.lacks(capture)


def info(path: PathLike, *, verify: bool = False) -> ReproducerInfo:
    """Everything `kerncap info` shows about a reproducer: a ReproducerInfo, whose JSON is
    what `--json` prints (kernel, launch, params, regions, globals, provenance, sizes,
    reproducer.json, and "payloads": whether every chunk and the cubin is there with its
    size; `verify` checks hashes)."""
    return ReproducerInfo(_info.summarize(path, verify=verify))


def format_info(summary: dict[str, Any]) -> str:
    """The text `kerncap info` prints for a summary from `info()`."""
    return _info.format_summary(summary)


def app_launches(reproducer: PathLike) -> AppLaunches | None:
    """The app's kernels by launches up to the capture, as the capture run counted them
    (`launches.json`, written by `extract`); None for a reproducer without one."""
    return AppLaunches.load(reproducer)


def list_reproducers(workspace: PathLike = DEFAULT_WORKSPACE, extra: Sequence[PathLike] = (), *,
                     verify: bool = False) -> list[ReproducerRow]:
    """One row per reproducer under `workspace`/reproducers/ and under each of `extra`,
    newest first (keys: path, kernel, mangled, command, time, logical, stored, in_store,
    validation, variants, payloads, error). A reproducer that cannot be read has its
    `error`; one with missing or damaged payloads says so in `payloads` ("ok" when
    complete; `verify` checks hashes too)."""
    return [ReproducerRow(r) for r in _listing.list_captures(workspace, extra, verify=verify)]


# -- reproducer sets: several dispatches of one kernel (issue 13, docs/selection.md) -----------


def is_set(path: PathLike) -> bool:
    """Whether `path` is a reproducer set (holds set.json) rather than one reproducer."""
    return _sets.is_set(path)


def open_set(path: PathLike) -> ReproducerSet:
    """The reproducer set at `path`: its members (each an ordinary reproducer) with their
    dispatch, bucket and weight (share of the kernel's in-app time), checked against the
    set format."""
    return ReproducerSet.open(path)


def set_info(path: PathLike, *, verify: bool = False) -> SetInfo:
    """Everything `kerncap info SET` shows, as JSON-able data: kernel, members (weight,
    dispatch, launches, signature, grid, block, NVTX path, job, "payloads": "ok" or what
    is wrong; `verify` checks hashes), buckets not captured, the members' coverage of
    the kernel's in-app time; "payloads_ok" when every member is complete."""
    return SetInfo(_set_info.summarize_set(ReproducerSet.open(path), verify=verify))


def format_set_info(summary: dict[str, Any]) -> str:
    """The text `kerncap info SET` prints for a summary from `set_info()`."""
    return _set_info.format_set_info(summary)


def pack(directory: PathLike, output: PathLike | None = None, *, force: bool = False) -> PackResult:
    """Write a reproducer into one verified, zstd-compressed `.kcap` file (default: next to it)."""
    return _pack.pack(directory, output, force=force)


def unpack(pack_file: PathLike, output: PathLike | None = None, *, limits: UnpackLimits | None = None) -> PackResult:
    """Restore the reproducer held by a `.kcap` file into a new (or empty) directory,
    checking every entry; nothing is left behind when it is damaged. `limits` bounds what
    a pack may expand to (default `UnpackLimits()`: 1 TiB, and 1000x the pack's size
    past 1 GiB)."""
    return _pack.unpack(pack_file, output, limits=limits)


def store(directory: PathLike, store_dir: PathLike | None = None) -> StoreResult:
    """Move a reproducer's payloads into a shared chunk store (default: its workspace's)."""
    return _stored.store_reproducer(directory, Store(store_dir or _stored.default_store_for(directory)))


def hydrate(directory: PathLike) -> HydrateResult:
    """Write back the blob files of a reproducer whose payloads are in a store."""
    return _stored.hydrate(directory)


# -- sources and recompile ---------------------------------------------------------------------


def find_sources(kernel: str, source_dir: PathLike, build_dir: PathLike | None = None) -> Discovery:
    """Where a CUDA C++ kernel's translation unit, headers and compile command are in a
    built tree, without running the app."""
    return _sources.discover(kernel, Path(source_dir), Path(build_dir) if build_dir is not None else None)


def recompile(reproducer: PathLike, config: str | None = None, *, trust: bool = False,
              mode: str = "auto") -> RecompileResult:
    """Rebuild only the captured kernel from the reproducer's edited source into
    variants/ (the local toolkit's nvcc with the recorded flags, or Triton in-process).
    CUDA C++: `mode` "auto" compiles a translation unit reduced to what the kernel needs
    (falling back to the whole one, `result.notes` says why), "reduced" never falls back,
    "full" compiles the whole unit; `result.mode` and `result.phases` say what ran and
    where the time went. `config` pins other Triton compile options or another autotune
    config ("num_warps=4,BLOCK=64"). Recorded flags that could run other programs or
    write outside the reproducer raise UntrustedCommand unless `trust` (docs/cli.md)."""
    return _recompile.recompile(reproducer, config, trust=trust, mode=mode)


def recompile_set(reproducer_set: PathLike | ReproducerSet, config: str | None = None, *, trust: bool = False,
                  mode: str = "auto") -> SetVariant:
    """`recompile` for a reproducer set: the set's edited source/ is copied over every
    member's and built once per distinct captured cubin; `result.path` is the set
    variant (variants/<n>.json) naming each member's cubin, for `replay_set` and
    `validate_inputs`."""
    s = reproducer_set if isinstance(reproducer_set, ReproducerSet) else ReproducerSet.open(reproducer_set)
    return _set_variant.recompile_set(s, config, trust=trust, mode=mode)


def kernel_site(reproducer: PathLike, kernel: dict[str, Any]) -> KernelSite | None:
    """Where in `<reproducer>/source/` the captured kernel (the manifest's "kernel":
    name, demangled) is defined, file and line, or None when it is not found."""
    return _locate.locate_kernel(Path(reproducer), kernel)


@dataclass
class AutotuneConfigs:
    """The autotune configs a Triton capture recorded (`recompile --list-configs`)."""
    function: str                     # the Triton function
    candidates: list[_configs.Candidate]  # each with .config (a --config value), .grid, .captured
    captured_constexprs: dict[str, Any]   # the constexprs of the captured launch
    captured_grid: list[int]


def autotune_configs(reproducer: PathLike) -> AutotuneConfigs:
    """The autotune configs of a Triton reproducer, each with the grid it launches."""
    spec = _pinned.load_spec(Path(reproducer))
    return AutotuneConfigs(function=spec["function"], candidates=_configs.candidates(spec),
                           captured_constexprs=_configs.captured_constexprs(spec),
                           captured_grid=list(spec["launch"]["grid"]))


# -- the open reproducer: a session, and the edit loop (issue 28, docs/architecture.md) ---------

Session = _session.Session
SetSession = _session_sets.SetSession
SessionPool = _pool.SessionPool
BuildResult = _session.BuildResult
ReplayNotRun = _session.ReplayNotRun
options = _options  # the declarations of every option and default (argparse and MCP render them)
ValidateRequest = _options.ValidateRequest
CompareRequest = _options.CompareRequest
ReplayRequest = _options.ReplayRequest
BuildRequest = _options.BuildRequest
SequenceReplay = _options.SequenceReplay


def open_session(reproducer: PathLike, *, device: int = 0, replay_timeout: float | None = None,
                 compile_worker: bool = True, server_cmd: Sequence[str] | None = None) -> Session | SetSession:
    """The reproducer (or reproducer set) at `reproducer`, open: its replay server starts
    on the first request and stays resident, a Triton reproducer's compile worker starts
    warming up with `.warm()`; `.build()`, `.baseline()`, `.validate()`, `.compare()`,
    `.replay()`, `.ncu()`, `.sanitize()` are the edit loop and record into its
    `.history`. A context manager; `.close()` ends its processes. `replay_timeout`:
    seconds one replay request may take (the server is then killed); `server_cmd`
    replaces the replay server (tests)."""
    return _opening.open_session(reproducer, device=device, timeout=replay_timeout, compile_worker=compile_worker,
                                 server_cmd=list(server_cmd) if server_cmd else None)


def open(reproducer: PathLike, *, device: int = 0, order: str | None = None, replay_timeout: float | None = None,
         compile_worker: bool = True, server_cmd: Sequence[str] | None = None) -> Session | SetSession:
    """The one door to a reproducer: `open_session`, a sequence replaying in `order`
    (streams, serial or graph; None: streams). Every verb on an open reproducer is a
    method of what this returns, and a shape that cannot do a verb refuses it itself."""
    session = open_session(reproducer, device=device, replay_timeout=replay_timeout, compile_worker=compile_worker,
                           server_cmd=server_cmd)
    try:
        session.use_order(order)
    except BaseException:
        session.close()
        raise
    return session


def speedup_phrase(variant: Variant) -> str:
    """A History row's speedup in one phrase: "1.32× [1.21–1.35]", "within noise (1.02×,
    0.97–1.08)", "1.06× (no interval)", "not compared"."""
    return _session.speedup_phrase(variant)


def needs_gpu(exc: BaseException) -> bool:
    """Whether an error means "no GPU / no replay core here" rather than a failure."""
    return _session.needs_gpu(exc)


def build(reproducer: PathLike, request: BuildRequest | None = None, *, device: int = 0,
          progress: Callable[[str, str], None] | None = None) -> BuildResult:
    """`kerncap build`: recompile the edited source, time the new cubin interleaved with
    the captured one, validate it and record a History row (a session of its own; the
    workbench and MCP's `build` call the same `Session.build`). ReplayNotRun when it
    compiled but no replay could run here."""
    with open_session(reproducer, device=device, compile_worker=False) as s:
        return s.build(request or BuildRequest(), **({"progress": progress} if progress else {}))


# -- replay -----------------------------------------------------------------------------------


def format_set_run(run: SetRun) -> str:
    """The text `kerncap replay SET` (and `validate SET --cubin V`) prints: one line per
    member, then the weighted speedup and the worst member."""
    return _set_run.format_set_run(run)


# -- validation you can trust, comparisons with intervals (issue 14, docs/replay.md) ------------


def validate_request(reproducers: Sequence[PathLike], request: ValidateRequest, *, device: int = 0,
                     progress: Callable[[str], None] | None = None, order: str | None = None) -> TrustReport:
    """`validate_inputs` for a ValidateRequest (what the CLI and MCP send); `order`: how a
    sequence replays (streams, serial or graph)."""
    return _session_sets.validate_paths(reproducers, request, device=device, progress=progress,
                                        sequence_order=_options.check_order(order))


def format_trust_report(report: TrustReport) -> str:
    """The text `kerncap validate` prints."""
    return _differential.format_report(report)


def format_comparison(comparison: TimingComparison) -> str:
    """The text `kerncap replay --compare` prints."""
    return _significance.format_comparison(comparison)


# -- Nsight Compute and compute-sanitizer on one replayed launch (issue 15, docs/replay.md) ----

NCU_SECTIONS: tuple[str, ...] = _ncu.DEFAULT_SECTIONS
NCU_TIMEOUT = _ncu.DEFAULT_TIMEOUT
SANITIZE_TOOLS: tuple[str, ...] = _sanitize.TOOLS
SANITIZE_TIMEOUT = _sanitize.DEFAULT_TIMEOUT


def ncu(reproducer: PathLike, cubin: PathLike | None = None, *, sections: Sequence[str] | None = None,
        ncu_set: str | None = None, warmup: int = 3, flush_l2: bool = False, timeout: float = NCU_TIMEOUT,
        device: int = 0, reuse: bool = False, cancel: Cancellation | None = None,
        progress: Callable[[str], None] | None = None) -> NcuResult:
    """Profile one replayed launch of the captured kernel (or the variant `cubin`), after
    `warmup` launches, with Nsight Compute (`sections`, default NCU_SECTIONS, or a section
    set `ncu_set`); the report and its key metrics are stored next to the variant. With
    `reuse`, a stored result of the same cubin bytes and setup is returned instead of a
    new run. `timeout` seconds kill ncu and its replay (ToolTimeout); `cancel` too
    (Cancelled)."""
    options = dict(sections=sections, ncu_set=ncu_set, warmup=warmup, flush_l2=flush_l2, timeout=timeout,
                   device=device, cancel=cancel, progress=progress)
    if not reuse:
        return _ncu.profile(reproducer, cubin, **options)
    result, reused = _ncu.stored_or_profile(reproducer, cubin, **options)
    if reused and progress is not None:
        progress(f"ncu: using the stored report of {result.label} (same cubin bytes and sections)")
    return result


def stored_ncu(reproducer: PathLike, cubin: PathLike | None = None) -> NcuResult | None:
    """The metrics an earlier `ncu` run stored for this cubin (None: the captured one)."""
    return _ncu.load_stored(reproducer, cubin)


def sanitize(reproducer: PathLike, cubin: PathLike | None = None, *, tool: str = "memcheck",
             timeout: float = SANITIZE_TIMEOUT, device: int = 0, cancel: Cancellation | None = None,
             progress: Callable[[str], None] | None = None) -> SanitizeResult:
    """One validation launch of the captured kernel (or the variant) under
    compute-sanitizer's `tool` (SANITIZE_TOOLS); errors with their kernel source line where
    the cubin has line info, host API errors apart. `result.clean` is the verdict; the
    report is stored next to the variant."""
    return _sanitize.sanitize(reproducer, cubin, tool=tool, timeout=timeout, device=device, cancel=cancel,
                              progress=progress)


def stored_sanitize(reproducer: PathLike, cubin: PathLike | None = None, tool: str = "memcheck"
                    ) -> SanitizeResult | None:
    """What an earlier `sanitize` run with `tool` stored for this cubin, or None."""
    return _sanitize.load_stored(reproducer, cubin, tool)


def format_ncu(result: NcuResult) -> str:
    """The text `kerncap replay --ncu` prints: key metrics and ncu's top findings."""
    return _ncu.format_result(result)


def format_ncu_compare(a: NcuResult, b: NcuResult) -> str:
    """Two cubins' key metrics side by side with B's change (`kerncap replay --ncu --compare`)."""
    return _ncu.format_compare(a, b)


def format_metric(key: str, value: float | None) -> str:
    """One key metric (KEY_METRICS) in its unit."""
    return _ncu.format_value(key, value)


def format_metric_change(key: str, a: float | None, b: float | None) -> str:
    """B's change against A for one key metric."""
    return _ncu.format_delta(key, a, b)


def format_sanitize(result: SanitizeResult) -> str:
    """The text `kerncap validate --sanitize` prints."""
    return _sanitize.format_result(result)


# -- prune ------------------------------------------------------------------------------------


def prune(reproducer: PathLike, *, validate: bool = True, output: PathLike | None = None,
          device: int = 0) -> PruneReport:
    """Replace the reproducer by the part of it its kernel can reach through pointers,
    if that replays byte-exact (needs the GPU); otherwise keep it and say why.
    `validate=False` writes an unvalidated copy to `output` (default DIR-pruned)."""
    return _pruner.prune_reproducer(reproducer, validate=validate, output=output, device=device)


# -- front ends without a person: resident replay, editable sources, stacks (issue 16) ----------


def _sources_of(reproducer: PathLike, kernel: str | None) -> Path:
    """Whose source/ a source call reaches: the reproducer's, or for a sequence its kernel
    `kernel`'s entry (kernels/<k>/; None: the only one with sources)."""
    root = Path(reproducer)
    if kernel is None and not _sequence.is_sequence(root):
        return root
    cap = Capture.open(root)
    if cap.sequence is None:
        raise UsageError(f"{root} is one dispatch, not a sequence: its sources are {root / 'source'}",
                         "leave out the kernel")
    entry = _sequence_kernel.entry_dir(cap.reproducer_dir, _sequence_kernel.choose(cap, kernel))
    if not entry.resolve().is_relative_to(cap.reproducer_dir.resolve()):  # kernels/ a link out of the reproducer
        raise UsageError(f"{entry} leads outside {cap.reproducer_dir} (a symbolic link?)",
                         "replace the link by the directory itself, or unpack the reproducer again")
    return entry


def list_sources(reproducer: PathLike, kernel: str | None = None) -> list[SourceFile]:
    """The files under `<reproducer>/source/` that `recompile` builds from, each with its
    size and whether it is editable (kerncap's build records are listed, not editable).
    A sequence's: those of `kernel`'s entry, `kernels/<k>/source/` (its number or a part of
    its name; None: the only kernel with sources)."""
    return _editable.list_sources(_sources_of(reproducer, kernel))


def is_source_file(path: PathLike, source_dir: PathLike | None = None) -> bool:
    """Whether `path` (under `source_dir`, a reproducer's source/, when given) is one of
    its sources rather than a hidden file or an editor's dropping (swap, backup, lock)."""
    return _editable.is_source_file(path, source_dir)


def source_fingerprint(source_dir: PathLike) -> str:
    """A hash of the sources under `source_dir` (paths and bytes): equal fingerprints
    mean an unchanged source."""
    return _editable.source_fingerprint(source_dir)


def read_source(reproducer: PathLike, name: str, kernel: str | None = None) -> str:
    """The text of one source file (`name` relative to source/, or to a sequence kernel's
    `kernels/<k>/source/` as for list_sources; nothing outside it)."""
    return _editable.read_source(_sources_of(reproducer, kernel), name)


def write_source(reproducer: PathLike, name: str, text: str, kernel: str | None = None) -> SourceFile:
    """Replace or create one source file atomically (`name` relative to source/, or to a
    sequence kernel's `kernels/<k>/source/`); the next `recompile` (`build --kernel K` for
    a sequence) builds from it."""
    return _editable.write_source(_sources_of(reproducer, kernel), name, text)


def stack_differences(reproducer: PathLike, running: dict[str, Any] | None = None) -> list[str]:
    """How the stack a reproducer recorded differs from `running` (default: this
    machine's): one line per differing fact (kerncap, driver, CUDA, GPU, torch, triton)."""
    summary = _info.summarize(reproducer)
    return _stack.differences(summary["stack"], running if running is not None else _stack.running_stack())


# -- many reproducers and variants on many GPUs (issue 16) ------------------------------------


def open_fanout(*, backend: str = "auto", gpus: Sequence[str] | None = None, scheduler: str | None = None,
                compile_workers: int | None = None, compiles: bool = False, connect_timeout: float = 10.0) -> Fanout:
    """Where `check` and `sweep` run their jobs (a context manager; close it after).
    `backend`: auto | dask | processes | serial; `gpus`: CUDA_VISIBLE_DEVICES entries, one
    worker each (default: every GPU nvidia-smi lists); `scheduler`: the address of an
    existing Dask scheduler (its GPU workers must declare the resource GPU=1);
    `compile_workers`: CPU workers for Triton compiles. Dask is optional
    (`pip install 'kerncap[cluster]'`); without it a process per GPU does the same work
    on one machine. A scheduler not reached within `connect_timeout` seconds raises
    KerncapError (exit status 3)."""
    return _fanout.open_fanout(backend=backend, gpus=gpus, scheduler=scheduler, compile_workers=compile_workers,
                               compiles=compiles, connect_timeout=connect_timeout)


def check(dirs: Sequence[PathLike], fanout: Fanout, *, options: MeasureRequest | None = None,
          baseline: PathLike | None = None, threshold_pct: float = 10.0, ship: bool | None = None,
          on_case: Callable[[CheckCase], None] | None = None) -> CheckReport:
    """Validate and time every reproducer under `dirs` and its best recorded variant
    (history.json) on `fanout`; with `baseline` (a file `write_check_baseline` wrote), a
    median more than `threshold_pct` above the stored one is a regression. `ship`: send
    the reproducers to the workers instead of relying on a shared path (default: when
    the workers may be remote). `report.exit_status`: 0 all pass, 1 a verdict failed, 3 a
    case could not run."""
    return _check.check(dirs, fanout, options=options, baseline=baseline, threshold_pct=threshold_pct, ship=ship,
                        on_case=on_case)


def write_check_baseline(report: CheckReport, path: PathLike) -> Path:
    """Store the medians of the passing cases of `report` for later `check(baseline=path)`."""
    return _baseline.save(path, _check.baseline_cases(report))


def write_junit(report: CheckReport | SweepReport, path: PathLike) -> Path:
    """The report as JUnit XML: a <failure> per verdict, an <error> per case that could not run."""
    if isinstance(report, CheckReport):
        return _junit.write(path, "kerncap check", _check.junit_cases(report), report.seconds)
    return _junit.write(path, "kerncap sweep", _sweep.junit_cases(report), report.seconds)


def format_check(report: CheckReport) -> str:
    """The table `kerncap check` prints."""
    return _check.format_report(report)


def load_sweep_configs(path: PathLike) -> list[str]:
    """Triton configs from a file: one `--config` value per line, or a JSON list."""
    return _sweep.load_configs(path)


def sweep(reproducer: PathLike, fanout: Fanout, *, configs: Sequence[str] = (), variants: Sequence[PathLike] = (),
          options: MeasureRequest | None = None, ship: bool | None = None,
          on_entry: Callable[[SweepEntry], None] | None = None) -> SweepReport:
    """Compile each Triton config (on compile workers) and validate and time it, and each
    variant cubin, plus the captured cubin, on the GPU workers of `fanout`."""
    _sweep.check_variant_paths(variants)
    return _sweep.sweep(reproducer, fanout, configs=configs, variants=variants, options=options, ship=ship,
                        on_entry=on_entry)


def format_sweep(report: SweepReport) -> str:
    """The table `kerncap sweep` prints."""
    return _sweep.format_report(report)


# -- looking at the data: arrays out, where a variant differs (issue 30, docs/replay.md) ---------

DUMP_STATES: tuple[str, ...] = _dump.STATES
DumpResult = _dump.DumpResult
MismatchMap = _mismatch.MismatchMap          # one item's mismatches: counts, histograms, grid, first, summary()
FirstMismatch = _mismatch.FirstMismatch
TensorView = _tensor_view.View               # an item's 2-D picture: start, rows, cols, row_stride, coords()
Layout = _tensor_view.Layout                 # dtype, shape, strides, offset, source
Item = _tensor_view.Item                     # a region or module global, as replay numbers them


def parse_shape(text: str) -> tuple[int, ...]:
    """"1024,1024", "64x1024", "-1,256" -> a shape tuple (UsageError otherwise)."""
    return _tensor_view.parse_shape(text)


def item_layouts(reproducer: PathLike | Capture, items: Sequence[str] = (), *, dtype: str | None = None,
                 shape: Sequence[int] | None = None) -> list[tuple[Item, Layout, TensorView]]:
    """What kerncap knows of each item's layout (items: "3", "region:3", "arg:1",
    "global:NAME"; none: every written one): its dtype, tensor shape and strides (Triton
    tensor metadata, the C++ parameter type, or `dtype`/`shape`) and its 2-D view. A
    shape that does not divide the item raises UsageError naming both."""
    cap = reproducer if isinstance(reproducer, Capture) else Capture.open(reproducer)
    out = []
    for t in _dump.plan(cap, items, dtype=dtype, shape=tuple(shape) if shape is not None else None):
        out.append((t.item, t.layout, _tensor_view.view_of(t.layout, t.item)))
    return out


def dump(reproducer: PathLike, items: Sequence[str] = (), states: Sequence[str] = ("pre", "post"), *,
         cubin: PathLike | None = None, perturbation: int | None = None, seed: int = 0, dtype: str | None = None,
         shape: Sequence[int] | None = None, output: PathLike | None = None, session: Session | None = None,
         device: int = 0) -> DumpResult:
    """Write items as .npy files numpy loads with their dtype and shape, plus a JSON
    sidecar per item (offset, strides, where the layout came from). `states`: "pre",
    "post" (from the capture, no GPU), "output" (what `cubin` — None: the captured one —
    leaves there on the captured input or on `perturbation` K of `seed`: needs the GPU)
    and "expected" (what validate compares it with). `output`: the directory (default
    <reproducer>/dumps/<cubin>). Refused up front when larger than the free space; a
    variant that faults is not dumped (KerncapError naming the fault). `session`: run on
    that open session's resident replay server (else one of its own on `device`)."""
    options = dict(cubin=cubin, perturbation=perturbation, seed=seed, dtype=dtype,
                   shape=tuple(shape) if shape is not None else None, output=output)
    if session is not None:
        return session.dump(items, states, **options)
    return _dump.dump(reproducer, items, states, device=device, **options)


def format_dump(result: DumpResult) -> str:
    """The text `kerncap dump` prints."""
    return _dump.format_result(result)


def mismatch_maps(session: Session, *, cubin: PathLike | None = None,
                  against: PathLike | None = None, perturbation: int | None = None, seed: int = 0,
                  items: Sequence[str] = (), dtype: str | None = None, shape: Sequence[int] | None = None,
                  views: dict[str, TensorView] | None = None, grid: tuple[int, int] = (256, 256),
                  atol: float | None = None, rtol: float | None = None) -> list[MismatchMap]:
    """Where `cubin` (None: the captured cubin) differs, item by item, computed on the
    GPU by an open session's replay server: on the captured input against the captured post-state,
    or on `perturbation` K (1-based, `seed`) against the captured cubin's output there;
    `against` another variant's cubin compares two variants' outputs. `grid`: cells of
    the heatmap (rows, cols; at most 1024 each); `views`: item name -> a TensorView
    (e.g. `view.window(...)` to zoom). A run that faults raises KerncapError naming it."""
    return session.mismatch_maps(cubin=cubin, against=against, perturbation=perturbation, seed=seed, items=items,
                                 dtype=dtype, shape=tuple(shape) if shape is not None else None, views=views,
                                 grid=grid, atol=atol, rtol=rtol)


def mismatch_map_arrays(name: str, actual: Any, expected: Any, pre: Any = None, *, dtype: str | None,
                        view: TensorView | None = None, atol: float | None = None, rtol: float | None = None,
                        grid: tuple[int, int] = (256, 256), actual_label: str = "",
                        expected_label: str = "") -> MismatchMap:
    """The same map computed here in numpy from arrays holding an item's bytes (e.g.
    loaded from `dump`): the reference the GPU's is checked against."""
    return _mismatch.from_arrays(name, actual, expected, pre, dtype=dtype, view=view,
                                 tolerance=atol is not None or rtol is not None, atol=atol or 0.0, rtol=rtol or 0.0,
                                 grid_rows=grid[0], grid_cols=grid[1], actual_label=actual_label,
                                 expected_label=expected_label)


def format_mismatch(m: MismatchMap) -> str:
    """The report lines `kerncap validate` prints under a failing region."""
    return "\n".join(_mismatch.format_map(m, indent=""))


def mismatch_bin_label(histogram: str, b: int) -> str:
    """The label of bin `b` of a MismatchMap histogram: "value" (value_hist: "NaN",
    "+inf", "-inf", "0", "+2^3", …), "err" (err_hist: "2^-12", …) or "ulp" (ulp_hist)."""
    return {"value": _mismatch.value_label, "err": _mismatch.err_label, "ulp": _mismatch.ulp_label}[histogram](b)


# -- a sequence of launches as one reproducer (issue 29, docs/sequences.md) --------------------


def is_sequence(path: PathLike) -> bool:
    """Whether `path` (a reproducer or its capture/) holds a sequence capture."""
    return _sequence.is_sequence(path)


def format_sequence_extract(result: ExtractResult) -> str:
    """The text `kerncap extract --sequence` prints."""
    return _sequence_text.format_extract(result)


def format_sequence_launches(launches: list[dict[str, Any]]) -> str:
    """`kerncap replay --per-launch`: the table of each launch's time."""
    return "\n".join(_sequence_text.launches_table(launches))


def format_localization(result: dict[str, Any]) -> str:
    """`kerncap validate --per-launch`: where the variant departs from the captured sequence."""
    return _sequence_text.localization_text(result)


def fuse_skeleton(reproducer: PathLike, first: int, last: int, name: str, *, force: bool = False) -> Path:
    """Writes fusions/<name>/fused.cu (a kernel taking every buffer of launches `first`..`last`
    and their scalar arguments) and fusion.json (their captured values, the launch to
    edit) in a sequence reproducer; returns fused.cu (`kerncap fuse --first --last`)."""
    return _fusion.skeleton(reproducer, first, last, name, force=force)


def fuse_build(reproducer: PathLike, name: str, *, intermediates: Sequence[str] = ()) -> Path:
    """Compiles fusions/<name>/fused.cu and writes the sequence variant variants/fuse-<name>.json,
    naming every buffer the comparison leaves out (inferred, or declared in `intermediates`);
    returns it (`kerncap fuse --build`)."""
    return _fusion.build(reproducer, name, intermediates=tuple(intermediates))


def fusion_info(reproducer: PathLike, name: str) -> dict[str, Any]:
    """A fusion's skeleton: its range, fused.cu (path and text), fusion.json, the launch to
    edit and every parameter (`kerncap fuse --json`, MCP's fuse_skeleton)."""
    return _fusion.describe(reproducer, name)


def fuse_edit(reproducer: PathLike, name: str, *, source: str | None = None, grid: Sequence[int] | None = None,
              block: Sequence[int] | None = None, shared_mem_bytes: int | None = None) -> None:
    """Writes a fusion's kernel text (fused.cu) and/or its launch (fusion.json) inside the
    reproducer (MCP's fuse_build; on the command line you edit the files)."""
    _fusion.edit(reproducer, name, source=source, grid=None if grid is None else list(grid),
                 block=None if block is None else list(block), shared_mem_bytes=shared_mem_bytes)


def fused_variant_info(variant: PathLike) -> dict[str, Any]:
    """A built fusion: the variant's path, range, fused launch and the buffers its comparison
    leaves out (`kerncap fuse --build --json`, MCP's fuse_build)."""
    return _fusion.variant_summary(variant)


def recompile_sequence_kernel(reproducer: PathLike, kernel: str, *, trust: bool = False,
                              mode: str = "auto") -> tuple[RecompileResult, Path]:
    """Rebuilds one kernel of a sequence (its number or a part of its name) from its kernel
    entry's sources (kernels/<k>/source) and writes the sequence variant that uses the new
    cubin: (the build, variants/kernel-<k>-<n>.json)."""
    return _sequence_kernel.recompile_kernel(reproducer, kernel, trust=trust, mode=mode)


def sequence_extract_arguments(mode: str | None, *, nvtx: str | None = None, count: int | None = None,
                               until: str | None = None) -> dict[str, Any]:
    """`extract`'s `sequence` and `selection` for a window (what `extract --sequence MODE
    --nvtx --count --until` passes; the workbench's extract dialog and MCP's extract too):
    {} for one dispatch (mode None); checked when extract runs (SequenceRequest.check)."""
    if not mode:
        if count is not None or until:
            raise UsageError("--count and --until bound a run of launches", "add --sequence run")
        return {"selection": Selection(nvtx=nvtx)} if nvtx else {}
    out: dict[str, Any] = {"sequence": SequenceRequest(mode=mode, count=count, until=until or None)}
    if nvtx:
        out["selection"] = Selection(nvtx=nvtx)
    return out


def sequence_kernel_of_source(reproducer: PathLike, path: PathLike) -> int | None:
    """The kernel of a sequence whose entry's sources hold `path` (kernels/<k>/source/...),
    else None: what a save in the workbench rebuilds (BuildRequest(kernel=str(k)))."""
    return _sequence_kernel.kernel_of_source(reproducer, path)


def changed_launch_ms(variant: Variant, capture: Capture) -> float | None:
    """A sequence's History row: the replayed time of its rebuilt kernel's launches."""
    return _session.changed_launch_ms(variant, capture)


def fusions(reproducer: PathLike) -> list[dict[str, Any]]:
    """The fusions of a sequence written so far: name, first, last (the workbench offers
    the one of a marked range again)."""
    return _fusion.existing(reproducer)


def fusion_name(reproducer: PathLike, first: int, last: int) -> str:
    """A free name for a fusion of launches first..last ("sp_add-sp_combine"), as the
    workbench prefills it."""
    return _fusion.suggest_name(reproducer, first, last)


def fusion_of_source(reproducer: PathLike, path: PathLike) -> str | None:
    """The fusion whose kernel `path` is (fusions/<name>/fused.cu), else None: what a save in
    the workbench builds (BuildRequest(fusion=name), Session.build_fusion)."""
    return _fusion.of_source(reproducer, path)


def fusion_phrase(variant: Variant) -> str:
    """A fusion's History row in words: the fused launch's time against the replaced
    launches' and what its comparison left out."""
    return _fusion_row.fusion_phrase(variant)
