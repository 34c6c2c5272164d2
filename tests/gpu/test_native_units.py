"""The CPU checks of the native capture code (tests/test_cubin_elf.py) in the GPU flow,
where the package build has just produced libkerncap_inject.so: the C++ unit test
under AddressSanitizer against real cubins, and the interposer's exported symbols
(which the CPU suite can check only when a build is around)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


def test_native_units_and_exports_in_the_gpu_flow(tmp_path):
    import test_cubin_elf as units

    from kerncap.core.native import inject_library

    inject_library()  # the installed interposer is there: the export check below cannot skip
    units.test_units_pass_and_agree_with_python(units.build_units(tmp_path))
    units.test_exported_symbols_only_the_injection_api()
