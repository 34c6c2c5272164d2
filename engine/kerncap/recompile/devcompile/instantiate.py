"""Spelling the captured kernel instance as C++, from its demangled name.

The reduced TU (kerncap.recompile.devcompile.reduce) blanks the host code whose launches made the
front end instantiate kernel templates, so the captured instance is instantiated
explicitly instead: `void qmv::mul_mat_vec_q<(qmv::qtype)2, 3>(void const*, ...)`
becomes `template __global__ void qmv::mul_mat_vec_q<(qmv::qtype)2, 3>(void const*, ...);`
at the end of the TU. The demangler's output is C++ for the usual arguments (types,
integers, enumerators as casts, bool, pointers to functions and variables). It is not
for lambdas and local types (`main::{lambda(int)#1}`, `run()::Local`): those kernels are
left to the code that launches them, and `keep` names the enclosing functions whose
bodies the reduction must keep. A spelling the compiler reads as another instance is
caught by the recompile's check of the mangled name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kerncap.sources.names import demangle, is_mangled

_UNSPELLABLE = ("{lambda", "{unnamed", "{parm#", "'lambda", "'unnamed", "__nv_dl_", "__nv_hdl_", "decltype",
                "{default arg#", "string literal", "(anonymous class)", "(anonymous struct)", "(anonymous union)")
_ANON = "(anonymous namespace)::"


@dataclass(frozen=True)
class Spelling:
    base: str  # unqualified kernel name
    instantiation: str  # the explicit instantiation, "" when none is needed or possible
    keep: frozenset[str]  # functions whose bodies must stay (they instantiate the kernel)
    reason: str = ""  # why no instantiation could be spelled (a template kernel)


def _matching(text: str, close: int, open_: str, close_ch: str) -> int | None:
    depth = 0
    for i in range(close, -1, -1):
        if text[i] == close_ch:
            depth += 1
        elif text[i] == open_:
            depth -= 1
            if depth == 0:
                return i
    return None


def _qualified_parts(qualified: str) -> list[str]:
    """`a::b<x::y>::c` -> ["a", "b<x::y>", "c"] (split at top-level ::)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(qualified):
        c = qualified[i]
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
        elif c == ":" and depth == 0 and qualified[i : i + 2] == "::":
            parts.append(qualified[start:i])
            start = i + 2
            i += 1
        i += 1
    parts.append(qualified[start:])
    return parts


def spell(mangled: str) -> Spelling:
    """How to instantiate the kernel `mangled` in a reduced TU."""
    if not is_mangled(mangled):  # extern "C": not a template, emitted as it is
        return Spelling(mangled, "", frozenset())
    text = demangle(mangled)
    if text == mangled:
        from kerncap.sources.names import base_name

        return Spelling(base_name(mangled), "", frozenset(), "no demangler (c++filt) to spell the kernel's template arguments")
    text = text.strip()
    if not text.endswith(")"):
        return Spelling(text, "", frozenset(), f"cannot read the demangled name {text!r}")
    open_params = _matching(text, len(text) - 1, "(", ")")
    if open_params is None:
        return Spelling(text, "", frozenset(), f"cannot read the demangled name {text!r}")
    params = text[open_params + 1 : -1]
    head = text[:open_params].rstrip()
    template = head.endswith(">")
    if template:
        open_args = _matching(head, len(head) - 1, "<", ">")
        if open_args is None:
            return Spelling(head, "", frozenset(), f"cannot read the demangled name {text!r}")
        name_part, args = head[:open_args], head[open_args:]
    else:
        name_part, args = head, ""
    # the return type of a template function comes first ("void ")
    name_part = re.sub(r"^\s*void\s+", "", name_part).strip()
    base = _qualified_parts(name_part)[-1]
    if not template:
        return Spelling(base, "", frozenset())
    keep = frozenset(re.findall(r"(?:^|[\s<,(&*])([A-Za-z_]\w*)(?:\([^()]*\))?::\{", text)
                     + re.findall(r"&([A-Za-z_]\w*)\s*,\s*\d+u?\s*>", text)  # __nv_dl_tag<..., &f, N>
                     + re.findall(r"([A-Za-z_]\w*)\([^()]*\)::[A-Za-z_]", text))  # run()::Local
    bad = next((u for u in _UNSPELLABLE if u in text), None)
    if bad or keep:
        return Spelling(base, "", keep, f"its template arguments name a lambda or local type ({bad or 'local'}), "
                                        "which C++ cannot spell outside the function")
    # Where the template lives: namespaces to reopen for an anonymous one, then the
    # qualified name relative to it. Elsewhere `(anonymous namespace)::` is dropped:
    # qualified lookup finds its members through the enclosing namespace.
    path = _qualified_parts(name_part)
    if "(anonymous namespace)" in path:
        last = len(path) - 1 - path[::-1].index("(anonymous namespace)")
        outer, inner = path[:last + 1], path[last + 1 :]
    else:
        outer, inner = [], path
    opens = "".join("namespace { " if p == "(anonymous namespace)" else f"namespace {p} {{ " for p in outer)
    closes = "} " * len(outer)
    qualified = "::".join(inner)
    body = f"template __attribute__((global)) void {qualified}{_fix(args)}({_fix(params)});"
    return Spelling(base, f"{opens}{body} {closes}".strip(), frozenset())


# nvcc's qualifier for an entity of internal linkage (a static function, in the module id's
# name): `_INTERNAL_305daebf_8_unary_cu_f8002d80_27297::op_gelu_erf`; in the TU it is `op_gelu_erf`.
_INTERNAL = re.compile(r"\b_INTERNAL_\w+::")
# The demangler's address of a function template's instance, `&(void f<T>(void const*, long))`:
# C++ writes `&f<T>` (the parameter's type picks the overload).
_FUNCTION_ADDRESS = re.compile(r"&\((?:[^()<>]|<[^()]*>)*?\s([A-Za-z_][\w:]*(?:<[^()]*>)?)\s*\([^()]*\)\)")


def _fix(text: str) -> str:
    """Demangler spellings that are not C++: drop `(anonymous namespace)::` and nvcc's
    `_INTERNAL_…::`, `&(void f<T>(…))` as `&f<T>`, `(void)`."""
    text = _FUNCTION_ADDRESS.sub(r"&\1", _INTERNAL.sub("", text.replace(_ANON, "")))
    return "" if text.strip() == "void" else text
