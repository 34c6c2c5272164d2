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


def test_sequence_specs_hand_binary_images_and_payloads_back_as_bytes():
    """On the H200 every sequence open failed with "UnicodeDecodeError: … byte 0xbe in
    position 18" (a cubin's e_machine, EM_CUDA): a std::string member bound read-write
    reads back as str. The replay core is importable without a GPU (libcuda is loaded
    when used)."""
    from kerncap.core.native import replay_module

    core = replay_module()
    cubin_head = b"\x7fELF\x02\x01\x01\x33" + bytes(10) + b"\xbe\x00"
    module, step = core.SeqModuleSpec(), core.SeqStepSpec()
    module.image, step.payload = cubin_head, b"\xff\xfe\x00\x80"
    assert module.image == cubin_head and step.payload == b"\xff\xfe\x00\x80"
