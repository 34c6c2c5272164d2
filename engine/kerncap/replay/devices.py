"""Which GPU a replay runs on, and whether it can run the capture at all.

A capture replays on any GPU of the architecture it was made on (its cubin is built
for that one; the captured addresses are reserved anew in each replay process), so
`--device N` picks one of them, and a device of another architecture is refused before
anything is restored, with the reason."""

from __future__ import annotations

from typing import Any


def describe(device: dict[str, Any] | None) -> str:
    """'device 1 (NVIDIA H200, sm_90, GPU-3f2a...)'."""
    if not device:
        return "device ?"
    cc = device.get("cc") or []
    arch = f"sm_{''.join(map(str, cc))}" if cc else "sm_?"
    uuid = f", {device['uuid']}" if device.get("uuid") else ""
    return f"device {device.get('ordinal', '?')} ({device.get('name') or '?'}, {arch}{uuid})"


def arch_refusal(captured_gpu: dict[str, Any], device: dict[str, Any]) -> str | None:
    """Why `device` cannot replay a capture made on `captured_gpu` (the manifest's
    provenance.gpu), or None when it can (or the capture did not record its GPU)."""
    cc, mine = captured_gpu.get("cc"), device.get("cc")
    if not cc or not mine or list(cc) == list(mine):
        return None
    captured = f"sm_{''.join(map(str, cc))} ({captured_gpu.get('name') or 'unknown GPU'})"
    return (f"the capture was made on {captured} and {describe(device)} is another architecture: the captured "
            f"cubin is machine code for sm_{''.join(map(str, cc))} only, and a variant built from it targets the "
            f"same architecture")
