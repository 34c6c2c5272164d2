"""Where the native parts live, and a clear message when they are missing.

The package build (scikit-build-core + CMake) installs `libkerncap_inject.so` and
`libkerncap_entry.so` into `kerncap/_native/` and the replay extension as `kerncap/_replay*.so`. Without a CUDA
toolkit at build time neither exists; everything else still works.
"""

from __future__ import annotations

import os
from pathlib import Path

from kerncap.errors import NativeUnavailable

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the kerncap package
NATIVE_DIR = PACKAGE_DIR / "_native"


def inject_library() -> Path:
    """Path of the CUPTI injection library (override: KERNCAP_INJECT_LIB)."""
    override = os.environ.get("KERNCAP_INJECT_LIB")
    path = Path(override) if override else NATIVE_DIR / "libkerncap_inject.so"
    if not path.is_file():
        raise NativeUnavailable(
            f"capture library not found: {path}",
            "kerncap was installed without the CUDA toolkit; reinstall on a machine with "
            "nvcc and CUPTI (pip install .) to capture.",
        )
    return path


def entry_library() -> Path | None:
    """Path of the entry-point library preloaded into a captured app, or None when it
    was not built (the capture then watches the driver through CUPTI alone). The
    injection library's sibling, so a KERNCAP_INJECT_LIB override brings its own."""
    path = inject_library().with_name("libkerncap_entry.so")
    return path if path.is_file() else None


def replay_module():
    """The pybind11 replay core, imported lazily (it loads libcuda only when used)."""
    try:
        from kerncap import _replay  # type: ignore[attr-defined]
    except ImportError as exc:
        raise NativeUnavailable(
            f"replay core not built ({exc})",
            "reinstall kerncap on a machine with the CUDA toolkit (pip install .) to replay.",
        ) from None
    return _replay


def report_to_capture_library() -> bool:
    """Have kerncap's capture library, when a profile or capture around this process
    loaded it (the driver does, inside cuInit, from CUDA_INJECTION64_PATH), write its
    exit report now. For a process that ends with os._exit (the replay server), which
    skips the atexit handler that writes it: a `kerncap profile` of a replay then found
    no report at all (docs/facts.md §33). False when the library is not loaded here."""
    import ctypes

    path = os.environ.get("CUDA_INJECTION64_PATH")
    if not path or not os.environ.get("KERNCAP_MODE"):
        return False
    try:  # RTLD_NOLOAD: the library the driver loaded, never a fresh copy
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        report = lib.kerncap_report_now
    except (OSError, AttributeError):
        return False
    report.restype = None
    report.argtypes = []
    report()
    return True
