"""NVML (nvidia-ml-py's `pynvml`, an optional extra), wrapped once for the two places that
ask it: the recorded and running stack (kerncap.core.stack: name, UUID, driver, clocks)
and the SM clock sampled during a timing comparison (kerncap.replay.clocks).

`open_device` initialises NVML and finds one GPU by PCI bus id (what the replay server
knows: CUDA ordinals and NVML indices differ under CUDA_VISIBLE_DEVICES), by UUID or by
NVML index; `close()` shuts NVML down again. Without pynvml, or when NVML does not
answer, it raises NvmlUnavailable with the reason in words.
"""

from __future__ import annotations

from typing import Any

INSTALL_HINT = "nvidia-ml-py (pynvml) is not installed; pip install nvidia-ml-py"


class NvmlUnavailable(Exception):
    """NVML cannot answer; str() says why."""


class Device:
    """An NVML session on one GPU."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml = nvml
        self.handle = handle

    def call(self, name: str, *args: Any) -> Any:
        """nvmlDevice<name>(handle, *args), bytes decoded; NvmlUnavailable on any failure."""
        try:
            value = getattr(self.nvml, f"nvmlDevice{name}")(self.handle, *args)
        except Exception as exc:  # noqa: BLE001 - NVMLError and missing symbols alike
            raise NvmlUnavailable(f"NVML stopped answering: {exc}") from None
        return value.decode() if isinstance(value, bytes) else value

    def ask(self, name: str, *args: Any) -> Any:
        """`call`, or None when NVML has no answer for this one."""
        try:
            return self.call(name, *args)
        except NvmlUnavailable:
            return None

    def system(self, name: str) -> Any:
        """nvmlSystem<name>(), bytes decoded; None when it fails."""
        try:
            value = getattr(self.nvml, f"nvmlSystem{name}")()
        except Exception:  # noqa: BLE001
            return None
        return value.decode() if isinstance(value, bytes) else value

    def constant(self, name: str) -> Any:
        return getattr(self.nvml, name)

    def clock_event_reasons(self) -> int:
        """The current clock event ("throttle") reason mask (the name changed in NVML 12)."""
        for name in ("GetCurrentClocksEventReasons", "GetCurrentClocksThrottleReasons"):
            if hasattr(self.nvml, f"nvmlDevice{name}"):
                return int(self.call(name))
        raise NvmlUnavailable("this NVML reports no clock event reasons")

    def close(self) -> None:
        nvml, self.nvml = self.nvml, None
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down is best effort
                pass

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_device(*, pci_bus_id: str | None = None, uuid: str | None = None, index: int | None = None) -> Device:
    """NVML initialised and the GPU with this PCI bus id, else UUID, else NVML index."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        raise NvmlUnavailable(INSTALL_HINT) from None
    what = pci_bus_id or uuid or f"index {index or 0}"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001
        raise NvmlUnavailable(f"NVML did not answer for GPU {what}: {exc}") from None
    try:
        if pci_bus_id:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        elif uuid:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        else:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index or 0)
    except Exception as exc:  # noqa: BLE001
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
        raise NvmlUnavailable(f"NVML did not answer for GPU {what}: {exc}") from None
    return Device(pynvml, handle)
