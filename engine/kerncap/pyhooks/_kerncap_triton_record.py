"""Records what is needed to recompile a captured Triton kernel (capture mode only).

For every launch of a Triton kernel whose name matches KERNCAP_KERNEL/KERNCAP_MATCH,
outside autotuner benchmarking, and until this process has seen KERNCAP_DISPATCH + 1
such launches, the record of the launched binary is written to
$KERNCAP_OUT/triton-<pid>.json *before* the launch (the capturing process may exit
right after the captured launch). Records are keyed by the sha256 of the cubin, which
is how the engine pairs them with the capture's `cubins/<sha256>.cubin`.

Launch paths hooked:
  * triton.compiler.compiler.CompiledKernel.run: every Triton launch (JITFunction.run,
    kernel[grid](...), Inductor's TritonCompileResult launchers) fetches its launcher
    through this property; matching kernels get a recording launcher.
  * Inductor's StaticTritonCompileResult.make_launcher (torch >= 2.8 launches most
    kernels through torch's static CUDA launcher, bypassing Triton's): the generated
    launcher's `runner` is wrapped.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
import weakref

import _kerncap_hooks as hooks

FORMAT = "kerncap-triton"
FORMAT_VERSION = 1
MAX_LAUNCHES_PER_KERNEL = 32

# -- which launches ----------------------------------------------------------------------


class _Selection:
    def __init__(self) -> None:
        self.pattern = os.environ.get("KERNCAP_KERNEL", "")
        self.mode = os.environ.get("KERNCAP_MATCH", "substring")
        try:  # one dispatch, or a set's list: record up to the last
            self.limit = max(int(x) for x in (os.environ.get("KERNCAP_DISPATCH") or "0").split(","))
        except ValueError:
            self.limit = 0
        # Bucket sets and NVTX/rank/device selection count launches this hook cannot
        # tell apart: record every launch (each kernel keeps its newest launches).
        if os.environ.get("KERNCAP_BUCKETS") == "1" or any(
                os.environ.get(v) for v in ("KERNCAP_NVTX", "KERNCAP_RANK", "KERNCAP_PID", "KERNCAP_DEVICE")):
            self.limit = sys.maxsize
        self._regex = None
        if self.mode == "regex":
            try:
                self._regex = re.compile(self.pattern)
            except re.error as exc:
                hooks.log(f"KERNCAP_KERNEL is not a valid regex ({exc}); no Triton metadata recorded")
                self.pattern = ""
        self._cache: dict[str, bool] = {}
        self._seen = 0
        self._lock = threading.Lock()

    def matches(self, name) -> bool:
        hit = self._cache.get(name)
        if hit is None:
            if not self.pattern or not isinstance(name, str):
                hit = False
            elif self.mode == "exact":
                hit = name == self.pattern
            elif self._regex is not None:
                hit = self._regex.search(name) is not None
            else:
                hit = self.pattern in name
            self._cache[name] = hit
        return hit

    def take(self) -> int | None:
        """Count a real (non-benchmark) matching launch; its index while it may be captured.
        A launch recorded into a CUDA graph (stream capture) does not run now and is not
        counted, but is always recorded: every later graph launch runs with its arguments."""
        if hooks.benchmark_depth() > 0:
            return None
        if _stream_capturing():
            with self._lock:
                return self._seen
        with self._lock:
            index = self._seen
            self._seen += 1
        return index if index <= self.limit else None


_selection: _Selection | None = None


def _stream_capturing() -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_current_stream_capturing())
    except Exception:  # no CUDA in torch, or an old torch: nothing is being captured
        return False

# -- value encoding (decoded by kerncap.triton.values) ------------------------------------


def encode_value(v):
    if v is None:
        return {"type": "none"}
    if isinstance(v, bool):
        return {"type": "bool", "value": v}
    if isinstance(v, int):
        return {"type": "int", "value": v}
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return {"type": "float", "repr": repr(v)}
        return {"type": "float", "value": v}
    if isinstance(v, str):
        return {"type": "str", "value": v}
    if isinstance(v, (tuple, list)):
        return {"type": "tuple", "items": [encode_value(x) for x in v]}
    cls = type(v)
    mod = cls.__module__ or ""
    if mod.startswith("triton.language") and cls.__name__ == "constexpr":
        return encode_value(v.value)
    if mod.startswith("triton.language") and "dtype" in cls.__name__:
        return {"type": "dtype", "value": str(v)}
    if any(c.__name__ == "JITFunction" for c in cls.__mro__):
        return {"type": "jit", "name": getattr(getattr(v, "fn", None), "__name__", None) or str(v),
                "module": getattr(v, "module", None)}
    return {"type": "repr", "value": repr(v)[:500]}


def _jsonable(v, depth=0):
    """Best-effort JSON for metadata/config dicts (never raises)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else repr(v)
    if depth > 6:
        return repr(v)[:200]
    if isinstance(v, dict):
        return {str(k): _jsonable(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_jsonable(x, depth + 1) for x in v]
    if hasattr(v, "_asdict"):
        return _jsonable(v._asdict(), depth + 1)
    if hasattr(v, "__dataclass_fields__"):
        return {k: _jsonable(getattr(v, k, None), depth + 1) for k in v.__dataclass_fields__}
    return repr(v)[:200]


def encode_arg(name, v) -> dict:
    out = {"name": name}
    try:
        if v is None:
            out["kind"] = "none"
        elif isinstance(v, bool):
            out.update(kind="bool", value=v)
        elif isinstance(v, int):
            out.update(kind="int", value=v)
        elif isinstance(v, float):
            out.update(kind="float", value=v if v == v and abs(v) != float("inf") else repr(v))
        elif hasattr(v, "data_ptr") and hasattr(v, "dtype") and hasattr(v, "stride"):
            out.update(kind="tensor", **_tensor(v))
        elif hasattr(v, "base") and hasattr(v, "block_shape") and hasattr(v.base, "data_ptr"):
            out.update(kind="tensordesc", base=_tensor(v.base), shape=_jsonable(list(v.shape)),
                       strides=_jsonable(list(v.strides)), block_shape=_jsonable(list(v.block_shape)))
        else:
            out.update(kind="value", value=encode_value(v))
    except Exception as exc:
        out.update(kind="unknown", error=f"{type(exc).__name__}: {exc}")
    return out


def _tensor(t) -> dict:
    return {
        "dtype": str(t.dtype).replace("torch.", ""),
        "shape": [int(s) for s in t.shape],
        "strides": [int(s) for s in t.stride()],
        "data_ptr": int(t.data_ptr()),
        "element_size": int(t.element_size()),
        "device": str(getattr(t, "device", "")),
    }


# -- where we are called from --------------------------------------------------------------


def _find_frame(module: str, name: str, max_depth: int = 48):
    """The nearest caller frame whose `self` is an instance of module.name (or a subclass)."""
    f = sys._getframe(2)
    for _ in range(max_depth):
        if f is None:
            return None
        obj = f.f_locals.get("self")
        if obj is not None and any(c.__name__ == name and c.__module__ == module for c in type(obj).__mro__):
            return f
        f = f.f_back
    return None


def _find_self(module: str, name: str, max_depth: int = 48):
    f = _find_frame(module, name, max_depth)
    return f.f_locals.get("self") if f is not None else None


def _config_dict(config) -> dict:
    """A triton.Config as JSON: its kwargs (encoded) and its other plain attributes."""
    out = {"kwargs": {k: encode_value(v) for k, v in dict(getattr(config, "kwargs", {})).items()}}
    for k, v in vars(config).items():
        if k != "kwargs" and not callable(v):
            out[k] = _jsonable(v)
    return out


def _grid_of(grid, meta: dict):
    """A launch grid (programs) as the app's grid callable gives it for `meta`."""
    g = grid(meta) if callable(grid) else grid
    g = tuple(int(x) for x in g)
    return list(g + (1,) * (3 - len(g)))


def _triton_autotune_config():
    frame = _find_frame("triton.runtime.autotuner", "Autotuner")
    tuner = frame.f_locals.get("self") if frame is not None else None
    config = getattr(tuner, "best_config", None) if tuner is not None else None
    if config is None:
        return None
    out = _config_dict(config)
    out["autotuner_keys"] = _jsonable(getattr(tuner, "keys", None))
    out["configs"] = _autotune_candidates(tuner, frame.f_locals)
    return out


def _autotune_candidates(tuner, scope: dict) -> list[dict]:
    """Every config of the app's @triton.autotune with the grid the app's grid callable
    gives for it: pinning another config replays it with its own number of programs."""
    kwargs = dict(scope.get("kwargs") or {})
    grid = kwargs.pop("grid", None)
    kwargs.pop("warmup", None)
    nargs = dict(zip(getattr(tuner, "arg_names", []), scope.get("args") or ()))
    out = []
    for cfg in list(getattr(tuner, "configs", None) or [])[:64]:
        entry = _config_dict(cfg)
        if grid is not None:
            try:
                entry["grid"] = _grid_of(grid, {**nargs, **kwargs, **cfg.all_kwargs()})
            except Exception as exc:  # the app's grid callable: record why, never fail
                entry["grid_error"] = f"{type(exc).__name__}: {exc}"
        out.append(entry)
    return out


def _inductor_info(autotuner, config) -> dict | None:
    if autotuner is None:
        return None
    meta = getattr(autotuner, "inductor_meta", {}) or {}
    info = {
        "kernel_name": meta.get("kernel_name"),
        "generated_source": getattr(autotuner, "filename", None),
        "heuristic_type": str(getattr(autotuner, "heuristic_type", "")),
        "size_hints": _jsonable(getattr(autotuner, "size_hints", None)),
        "mutated_arg_names": _jsonable(getattr(autotuner, "mutated_arg_names", None)),
    }
    if config is not None:
        info["config"] = _config_dict(config)
    info["configs"] = [_config_dict(c) for c in _inductor_candidates(autotuner)[:64]]
    return info


# CachingAutotuner -> the longest list of configs it was seen with. Its `configs` are
# dropped once compiled, `compile_results` shrink to the winner after benchmarking, and
# coordinate descent makes the captured launcher later still: remember them early.
_inductor_configs: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _inductor_candidates(autotuner) -> list:
    """The configs Inductor's heuristics offered this autotuner (another may be pinned).
    One only when Inductor's autotune cache answered (TORCHINDUCTOR_FORCE_DISABLE_CACHES=1
    makes it tune again)."""
    current = list(getattr(autotuner, "configs", None) or [])
    if not current:
        current = [r.config for r in (getattr(autotuner, "compile_results", None) or [])
                   if getattr(r, "config", None) is not None]
    try:
        known = _inductor_configs.get(autotuner)
        if known is None or len(current) > len(known):
            _inductor_configs[autotuner] = known = current
    except TypeError:  # not weak-referenceable
        known = current
    return known


# -- the record store ------------------------------------------------------------------------


class _Store:
    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.kernels: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.snapshots: dict[str, str | None] = {}

    @property
    def path(self) -> str:
        return os.path.join(self.out_dir, f"triton-{os.getpid()}.json")

    def snapshot(self, filename: str | None) -> str | None:
        """Copy the kernel's module file into the run directory once (content addressed)."""
        if not filename:
            return None
        if filename in self.snapshots:
            return self.snapshots[filename]
        rel = None
        try:
            with open(filename, "rb") as fh:
                data = fh.read()
            rel = f"triton-src/{hashlib.sha256(data).hexdigest()}.py"
            dest = os.path.join(self.out_dir, rel)
            if not os.path.exists(dest):
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                _atomic_write(dest, data)
        except OSError as exc:
            hooks.log(f"cannot snapshot {filename} ({exc})", f"snap:{filename}")
            rel = None
        self.snapshots[filename] = rel
        return rel

    def add_launch(self, static: dict, launch: dict) -> None:
        with self.lock:
            record = self.kernels.get(static["cubin_sha256"])
            if record is None:
                record = dict(static, launches=[])
                self.kernels[static["cubin_sha256"]] = record
            record["launches"].append(launch)
            del record["launches"][:-MAX_LAUNCHES_PER_KERNEL]
            doc = {
                "format": FORMAT, "format_version": FORMAT_VERSION, "pid": os.getpid(),
                "argv": list(sys.argv), "cwd": os.getcwd(),
                "triton_version": _triton_version(), "kernels": self.kernels,
            }
            _atomic_write(self.path, (json.dumps(doc, indent=1) + "\n").encode())


def _atomic_write(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _triton_version():
    mod = sys.modules.get("triton")
    return getattr(mod, "__version__", None)


_store: _Store | None = None

# -- static part of a record ----------------------------------------------------------------


def _function_info(jitfn) -> dict:
    pyfn = getattr(jitfn, "fn", None)
    code = getattr(pyfn, "__code__", None)
    info = {
        "name": getattr(pyfn, "__name__", None) or getattr(jitfn, "_fn_name", None),
        "module": getattr(jitfn, "module", None),
        "file": getattr(code, "co_filename", None),
        "first_line": getattr(code, "co_firstlineno", None),
        "arg_names": list(getattr(jitfn, "arg_names", []) or []),
        "declared_constexprs": [],
        "source": None,
    }
    params = getattr(jitfn, "params", None) or []
    info["declared_constexprs"] = [p.name for p in params if getattr(p, "is_constexpr", False)]
    try:
        import inspect

        info["source"] = inspect.getsource(pyfn) if pyfn is not None else None
    except (OSError, TypeError):
        info["source"] = getattr(jitfn, "src", None)
    if info["source"] is None:
        info["source"] = getattr(jitfn, "src", None)
    if _store is not None:
        info["module_snapshot"] = _store.snapshot(info["file"])
    info["sys_path"] = [p for p in sys.path if p]
    return info


def _paths(d: dict, arg_names: list) -> list:
    out = []
    for k, v in (d or {}).items():
        if isinstance(k, str):
            path = [arg_names.index(k)] if k in arg_names else None
            key_name = k
        else:
            path = list(k) if isinstance(k, tuple) else [k]
            key_name = arg_names[path[0]] if path and isinstance(path[0], int) and path[0] < len(arg_names) else None
        out.append({"path": path, "name": key_name, "value": v})
    return out


def _static_from_compiled(ck) -> dict:
    cubin = ck.asm.get("cubin") if hasattr(ck, "asm") else None
    if not isinstance(cubin, (bytes, bytearray)):
        raise ValueError(f"compiled kernel {ck.name} has no cubin (not a CUDA target?)")
    src = ck.src
    jitfn = getattr(src, "fn", None)
    fn = _function_info(jitfn)
    names = fn["arg_names"]
    return {
        "kernel": ck.name,
        "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
        "cubin_bytes": len(cubin),
        "launcher": "triton",
        "triton_version": _triton_version(),
        "function": fn,
        "signature": dict(getattr(src, "signature", {}) or {}),
        "constexprs": [dict(e, value=encode_value(e["value"])) for e in _paths(getattr(src, "constants", {}), names)],
        "attrs": [dict(e, value=_jsonable(e["value"])) for e in _paths(getattr(src, "attrs", {}), names)],
        "options": _jsonable(ck.metadata._asdict() if hasattr(ck.metadata, "_asdict") else ck.metadata),
        "shared": getattr(ck.metadata, "shared", None),
        "num_warps": getattr(ck.metadata, "num_warps", None),
    }


def _static_from_inductor_static(result, module) -> dict:
    """StaticTritonCompileResult: the cubin file and the metadata JSON Triton left in its
    cache, and the compile_meta Inductor compiled with."""
    kernel = result.kernel
    name = kernel.name
    cubin = None
    cubin_path = getattr(kernel, "cubin_path", None)
    if not cubin_path:
        try:
            cubin_path = os.path.join(
                module.triton_cache_dir(result.compile_meta.get("device", 0)),
                module.triton_hash_to_path_key(kernel.hash), f"{name}.cubin")
        except Exception:
            cubin_path = None
    if cubin_path and os.path.exists(cubin_path):
        with open(cubin_path, "rb") as fh:
            cubin = fh.read()
    elif getattr(kernel, "cubin_raw", None):
        cubin = kernel.cubin_raw
    elif getattr(kernel, "cubin", None):
        cubin = kernel.cubin
    if not cubin:
        raise ValueError(f"no cubin found for Inductor kernel {name} (looked at {cubin_path})")
    options = None
    if cubin_path:
        meta_path = os.path.join(os.path.dirname(cubin_path), f"{name}.json")
        try:
            with open(meta_path) as fh:
                options = json.load(fh)
        except (OSError, ValueError):
            options = None
    meta = result.compile_meta
    if options is None:
        options = {k: meta.get(k) for k in ("num_warps", "num_stages", "debug") if k in meta}
        options["sanitize_overflow"] = False
    autotuner = _find_self("torch._inductor.runtime.triton_heuristics", "CachingAutotuner")
    jitfn = getattr(autotuner, "fn", None)
    fn = _function_info(jitfn) if jitfn is not None else {"name": name, "arg_names": list(kernel.arg_names)}
    if autotuner is not None and not fn.get("module_snapshot") and _store is not None:
        fn["module_snapshot"] = _store.snapshot(getattr(autotuner, "filename", None))
        fn["file"] = fn.get("file") or getattr(autotuner, "filename", None)
    names = fn.get("arg_names") or list(kernel.arg_names)
    attrs = (meta.get("configs") or [{}])[0]
    return {
        "kernel": name,
        "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
        "cubin_bytes": len(cubin),
        "launcher": "inductor-static",
        "triton_version": _triton_version(),
        "function": fn,
        "signature": dict(meta.get("signature", {})),
        "constexprs": [dict(e, value=encode_value(e["value"])) for e in _paths(meta.get("constants", {}), names)],
        "attrs": [dict(e, value=_jsonable(e["value"])) for e in _paths(attrs if isinstance(attrs, dict) else {}, names)],
        "options": _jsonable(options),
        "shared": getattr(kernel, "shared", None),
        "num_warps": getattr(kernel, "num_warps", None),
        "inductor": _inductor_info(autotuner, result.config),
    }


# -- recording one launch -------------------------------------------------------------------


def _record(static: dict, index: int, grid, stream, names, args, extra: dict | None = None) -> None:
    launch = {
        "hook_dispatch": index,
        "grid": [int(g) for g in grid],
        "stream": _jsonable(stream),
        "args": [encode_arg(names[i] if names and i < len(names) else None, a) for i, a in enumerate(args)],
    }
    if extra:
        launch.update(extra)
    _store.add_launch(static, launch)


_compiled_info: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_compiled_runner: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _recording_runner(ck, real):
    """Triton's launcher signature: (gx, gy, gz, stream, function, packed_metadata,
    launch_metadata, enter_hook, exit_hook, *args); args are all kernel arguments."""

    def runner(*a, **kw):
        try:
            index = _selection.take()
            if index is not None:
                static = _compiled_info.get(ck)
                if static is None:
                    static = _static_from_compiled(ck)
                    _compiled_info[ck] = static
                extra = {"autotune_config": _triton_autotune_config()}
                tuner = _find_self("torch._inductor.runtime.triton_heuristics", "CachingAutotuner")
                if tuner is not None:
                    launchers = getattr(tuner, "launchers", None) or []
                    config = getattr(launchers[0], "config", None) if len(launchers) == 1 else None
                    extra["inductor"] = _inductor_info(tuner, config)
                _record(static, index, a[0:3], a[3], static["function"]["arg_names"], a[9:], extra)
        except Exception as exc:
            hooks.log(f"recording Triton launch of {getattr(ck, 'name', '?')} failed ({type(exc).__name__}: {exc})",
                      f"rec:{getattr(ck, 'name', '?')}")
        return real(*a, **kw)

    return runner


def _patch_compiled_kernel(module) -> None:
    cls = getattr(module, "CompiledKernel", None)
    prop = cls.__dict__.get("run") if cls is not None else None
    if not isinstance(prop, property) or prop.fget is None:
        hooks.log("triton CompiledKernel.run is not a property in this Triton: no Triton metadata recorded")
        return
    fget = prop.fget

    def run(self):
        real = fget(self)
        try:
            if not _selection.matches(getattr(self, "name", None)):
                return real
            cached = _compiled_runner.get(self)
            if cached is not None and cached[0] is real:
                return cached[1]
            wrapped = _recording_runner(self, real)
            _compiled_runner[self] = (real, wrapped)
            return wrapped
        except Exception as exc:
            hooks.log(f"Triton launch hook failed ({type(exc).__name__}: {exc})", "ck-run")
            return real

    cls.run = property(run, prop.fset, prop.fdel, prop.__doc__)


def _patch_inductor_static(module) -> None:
    cls = getattr(module, "StaticTritonCompileResult", None)
    original = cls.__dict__.get("make_launcher") if cls is not None else None
    if original is None:
        return  # this torch has no static launcher: CompiledKernel.run covers Inductor

    def make_launcher(self):
        static = None
        try:
            if _selection.matches(getattr(self.kernel, "name", None)):
                static = _static_from_inductor_static(self, module)
        except Exception as exc:
            hooks.log(f"reading Inductor kernel {getattr(self.kernel, 'name', '?')} failed ({type(exc).__name__}: {exc})")
        launcher = original(self)
        if static is not None:
            try:
                _wrap_static_runner(launcher, self.kernel, static)
            except Exception as exc:
                hooks.log(f"Inductor launch hook failed ({type(exc).__name__}: {exc})")
        return launcher

    cls.make_launcher = make_launcher


def _wrap_static_runner(launcher, kernel, static) -> None:
    """The generated launcher calls `runner(gx, gy, gz, stream, *call_args)` from its
    globals; call_args are the arguments that are not compile-time constants."""
    scope = launcher.__globals__
    real = scope["runner"]
    skip = set(getattr(kernel, "full_constexprs", None) or getattr(kernel, "constexprs", None) or [])
    names = [n for i, n in enumerate(kernel.arg_names) if i not in skip]

    def runner(*a, **kw):
        try:
            index = _selection.take()
            if index is not None:
                _record(static, index, a[0:3], a[3], names, a[4:])
        except Exception as exc:
            hooks.log(f"recording Inductor launch of {static['kernel']} failed ({type(exc).__name__}: {exc})",
                      f"rec:{static['kernel']}")
        return real(*a, **kw)

    scope["runner"] = runner


# -- entry ----------------------------------------------------------------------------------


def install(when_imported) -> None:
    global _selection, _store
    _selection = _Selection()
    _store = _Store(os.environ["KERNCAP_OUT"])
    when_imported("triton.compiler.compiler", _patch_compiled_kernel)
    when_imported("torch._inductor.runtime.triton_heuristics", _patch_inductor_static)
