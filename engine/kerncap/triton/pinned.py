"""Compiling the reproducer's Triton kernel with the captured ("pinned") contract:
same signature, constexprs, specialisation attributes, compile options and target.

Used by `kerncap recompile` (no GPU needed: an explicit GPUTarget lets Triton compile
to a cubin anywhere) and by the generated reproducer.py.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kerncap.errors import KerncapError, UsageError
from kerncap.reproducer.record import sources_kind
from kerncap.triton.configs import Candidate, candidates, captured_constexprs, tuned_config
from kerncap.triton.values import decode_value, jit_resolver

SPEC_NAME = "triton.json"
SPEC_FORMAT = "kerncap-triton-reproducer"


def load_spec(reproducer_dir: Path) -> dict:
    path = Path(reproducer_dir) / "source" / SPEC_NAME
    if not os.path.lexists(path):
        raise _not_triton(Path(reproducer_dir), path)
    try:
        spec = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KerncapError(f"{path} is not valid JSON ({exc})", "restore it from the extract, or extract again") from None
    if spec.get("format") != SPEC_FORMAT:
        raise KerncapError(f"{path} is not a kerncap Triton spec (format {spec.get('format')!r})")
    return spec


def _not_triton(reproducer_dir: Path, path: Path) -> KerncapError:
    """What a reproducer without source/triton.json is, and what applies to it instead."""
    try:
        kind = sources_kind(reproducer_dir)
    except KerncapError:
        kind = None
    if kind == "cuda" or (reproducer_dir / "source" / "build.json").exists():
        return UsageError(f"{reproducer_dir} is a CUDA C++ reproducer, not a Triton one: it has no Triton configs "
                          "(autotune configs and --config are Triton's)",
                          f"edit its source/ and run `kerncap recompile {reproducer_dir}` (or `kerncap build`)")
    if kind == "triton":
        return KerncapError(f"{path} is missing: {reproducer_dir} records a Triton kernel but not its spec",
                            "restore source/triton.json from a copy of the reproducer (its pack), or extract again")
    return UsageError(f"{reproducer_dir} is not a Triton reproducer: it has no source/{SPEC_NAME}",
                      "Triton configs need a Triton kernel's reproducer; extract one with `kerncap extract` from "
                      "the Triton app")


def import_triton():
    try:
        import triton
    except ImportError as exc:
        raise KerncapError(f"Triton is not importable here ({exc})", "run in the Python environment of the captured app") from None
    return triton


def check_version(spec: dict) -> None:
    triton = import_triton()
    captured = spec.get("triton_version")
    if captured and captured != triton.__version__:
        raise KerncapError(
            f"the kernel was captured with Triton {captured}, this environment has Triton {triton.__version__}",
            f"recompile in an environment with triton=={captured}: another Triton version generates different code",
        )


def load_kernel(reproducer_dir: Path, spec: dict):
    """(JITFunction, module) of source/kernel.py."""
    triton = import_triton()
    from triton.runtime.jit import JITFunction

    path = Path(reproducer_dir) / "source" / spec.get("source", "kernel.py")
    fn_name = spec["function"]
    if not path.is_file():
        raise KerncapError(f"{path} is missing", "restore the kernel source (the extract wrote it)")
    # The kernel's own imports (app helpers) resolve as in the app: its original folder
    # and the app's sys.path come after everything the reproducer has.
    for entry in [str(path.parent), spec.get("original", {}).get("dir"), *spec.get("original", {}).get("sys_path", [])]:
        if entry and entry not in sys.path and os.path.isdir(entry):
            sys.path.append(entry)
    name = f"kerncap_kernel_{abs(hash(str(path.resolve())))}"
    mod_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[name] = module
    try:
        mod_spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise KerncapError(f"{path}:{exc.lineno}: syntax error: {exc.msg}", "fix the kernel source and save again") from None
    except Exception as exc:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path)]
        where = f"{path}:{frames[-1].lineno}" if frames else str(path)
        raise KerncapError(f"{where}: importing the kernel module failed: {type(exc).__name__}: {exc}",
                           "fix the kernel source (a module-level statement or import) and save again") from None
    obj = getattr(module, fn_name, None)
    if obj is None:
        raise KerncapError(f"{path} defines no {fn_name}", f"the captured kernel is {fn_name}; keep its name")
    seen = 0
    while not isinstance(obj, JITFunction) and hasattr(obj, "fn") and seen < 8:
        obj, seen = obj.fn, seen + 1  # Autotuner / Heuristics / CachingAutotuner wrap the JITFunction
    if not isinstance(obj, JITFunction):
        raise KerncapError(f"{path}: {fn_name} is not a @triton.jit function ({type(obj).__name__})",
                           "keep the @triton.jit decorator on the kernel")
    del triton
    return obj, module


def check_signature(fn, spec: dict, where: str) -> None:
    """The recompiled kernel must take the captured arguments: the replay reuses the
    captured parameter buffer."""
    old = list(spec["arg_names"])
    new = list(fn.arg_names)
    problems = []
    removed = [n for n in old if n not in new]
    added = [n for n in new if n not in old]
    if removed:
        problems.append("removed " + ", ".join(removed))
    if added:
        problems.append("added " + ", ".join(added))
    if not removed and not added and old != new:
        problems.append(f"reordered ({', '.join(old)} -> {', '.join(new)})")
    old_cx = set(spec.get("declared_constexprs", []))
    new_cx = {p.name for p in fn.params if p.is_constexpr}
    for n in sorted((old_cx ^ new_cx) & set(old) & set(new)):
        problems.append(f"{n} is {'now' if n in new_cx else 'no longer'} a tl.constexpr")
    if problems:
        raise KerncapError(
            f"{where}: the signature of {spec['function']} changed: " + "; ".join(problems),
            "the replay passes the captured arguments; keep the parameter list as captured and edit the body",
        )


def compile_options(spec: dict, overrides: dict[str, Any] | None = None) -> dict:
    """The captured compile options that Triton's CUDA backend accepts, plus overrides."""
    from triton.backends.nvidia.compiler import CUDAOptions

    fields = CUDAOptions.__dataclass_fields__
    meta = spec.get("options", {})
    options = {k: v for k, v in meta.items() if k in fields and v is not None}
    libs = options.get("extern_libs")
    if libs and not all(os.path.exists(p) for _, p in libs):
        options.pop("extern_libs")  # the capture machine's libdevice path: use this Triton's own
    for key in ("extern_libs", "allowed_dot_input_precisions", "supported_fp8_dtypes", "deprecated_fp8_dot_operand_dtypes"):
        if isinstance(options.get(key), list):
            options[key] = tuple(tuple(x) if isinstance(x, list) else x for x in options[key])
    for key, value in (overrides or {}).items():
        if key not in fields:
            raise UsageError(f"--config {key}: not a Triton compile option",
                               "options include num_warps, num_stages, num_ctas, maxnreg, enable_fp_fusion")
        options[key] = value
    return options


