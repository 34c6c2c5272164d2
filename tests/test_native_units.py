"""The checks of the native capture code (tests/test_cubin_elf.py) against a built
interposer, which they require instead of skipping without one: the C++ unit test
under AddressSanitizer against real cubins, and libkerncap_inject.so's exported
symbols. No GPU is involved, so this is marked `native`, not `gpu`: the CPU suite
deselects it by default (a checkout has no build); the GPU flow runs it after the package
build (tests/gpu/run.sh selects `gpu or native`), and by hand after a native build:

    cmake -S . -B build/dev -G Ninja && ninja -C build/dev
    KERNCAP_INJECT_LIB=$PWD/build/dev/native/capture/libkerncap_inject.so \\
        python3 -m pytest -m native -o addopts="" tests/test_native_units.py
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.native


def test_native_units_and_exports_of_the_built_interposer(tmp_path):
    import test_cubin_elf as units

    from kerncap.core.native import inject_library

    inject_library()  # the built interposer is there: the export check below cannot skip
    units.test_units_pass_and_agree_with_python(units.build_units(tmp_path))
    units.test_exported_symbols_only_the_injection_api()
