"""Decoding the tagged values the capture hook wrote (pyhooks/_kerncap_triton_record.py,
`encode_value`): constexpr values and scalar arguments of a Triton kernel."""

from __future__ import annotations

import importlib
from typing import Any, Callable

from kerncap.errors import KerncapError


def decode_value(enc: dict, *, what: str, resolve_jit: Callable[[str | None, str | None], Any] | None = None) -> Any:
    """The Python value of one encoded value; `what` names it in errors."""
    kind = enc.get("type")
    if kind == "none":
        return None
    if kind in ("bool", "int", "str"):
        return enc["value"]
    if kind == "float":
        return float(enc["repr"]) if "repr" in enc else float(enc["value"])
    if kind == "tuple":
        return tuple(decode_value(x, what=what, resolve_jit=resolve_jit) for x in enc["items"])
    if kind == "dtype":
        import triton.language as tl

        return tl.dtype(enc["value"])
    if kind == "jit":
        if resolve_jit is None:
            raise KerncapError(f"{what} is the Triton function {enc.get('name')}, which cannot be resolved here")
        return resolve_jit(enc.get("module"), enc.get("name"))
    raise KerncapError(
        f"{what} was captured as {enc.get('value', '?')!r}, a value kerncap cannot rebuild ({kind})",
        "pass a plain int/float/bool/str/dtype/Triton function as this constexpr, or edit source/triton.json",
    )


def jit_resolver(kernel_module) -> Callable[[str | None, str | None], Any]:
    """Find a Triton function passed as a constexpr: in the reproducer's kernel module
    first (its snapshot holds the app's helpers), else in its original module."""

    def resolve(module_name: str | None, name: str | None):
        if name and hasattr(kernel_module, name):
            return getattr(kernel_module, name)
        if module_name and name:
            try:
                return getattr(importlib.import_module(module_name), name)
            except (ImportError, AttributeError):
                pass
        raise KerncapError(
            f"the Triton function {name} (module {module_name}) passed as a constexpr was not found",
            "define or import it in source/kernel.py",
        )

    return resolve