def target(spec: dict):
    from triton.backends.compiler import GPUTarget

    t = spec.get("target") or {}
    return GPUTarget(t.get("backend", "cuda"), int(t["arch"]), int(t.get("warp_size", 32)))


def ast_source(fn, module, spec: dict, constexpr_overrides: dict[str, Any] | None = None):
    from triton.compiler import ASTSource

    resolve = jit_resolver(module)
    constexprs = {}
    pending = dict(constexpr_overrides or {})
    for entry in spec.get("constexprs", []):
        path = tuple(entry["path"]) if entry.get("path") is not None else None
        if path is None:
            raise KerncapError(f"constexpr {entry.get('name')} has no argument position in source/triton.json")
        if entry.get("name") in pending:
            constexprs[path] = pending.pop(entry["name"])
            continue
        constexprs[path] = decode_value(entry["value"], what=f"constexpr {entry.get('name') or path}", resolve_jit=resolve)
    if pending:
        raise UsageError(f"--config {', '.join(pending)}: not a constexpr argument of {spec['function']} in the capture",
                           "pin the autotuned constexprs the capture recorded")
    attrs = {tuple(e["path"]): [list(a) for a in e["value"]] for e in spec.get("attrs", []) if e.get("path") is not None}
    return ASTSource(fn, dict(spec["signature"]), constexprs, attrs)


