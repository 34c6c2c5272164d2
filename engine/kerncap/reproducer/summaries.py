"""Typed results of `info`, `info SET` and `list`: each is the JSON document the CLI's
`--json` prints and MCP's tools return (a dict, so its shape stays the one documented in
docs/cli.md), with its fields also as typed attributes for Python callers."""

from __future__ import annotations

from typing import Any


class _Document(dict):
    """A JSON document with typed accessors; `to_dict()` is the plain copy for --json."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self)


def _field(name: str, doc: str) -> property:
    return property(lambda self: self.get(name), doc=doc)


class ReproducerInfo(_Document):
    """What `kerncap info DIR` shows about one reproducer."""

    path: str = _field("path", "the reproducer directory")
    capture: str = _field("capture", "its capture directory")
    kernel: dict = _field("kernel", "name, demangled, handle_kind, launch_api, module, attributes")
    launch: dict = _field("launch", "grid, block, shared_mem_bytes, stream, cooperative, attributes, graph, nvtx")
    params: list = _field("params", "each parameter's index, offset, size, hex and the region it points into")
    regions: list = _field("regions", "each captured region: id, base, size, api, kind, written, ...")
    globals: list = _field("globals", "the module globals restored with it")
    provenance: dict = _field("provenance", "where and how it was captured")
    stack: dict = _field("stack", "the recorded software and GPU stack (kerncap.core.stack)")
    sizes: dict = _field("sizes", "logical and stored bytes")
    payloads: dict = _field("payloads", "whether every chunk and the cubin is there (hashes with --verify)")
    warnings: list = _field("warnings", "what the capture warned about")
    reproducer: dict = _field("reproducer", "reproducer.json (or its error)")

    @property
    def payloads_ok(self) -> bool:
        return bool((self.get("payloads") or {}).get("ok"))

    def text(self) -> str:
        """What `kerncap info DIR` prints without --json."""
        from kerncap.reproducer.info import format_summary

        return format_summary(self)


class SetInfo(_Document):
    """What `kerncap info SET` shows about a reproducer set."""

    path: str = _field("path", "the set directory")
    kernel: str = _field("kernel", "the kernel every member holds")
    members: list = _field("members", "weight, dispatch, launches, signature, grid, block, payloads of each")
    refused: list = _field("refused", "buckets not captured, with why")
    coverage: float = _field("coverage", "the members' share of the kernel's in-app time")
    payloads_ok: bool = _field("payloads_ok", "every member complete")

    def text(self) -> str:
        """What `kerncap info SET` prints without --json."""
        from kerncap.reproducer.set_info import format_set_info

        return format_set_info(self)


class ReproducerRow(_Document):
    """One row of `kerncap list`."""

    path: str = _field("path", "the reproducer directory")
    kernel: str = _field("kernel", "its kernel, short")
    mangled: str = _field("mangled", "its mangled name")
    command: str = _field("command", "the captured app's command line")
    time: str = _field("time", "when it was captured")
    logical: int = _field("logical", "bytes of captured memory")
    stored: int = _field("stored", "bytes on disk")
    in_store: bool = _field("in_store", "its payloads are in the chunk store")
    validation: str = _field("validation", "the baseline's verdict in its variant history")
    variants: int = _field("variants", "rows of its variant history")
    payloads: str = _field("payloads", '"ok", or what is missing or damaged')
    error: str = _field("error", "why it cannot be read, if it cannot")
    problems: list = _field("problems", "what is wrong with its reproducer.json or history.json (its capture reads)")
    sequence: dict = _field("sequence", "a sequence: mode, launches, kernels, streams, steps (null: one dispatch)")
