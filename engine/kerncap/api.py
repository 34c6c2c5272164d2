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

Importing this module imports none of the engine (issue 47: it cost the workbench's first
frame about 3 s): the engine's names below are bound on first use by `__getattr__`, which
runs the one import statement of the `TYPE_CHECKING` block that names them (a type checker
reads the same statements), and the functions import what they call.
"""

from __future__ import annotations

import ast
import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

PathLike = str | os.PathLike

if TYPE_CHECKING:  # the engine's own names, each documented where it is defined
    # the capture side
    from kerncap.capture.extract import MATCH_MODES, ExtractResult, dispatch_list, extract
    from kerncap.capture.extract_text import format_extract
    from kerncap.capture.profile import ProfileResult, run_profile as profile
    from kerncap.capture.profile_table import buckets_text as format_bucket_tables, nvtx_text as format_nvtx_table
    from kerncap.capture.profile_table import profile_text as format_profile
    from kerncap.capture.run import INTERCEPT_PATHS, apps_take_sigint, default_sink as print_app_output
    from kerncap.capture.run import resolve_app_command as app_command
    from kerncap.capture.selection import NVTX_MATCH_MODES, Selection
    from kerncap.capture.sequence_extract import SEQUENCE_MODES, SequenceRequest, sequence_extract_arguments
    from kerncap.capture.set_extract import SetExtractResult, format_set_extract
    # the reproducer and its storage
    from kerncap.reproducer.editable import is_source_file, source_fingerprint
    from kerncap.reproducer.format import Capture
    from kerncap.reproducer.history import History, Variant
    from kerncap.reproducer.info import format_summary as format_info, lacks as capture_lacks, launch_context
    from kerncap.reproducer.info import stack_differences
    from kerncap.reproducer.launches import AppLaunches
    from kerncap.reproducer.pack import Limits as UnpackLimits, PackResult, pack, unpack
    from kerncap.reproducer.sequence_text import localization_text as format_localization
    from kerncap.reproducer.sets import ReproducerSet, is_set
    from kerncap.reproducer.stored import StoreResult, hydrate
    from kerncap.reproducer.summaries import ReproducerInfo, ReproducerRow, SetInfo
    from kerncap.reproducer.variants import RecompileResult
    from kerncap.reproducer.workspace import DEFAULT_WORKSPACE, Workspace
    # sources and recompile: a kernel's sources, a sequence's kernels and fusions
    from kerncap.recompile import recompile
    from kerncap.recompile.editing import list_sources, read_source, sources_of, write_source
    from kerncap.recompile.fusion import build as fuse_build, describe as fusion_info, edit as fuse_edit
    from kerncap.recompile.fusion import existing as fusions, skeleton as fuse_skeleton
    from kerncap.recompile.fusion import suggest_name as fusion_name, variant_summary as fused_variant_info
    from kerncap.recompile.sequence_kernel import recompile_kernel as recompile_sequence_kernel
    from kerncap.sources import discover as find_sources
    from kerncap.sources.locate import locate_kernel as kernel_site
    from kerncap.triton.pinned import AutotuneConfigs, autotune_configs
    # replay, validation, inspection, and looking at the data
    from kerncap.prune.pruner import prune_reproducer as prune
    from kerncap.replay.differential import TrustReport, format_report as format_trust_report
    from kerncap.replay.dump import STATES as DUMP_STATES, dump, format_result as format_dump, item_layouts
    from kerncap.replay.mismatch import MismatchMap, bin_label as mismatch_bin_label, format_text as format_mismatch
    from kerncap.replay.mismatch import map_of_arrays as mismatch_map_arrays
    from kerncap.replay.ncu import DEFAULT_SECTIONS as NCU_SECTIONS, DEFAULT_TIMEOUT as NCU_TIMEOUT, KEY_METRICS, NcuResult
    from kerncap.replay.ncu import format_compare as format_ncu_compare, format_delta as format_metric_change
    from kerncap.replay.ncu import format_result as format_ncu, format_value as format_metric, load_stored as stored_ncu
    from kerncap.replay.perturb import MAX_PERTURBATIONS
    from kerncap.replay.results import format_replay
    from kerncap.replay.sanitize import DEFAULT_TIMEOUT as SANITIZE_TIMEOUT, TOOLS as SANITIZE_TOOLS, SanitizeResult
    from kerncap.replay.sanitize import format_result as format_sanitize, load_stored as stored_sanitize
    from kerncap.replay.set_run import SetRun, format_set_run
    from kerncap.replay.significance import format_comparison
    from kerncap.replay.tensor_view import View as TensorView, parse_shape
    from kerncap.replay.tools import Cancellation, Cancelled
    # the open reproducer: its session, the requests (each option declared once) and results
    from kerncap.session import options
    from kerncap.session.fusions import fusion_phrase
    from kerncap.session.opening import holds_reproducer
    from kerncap.session.options import (SEQUENCE_ORDERS, BuildRequest, CompareRequest, ReplayRequest,
                                         SequenceReplay, ValidateRequest)
    from kerncap.session.pool import SessionPool
    from kerncap.session.session import BuildResult, ReplayNotRun, Session, changed_launch_ms, needs_gpu, speedup_phrase
    from kerncap.session.sets import SetSession
    # many reproducers and variants on many GPUs
    from kerncap.fleet.check import CheckCase, CheckReport, check, format_report as format_check
    from kerncap.fleet.check import write_baseline as write_check_baseline
    from kerncap.fleet.fanout import Fanout, open_fanout
    from kerncap.fleet.sweep import SweepEntry, SweepReport, format_report as format_sweep
    from kerncap.fleet.sweep import load_configs as load_sweep_configs
    from kerncap.fleet.tasks import MeasureRequest


@functools.cache
def _lazy_imports() -> dict[str, Any]:
    """Each name the TYPE_CHECKING block above binds -> that import statement, compiled."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING")
    out = {}
    for stmt in block.body:
        code = compile(ast.Module([stmt], type_ignores=[]), __file__, "exec")
        for alias in stmt.names:
            out[alias.asname or alias.name] = code
    return out