def compile_pinned(reproducer_dir: Path, spec: dict, overrides: dict[str, Any] | None = None,
                   times: dict[str, float] | None = None):
    """(CompiledKernel, JITFunction, kernel module) of source/kernel.py under the pinned
    contract. `times`, when given, receives seconds per phase: loading the kernel module,
    then Triton's own (its compilation listener): Python AST -> TTIR, one per lowering
    stage (ttir, ttgir, llir, ptx, cubin = ptxas), storing into its cache."""
    check_version(spec)
    import triton

    start = time.perf_counter()
    where = str(Path(reproducer_dir) / "source" / spec.get("source", "kernel.py"))
    fn, module = load_kernel(reproducer_dir, spec)
    check_signature(fn, spec, where)
    option_overrides, constexpr_overrides = split_overrides(overrides, spec)
    src = ast_source(fn, module, spec, constexpr_overrides)
    options = compile_options(spec, option_overrides)
    if times is not None:
        times["load kernel"] = time.perf_counter() - start
    try:
        with _stage_times(times):
            compiled = triton.compile(src, target=target(spec), options=options)
    except Exception as exc:
        raise KerncapError(f"{where}: {spec['function']} does not compile:\n{exc}",
                           "fix the kernel source and save again") from None
    return compiled, fn, module


@contextlib.contextmanager
def _stage_times(times: dict[str, float] | None):
    """Triton's compilation listener (triton.knobs.compilation.listener), for one compile."""
    if times is None:
        yield
        return
    from triton import knobs

    def listener(*, src, metadata, metadata_group, times: Any, cache_hit: bool) -> None:  # noqa: ARG001
        if cache_hit:
            out["cache hit"] = times.ir_initialization / 1e6
            return
        out["AST -> TTIR"] = times.ir_initialization / 1e6
        for stage, us in times.lowering_stages:
            out["ptxas" if stage == "cubin" else stage] = us / 1e6
        out["cache store"] = times.store_results / 1e6

    out = times
    previous = knobs.compilation.listener
    knobs.compilation.listener = listener
    try:
        yield
    finally:
        knobs.compilation.listener = previous


def autotuned_constexprs(spec: dict) -> set[str]:
    """Constexprs the app's @triton.autotune or Inductor's autotuner chose (its Config
    kwargs): another of its configs may be pinned by setting them."""
    return set(((tuned_config(spec) or {}).get("kwargs") or {}).keys())


def parse_config(text: str | None, spec: dict) -> dict[str, Any]:
    """`num_warps=4,num_stages=2` -> {"num_warps": 4, "num_stages": 2}. Autotuned
    constexprs (`BLOCK_N=64`) may be set too: that pins another autotune config."""
    if not text:
        return {}
    out: dict[str, Any] = {}
    constexprs = {e.get("name") for e in spec.get("constexprs", [])} | set(spec.get("declared_constexprs", []))
    tuned = autotuned_constexprs(spec)
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key or not raw:
            raise UsageError(f"--config {item!r}: expected KEY=VALUE", "e.g. --config num_warps=4,num_stages=2")
        if key in constexprs and key not in tuned:
            raise KerncapError(
                f"--config {key}: {key} is a constexpr of {spec['function']} that the autotuner did not choose",
                "kerncap cannot tell how the launch grid depends on it; pin compile options (num_warps, "
                "num_stages, num_ctas, maxnreg, ...) or the autotuned constexprs "
                f"({', '.join(sorted(tuned)) or 'none in this kernel'}; --list-configs shows the recorded configs)",
            )
        out[key] = _parse_scalar(raw)
    return out


def split_overrides(overrides: dict[str, Any] | None, spec: dict) -> tuple[dict[str, Any], dict[str, Any]]:
    """(compile options, autotuned constexpr values) of a parsed --config."""
    tuned = autotuned_constexprs(spec)
    options = {k: v for k, v in (overrides or {}).items() if k not in tuned}
    constexprs = {k: v for k, v in (overrides or {}).items() if k in tuned}
    return options, constexprs


def _parse_scalar(raw: str):
    low = raw.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(raw)
        except ValueError:
            pass
    return raw


@dataclass
class AutotuneConfigs:
    """The autotune configs a Triton capture recorded (`recompile --list-configs`)."""
    function: str                      # the Triton function
    candidates: list[Candidate]        # each with .config (a --config value), .grid, .captured
    captured_constexprs: dict[str, Any]  # the constexprs of the captured launch
    captured_grid: list[int]


def autotune_configs(reproducer: str | os.PathLike) -> AutotuneConfigs:
    """The autotune configs of a Triton reproducer, each with the grid it launches."""
    spec = load_spec(Path(reproducer))
    return AutotuneConfigs(function=spec["function"], candidates=candidates(spec),
                           captured_constexprs=captured_constexprs(spec), captured_grid=list(spec["launch"]["grid"]))
