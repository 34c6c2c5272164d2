"""One table of element types (kerncap.core.dtypes): the native replay core's own tables
(compare.cpp and its kernels, fill.cpp and its kernels) must say what it says. The native
code cannot import Python, so this test reads the C++ sources and cross-checks them:
a dtype added to one side only, a size, an integer range or a C++ type that disagrees
fails here instead of as a wrong verdict on the GPU."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kerncap.core import dtypes as dt

NATIVE = Path(__file__).resolve().parent.parent / "native" / "replay"
COMPARABLE = {d.name for d in dt.TABLE.values() if d.compare}


def _read(name: str) -> str:
    return (NATIVE / name).read_text()


def compare_table() -> dict[str, tuple[str, int]]:
    """compare.cpp's kDtypes: name -> (kernel, size)."""
    body = _read("compare.cpp").split("kDtypes[] = {", 1)[1].split("};", 1)[0]
    return {n: (k, int(s)) for n, k, s in re.findall(r'\{"(\w+)",\s*"(\w+)",\s*(\d+)\}', body)}


def fill_table() -> dict[str, str]:
    """fill.cpp's kFillKernels: name -> kernel."""
    body = _read("fill.cpp").split("kFillKernels[] = {", 1)[1].split("};", 1)[0]
    return dict(re.findall(r'\{"(\w+)",\s*"(\w+)"\}', body))


def kernels(source: str, macro: str) -> dict[str, tuple[str, ...]]:
    """Instantiations of a kernel macro: suffix -> the macro's other arguments."""
    return {m[0]: tuple(a.strip() for a in m[1].split(","))
            for m in re.findall(rf"^{macro}\((\w+),\s*([^)]*)\)", _read(source), re.M)}


def test_the_gpu_compares_exactly_the_comparable_dtypes_with_their_sizes():
    table = compare_table()
    assert set(table) == COMPARABLE == set(dt.COMPARABLE)
    for name, (_, size) in table.items():
        assert size == dt.itemsize(name), name


def test_every_compare_kernel_exists_with_the_dtypes_cxx_type():
    defined = kernels("compare_kernels.cu", "KC_CMP_KERNEL")
    for name, (kernel, _) in compare_table().items():
        suffix = kernel.removeprefix("kc_cmp_")
        assert suffix in defined, f"{kernel} is not defined in compare_kernels.cu"
        cxx, is_float = defined[suffix]
        assert cxx in dt.TABLE[name].cxx, (name, cxx)
        assert (is_float == "true") == dt.is_float(name), name


def test_the_gpu_fills_the_comparable_dtypes_with_their_kernels():
    table = fill_table()
    assert set(table) == COMPARABLE
    defined = kernels("perturb_kernels.cu", "KC_FILL_KERNEL")
    for name, kernel in table.items():
        suffix = kernel.removeprefix("kc_fill_")
        assert suffix in defined and defined[suffix][0] in dt.TABLE[name].cxx, (name, kernel)


def test_fill_ranges_of_integers_are_the_tables():
    text = _read("fill.cpp")
    lows = dict(re.findall(r't == "(\w+)" \? (-?[\d.]+)', text.split("const double lo", 1)[1].split(";", 1)[0]))
    highs = dict(re.findall(r't == "(\w+)" \? (-?[\d.]+)', text.split("const double hi", 1)[1].split(";", 1)[0]))
    integers = {n for n in COMPARABLE if not dt.is_float(n)}
    assert set(lows) == set(highs) == integers
    for name in integers:
        assert (float(lows[name]), float(highs[name])) == dt.value_range(name), name


@pytest.mark.parametrize("spelling,expected", [
    ("float", ("float", "float32")), ("__nv_bfloat16", ("float", "bfloat16")), ("int", ("integer", "int32")),
    ("unsigned char", ("integer", "uint8")), ("size_t", ("integer", None)),
])
def test_cxx_spellings(spelling, expected):
    from kerncap.replay.region_types import classify_cxx_type

    assert dt.CXX_TYPES[spelling] == expected
    assert classify_cxx_type(f"{spelling} const*")[1:] == expected


def test_numpy_types_have_the_sizes():
    for d in dt.TABLE.values():
        if d.numpy:
            assert dt.numpy_type(d.name)().itemsize == d.size, d.name