def __getattr__(name: str) -> Any:
    if name == "__all__":  # for `import *` and dir(): read only then (it parses this file)
        own = [n for n, v in globals().items() if getattr(v, "__module__", None) == __name__ and n[0] != "_"]
        return sorted({*_lazy_imports(), *own, "PathLike"})
    code = _lazy_imports().get(name)
    if code is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    exec(code, globals())  # the block's own `from kerncap.x import y as name`: binds it here, once
    return globals()[name]


def __dir__() -> list[str]:
    return __getattr__("__all__")


# -- the reproducer and its storage ------------------------------------------------------------


def open_capture(path: PathLike) -> Capture:
    """The capture of a reproducer directory (or of a capture directory itself), checked
    against the capture format; payloads are read and verified on demand."""
    from kerncap.reproducer.format import Capture

    return Capture.open(path)


def info(path: PathLike, *, verify: bool = False) -> ReproducerInfo | SetInfo:
    """What `kerncap info` shows: a reproducer's ReproducerInfo (`--json`'s document: kernel,
    launch, params, regions, globals, provenance, sizes, "payloads" with hashes checked under
    `verify`), or a set's SetInfo (set_info); both have payloads_ok and text()."""
    from kerncap.reproducer.info import summarize
    from kerncap.reproducer.sets import is_set
    from kerncap.reproducer.summaries import ReproducerInfo

    return set_info(path, verify=verify) if is_set(path) else ReproducerInfo(summarize(path, verify=verify))


def list_reproducers(workspace: PathLike | None = None, extra: Sequence[PathLike] = (), *,
                     verify: bool = False) -> list[ReproducerRow]:
    """One row per reproducer under `workspace` (default DEFAULT_WORKSPACE)/reproducers/ and
    under each of `extra`, newest first. A reproducer that cannot be read has its `error`;
    one with missing or damaged payloads says so in `payloads` ("ok" when complete;
    `verify` checks hashes too)."""
    from kerncap.reproducer.listing import list_captures
    from kerncap.reproducer.summaries import ReproducerRow
    from kerncap.reproducer.workspace import DEFAULT_WORKSPACE

    return [ReproducerRow(r) for r in list_captures(workspace or DEFAULT_WORKSPACE, extra, verify=verify)]


def set_info(path: PathLike, *, verify: bool = False) -> SetInfo:
    """Everything `kerncap info SET` shows: kernel, members (weight, dispatch, launches,
    signature, grid, block, NVTX path, job, "payloads"; `verify` checks hashes), buckets
    not captured, the members' coverage of the kernel's in-app time; "payloads_ok"."""
    from kerncap.reproducer.set_info import summarize_set
    from kerncap.reproducer.sets import ReproducerSet
    from kerncap.reproducer.summaries import SetInfo

    return SetInfo(summarize_set(ReproducerSet.open(path), verify=verify))


