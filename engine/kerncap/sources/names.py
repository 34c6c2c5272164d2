"""Kernel names: demangling, the base name a source grep looks for, telling library
kernels (no source in the user's tree) apart from the user's own, and the parameter types
of a demangled signature."""

from __future__ import annotations

import re
import shutil
import subprocess

from kerncap.core import dtypes as dt

_LIBRARY_PATTERNS = [
    (re.compile(r"^nvjet_"), "cuBLASLt's nvjet GEMM kernels ship as binaries with CUDA"),
    (re.compile(r"cublas|cublasLt", re.I), "cuBLAS kernels ship as binaries with CUDA"),
    (re.compile(r"xmma|^sm\d+_|^ampere_|^volta_|^turing_|^hopper_", re.I), "cuBLAS/cuDNN kernels ship as binaries with CUDA"),
    (re.compile(r"cudnn", re.I), "cuDNN kernels ship as binaries"),
    (re.compile(r"cutlass", re.I), "a CUTLASS kernel instantiated outside this tree (e.g. inside cuBLAS or PyTorch)"),
    (re.compile(r"^(at|c10)::|_ZN2at|_ZN3c10"), "a PyTorch (ATen) kernel: its source is PyTorch's, not this tree's"),
    (re.compile(r"^triton_|^triton\b"), "a Triton kernel: its source is Python (handled by the Triton path)"),
]


def is_mangled(name: str) -> bool:
    return name.startswith("_Z")


def demangle_all(names: list[str]) -> dict[str, str]:
    """Demangled form of each name via c++filt; names it cannot demangle map to themselves."""
    out = {n: n for n in names}
    mangled = [n for n in names if is_mangled(n)]
    exe = shutil.which("c++filt") or shutil.which("cu++filt")
    if not mangled or exe is None:
        return out
    proc = subprocess.run([exe], input="\n".join(mangled) + "\n", capture_output=True, text=True, check=False)
    lines = proc.stdout.splitlines()
    if proc.returncode == 0 and len(lines) == len(mangled):
        out.update(zip(mangled, lines))
    return out


def demangle(name: str) -> str:
    return demangle_all([name])[name]


def base_name(name: str) -> str:
    """The unqualified function name: `kcfix::deep_kernel(float*, ...)` -> `deep_kernel`,
    `_Z12scale_kernelIfEvPT_iS0_` -> `scale_kernel`."""
    text = demangle(name) if is_mangled(name) else name
    if is_mangled(text):  # no demangler: read the first source name(s) of the mangling
        return _base_from_mangled(text) or text
    text = _strip_balanced_tail(text, "(", ")")
    text = _strip_balanced_tail(text, "<", ">")
    text = text.rsplit("::", 1)[-1]
    return text.split()[-1] if text.split() else text


def _strip_balanced_tail(text: str, open_: str, close: str) -> str:
    """Remove a trailing balanced `(...)`/`<...>` group (parameters, template arguments)."""
    text = text.strip()
    if not text.endswith(close):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        if text[i] == close:
            depth += 1
        elif text[i] == open_:
            depth -= 1
            if depth == 0:
                return text[:i].strip()
    return text


def _base_from_mangled(name: str) -> str | None:
    m = re.match(r"_Z(N(?:[rVK]*))?((?:\d+[A-Za-z_]\w*)+)", name)
    if not m:
        return None
    parts, rest = [], m.group(2)
    while rest and rest[0].isdigit():
        n = int(re.match(r"\d+", rest).group())
        digits = len(str(n))
        parts.append(rest[digits : digits + n])
        rest = rest[digits + n :]
        if not m.group(1):
            break
    return parts[-1] if parts else None


def library_reason(name: str, demangled: str | None = None) -> str | None:
    """Why a kernel of this name has no source in the user's tree, or None if it may have."""
    for pattern, why in _LIBRARY_PATTERNS:
        if pattern.search(name) or (demangled and pattern.search(demangled)):
            return why
    return None


# -- demangled C++ parameter types (what a pointer parameter points at: kerncap.replay.region_types,
# kerncap.recompile.fusion) --

QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict)\b")


def cxx_parameter_types(demangled: str | None) -> list[str] | None:
    """The parameter types of a demangled function name, e.g. "void k<3>(float const*,
    int)" -> ["float const*", "int"]; None when there is no parameter list."""
    if not demangled:
        return None
    text = demangled.strip()
    if not text.endswith(")"):
        return None
    depth, start = 0, None
    for i in range(len(text) - 1, -1, -1):  # the "(" that closes the final ")"
        c = text[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                start = i
                break
    if start is None:
        return None
    inner = text[start + 1 : -1].strip()
    if inner in ("", "void"):
        return []
    parts, depth, cur = [], 0, []
    for c in inner:
        if c in "<([":
            depth += 1
        elif c in ">)]":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur).strip())
    return parts


def classify_cxx_type(text: str) -> tuple[int, str, str | None]:
    """(pointer depth, role, dtype) of one parameter type: "float const*" -> (1, "float",
    "float32"); "float**" -> (2, "pointers", None); "int*" -> (1, "integer", "int32")."""
    depth = text.count("*")
    base = QUALIFIERS.sub(" ", text.split("*", 1)[0])
    base = " ".join(base.replace("&", " ").split())
    base = base.removeprefix("struct ").removeprefix("class ")
    if depth >= 2:
        return depth, "pointers", None
    if base in dt.CXX_TYPES:  # the C++ spellings of kerncap.core.dtypes
        role, dtype = dt.CXX_TYPES[base]
        return depth, role, dtype
    return depth, "unknown", None
