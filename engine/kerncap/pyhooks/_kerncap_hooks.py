"""Post-import patches applied inside the captured app (loaded by sitecustomize).

Nothing here imports torch or triton: a meta-path finder waits for the app to import
the modules we patch and patches them right after they executed. Stdlib only: the
app's environment need not have kerncap installed.

Patches:
  * benchmark exclusion (every mode): while Triton's `Autotuner._bench`, Inductor's
    `CachingAutotuner.bench` / `benchmark_all_configs` or Inductor's GPU benchmarker
    run, the interposer's benchmark counter is raised, so their launches are neither
    counted as dispatches nor captured;
  * Triton metadata (capture mode): see _kerncap_triton_record.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.abc
import os
import sys
import threading

_logged: set[str] = set()


def log(message: str, once_key: str | None = None) -> None:
    if once_key is not None:
        if once_key in _logged:
            return
        _logged.add(once_key)
    try:
        sys.stderr.write(f"kerncap: {message}\n")
    except Exception:
        pass


# -- post-import patching ----------------------------------------------------------------

_PATCHES: dict[str, list] = {}


def when_imported(module_name: str, patch) -> None:
    """Call `patch(module)` once `module_name` has been imported (now, if it already is)."""
    module = sys.modules.get(module_name)
    if module is not None and getattr(module, "__spec__", None) is not None and not _initialising(module):
        _apply(module_name, patch, module)
        return
    _PATCHES.setdefault(module_name, []).append(patch)


def _initialising(module) -> bool:
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _apply(module_name: str, patch, module) -> None:
    try:
        patch(module)
    except Exception as exc:
        log(f"patching {module_name} failed ({type(exc).__name__}: {exc}); continuing without it")


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: asks the finders after it, then wraps the loader's
    exec_module so the patches run right after the module body."""

    def __init__(self) -> None:
        self._busy = threading.local()

    def find_spec(self, fullname, path, target=None):
        if fullname not in _PATCHES or getattr(self._busy, "name", None) == fullname:
            return None
        self._busy.name = fullname
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.name = None
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            try:
                original(module)
            finally:
                try:
                    del loader.exec_module  # back to the class's method
                except AttributeError:
                    pass
            for patch in _PATCHES.pop(fullname, []):
                _apply(fullname, patch, module)

        loader.exec_module = exec_module
        return spec


# -- benchmark exclusion -----------------------------------------------------------------


class _Interposer:
    """kerncap_benchmark_enter/exit of the CUPTI injection library (already loaded by the
    driver, or loaded here first: dlopen of the same path yields the same library)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fns = None  # (enter, exit) once resolved; () when unavailable

    def _resolve(self):
        with self._lock:
            if self._fns is None:
                path = os.environ.get("CUDA_INJECTION64_PATH")
                try:
                    if not path:
                        raise OSError("CUDA_INJECTION64_PATH is not set")
                    lib = ctypes.CDLL(path)
                    enter, leave = lib.kerncap_benchmark_enter, lib.kerncap_benchmark_exit
                    enter.restype = leave.restype = None
                    enter.argtypes = leave.argtypes = []
                    self._fns = (enter, leave)
                except (OSError, AttributeError) as exc:
                    log(f"autotuner launches cannot be excluded from dispatch counting ({exc})")
                    self._fns = ()
            return self._fns

    def enter(self) -> bool:
        fns = self._resolve()
        if fns:
            fns[0]()
            return True
        return False

    def exit(self) -> None:
        fns = self._fns
        if fns:
            fns[1]()


interposer = _Interposer()
_depth = threading.local()


def benchmark_depth() -> int:
    """How many benchmark wrappers this thread is inside (the hook's own count)."""
    return getattr(_depth, "n", 0)


def benchmarking(fn):
    """Wrap `fn` so the interposer's benchmark counter is raised while it runs."""
    if getattr(fn, "_kerncap_benchmark", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _depth.n = benchmark_depth() + 1
        raised = False
        try:
            raised = interposer.enter()
        except Exception as exc:  # a broken counter must not break the autotuner
            log(f"kerncap_benchmark_enter failed: {exc}", "bench-enter")
        try:
            return fn(*args, **kwargs)
        finally:
            _depth.n -= 1
            if raised:
                try:
                    interposer.exit()
                except Exception as exc:
                    log(f"kerncap_benchmark_exit failed: {exc}", "bench-exit")

    wrapper._kerncap_benchmark = True
    return wrapper


def wrap_methods(cls, names, wrap) -> list[str]:
    """Wrap the methods of `cls` (its own, not inherited ones) that exist; return their names."""
    done = []
    for name in names:
        attr = cls.__dict__.get(name)
        if attr is None:
            continue
        if isinstance(attr, (staticmethod, classmethod)):
            setattr(cls, name, type(attr)(wrap(attr.__func__)))
        elif callable(attr):
            setattr(cls, name, wrap(attr))
        else:
            continue
        done.append(name)
    return done


def _patch_triton_autotuner(module) -> None:
    cls = getattr(module, "Autotuner", None)
    if cls is None or not wrap_methods(cls, ["_bench"], benchmarking):
        log("triton.runtime.autotuner.Autotuner._bench not found: Triton autotuner launches will be counted")


def _patch_inductor_heuristics(module) -> None:
    cls = getattr(module, "CachingAutotuner", None)
    if cls is None or not wrap_methods(cls, ["bench", "benchmark_all_configs"], benchmarking):
        log("Inductor CachingAutotuner benchmark methods not found: its autotuning launches will be counted")


def _patch_inductor_benchmarking(module) -> None:
    # Every class of the module that defines its own benchmark_gpu (Benchmarker,
    # TritonBenchmarker, InductorBenchmarker, ...): covers max-autotune template choice.
    for value in list(vars(module).values()):
        if isinstance(value, type) and value.__module__ == module.__name__:
            wrap_methods(value, ["benchmark_gpu"], benchmarking)


# -- entry -------------------------------------------------------------------------------

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    when_imported("triton.runtime.autotuner", _patch_triton_autotuner)
    when_imported("torch._inductor.runtime.triton_heuristics", _patch_inductor_heuristics)
    when_imported("torch._inductor.runtime.benchmarking", _patch_inductor_benchmarking)
    if os.environ.get("KERNCAP_MODE") == "capture" and os.environ.get("KERNCAP_KERNEL") and os.environ.get("KERNCAP_OUT"):
        import _kerncap_triton_record as record

        record.install(when_imported)
    if not any(isinstance(f, _PostImportFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportFinder())