def store(directory: PathLike, store_dir: PathLike | None = None) -> StoreResult:
    """Move a reproducer's payloads into a shared chunk store (default: its workspace's)."""
    from kerncap.reproducer import stored
    from kerncap.reproducer.store import Store

    return stored.store_reproducer(directory, Store(store_dir or stored.default_store_for(directory)))


# -- the open reproducer: the one door, and the edit loop (issue 28, docs/architecture.md) ------


def open_session(reproducer: PathLike, *, device: int = 0, replay_timeout: float | None = None,
                 compile_worker: bool = True, server_cmd: Sequence[str] | None = None) -> Session | SetSession:
    """The reproducer (or reproducer set) at `reproducer`, open: its replay server starts
    on the first request and stays resident, a Triton reproducer's compile worker starts
    warming up with `.warm()`; its methods (build, baseline, validate, compare, replay,
    ncu, sanitize, dump, mismatch_maps, recompile) are the edit loop and record into its
    `.history`. A context manager; `.close()` ends its processes. `replay_timeout`:
    seconds one replay request may take (the server is then killed); `server_cmd`
    replaces the replay server (tests)."""
    from kerncap.session.opening import open_session as opened

    return opened(reproducer, device=device, timeout=replay_timeout, compile_worker=compile_worker,
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


def build(reproducer: PathLike, request: BuildRequest | None = None, *, device: int = 0,
          progress: Callable[[str, str], None] | None = None) -> BuildResult:
    """`kerncap build`: recompile the edited source, time the new cubin interleaved with
    the captured one, validate it and record a History row (a session of its own; the
    workbench and MCP's `build` call the same `Session.build`). ReplayNotRun when it
    compiled but no replay could run here."""
    from kerncap.session.options import BuildRequest

    with open_session(reproducer, device=device, compile_worker=False) as s:
        return s.build(request or BuildRequest(), **({"progress": progress} if progress else {}))


def validate_request(reproducers: Sequence[PathLike], request: ValidateRequest, *, device: int = 0,
                     progress: Callable[[str], None] | None = None, order: str | None = None) -> TrustReport:
    """Validate each reproducer (or set) for a ValidateRequest (what the CLI and MCP send),
    each in a session of its own. `order`: how a
    sequence replays (streams, serial or graph)."""
    from kerncap.session import options as opts
    from kerncap.session.sets import validate_paths

    return validate_paths(reproducers, request, device=device, progress=progress,
                          sequence_order=opts.check_order(order))


def format_sequence_launches(launches: list[dict[str, Any]]) -> str:
    """`kerncap replay --per-launch`: the table of each launch's time."""
    from kerncap.reproducer.sequence_text import launches_table

    return "\n".join(launches_table(launches))


# -- many reproducers and variants on many GPUs (issue 16) ------------------------------------


def write_junit(report: CheckReport | SweepReport, path: PathLike) -> Path:
    """The report as JUnit XML: a <failure> per verdict, an <error> per case that could not run."""
    from kerncap.fleet import check as fleet_check
    from kerncap.fleet import junit
    from kerncap.fleet import sweep as fleet_sweep

    if isinstance(report, fleet_check.CheckReport):
        return junit.write(path, "kerncap check", fleet_check.junit_cases(report), report.seconds)
    return junit.write(path, "kerncap sweep", fleet_sweep.junit_cases(report), report.seconds)


def sweep(reproducer: PathLike, fanout: Fanout, *, configs: Sequence[str] = (), variants: Sequence[PathLike] = (),
          options: MeasureRequest | None = None, ship: bool | None = None,
          on_entry: Callable[[SweepEntry], None] | None = None) -> SweepReport:
    """Compile each Triton config (on compile workers) and validate and time it, and each
    variant cubin, plus the captured cubin, on the GPU workers of `fanout`."""
    from kerncap.fleet import sweep as fleet_sweep

    fleet_sweep.check_variant_paths(variants)
    return fleet_sweep.sweep(reproducer, fanout, configs=configs, variants=variants, options=options, ship=ship,
                             on_entry=on_entry)

