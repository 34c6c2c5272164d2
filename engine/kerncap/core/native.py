"""Where the native parts live, and a clear message when they are missing.

The package build (scikit-build-core + CMake) installs `libkerncap_inject.so` into
`kerncap/_native/` and the replay extension as `kerncap/_replay*.so`. Without a CUDA
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
