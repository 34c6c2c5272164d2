"""The replay server's wire protocol: one JSON object per line (kerncap.core.child).

Request:  {"id": 1, "op": "open" | "replay" | "validate" | "load_variant" | "info" | "shutdown"
                     | "reference" | "check" | "time_compare", ...}   (the last three: session_ops.py)
Response: {"id": 1, "ok": true, "result": {...}}
          {"id": 1, "ok": false, "error": "...", "hint": "...", "kind": "...", "fatal": bool}

`kind` says what failed: "no_gpu", "native" (replay core not built), "capture" (damaged
capture), "variant" / "arch" (a cubin that does not fit), "device" (a GPU of another
architecture than the capture's), "address" (a span that cannot be
reserved), "cuda" (a driver error), "input" (a bad request), "internal" (a bug).
`fatal`: the server exits right after this response (sticky CUDA error, failed open);
the client starts a fresh one for the next request.
"""

from __future__ import annotations

from typing import Any

from kerncap.core.child import decode, encode  # noqa: F401 - the one JSON-lines framing
from kerncap.errors import (
    AddressUnavailable,
    CaptureFormatError,
    GpuUnavailable,
    KerncapError,
    NativeUnavailable,
)

HINTS = {
    "no_gpu": "replay needs an NVIDIA GPU and its driver (libcuda.so.1); run on the GPU machine",
    "capture": "the capture is damaged; extract it again with `kerncap extract`",
    "variant": "the variant must keep the captured kernel's name, parameter list and module globals; "
               "rebuild it from the reproducer with `kerncap recompile`",
    "arch": "compile the variant for this GPU's architecture (`kerncap recompile` uses the captured flags)",
    "device": "replay on a GPU of the capture's architecture: --device N picks one (nvidia-smi lists them)",
    "address": "replay must restore the capture at its original addresses and something holds this range; "
               "retry (every replay server is a fresh process); if it persists, the driver or GPU differs too "
               "much from the capturing machine's",
    "cuda": "the kernel faulted or the driver failed; for a variant, check its indexing with compute-sanitizer; "
            "for the captured cubin, `kerncap info` lists what the capture could not hold",
    "internal": "this is a kerncap bug; please report it with the server log above",
}


def error_to_exception(resp: dict[str, Any]) -> KerncapError:
    """The client-side exception for an error response; its `kind` and `code` attributes
    keep the response's (a caller tells a faulting launch, kind "cuda", from bad input)."""
    kind, message = resp.get("kind", "internal"), resp.get("error", "replay server error")
    hint = resp.get("hint") or HINTS.get(kind)
    if kind == "no_gpu":
        exc = GpuUnavailable(f"no CUDA GPU available: {message}", hint)
    elif kind == "capture":
        exc = CaptureFormatError(message, hint)
    elif kind == "native":
        exc = NativeUnavailable(message, hint)
    elif kind == "address":
        exc = AddressUnavailable(message, hint)
    else:
        exc = KerncapError(message, hint)
    exc.kind, exc.code = kind, resp.get("code")
    return exc
