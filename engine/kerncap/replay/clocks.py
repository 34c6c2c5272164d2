"""The SM clock during a timing comparison, from NVML (nvidia-ml-py's `pynvml`, optional).

Runs inside the replay server. The device is found by its PCI bus id (CUDA ordinals and
NVML indices differ under CUDA_VISIBLE_DEVICES). When pynvml is missing or NVML does
not answer, the report says so instead of guessing.
"""

from __future__ import annotations

from typing import Any

# clock event ("throttle") reasons that slow a measurement down; idle, application clock
# settings, sync boost and display clocks are left out.
THROTTLE_REASONS = {
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}


class ClockSampler:
    def __init__(self, pci_bus_id: str):
        self.samples: list[int] = []
        self.reasons: set[str] = set()
        self.max_mhz: int | None = None
        self.reason = ""
        self._nvml = None
        self._handle = None
        try:
            import pynvml
        except ImportError:
            self.reason = "nvidia-ml-py (pynvml) is not installed; pip install nvidia-ml-py"
            return
        try:
            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
            self.max_mhz = int(pynvml.nvmlDeviceGetMaxClockInfo(self._handle, pynvml.NVML_CLOCK_SM))
            self._nvml = pynvml
        except Exception as exc:  # noqa: BLE001 - NVMLError and missing symbols alike
            self.reason = f"NVML did not answer for GPU {pci_bus_id}: {exc}"
            self._handle = None

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def sample(self) -> None:
        if not self.available:
            return
        nv = self._nvml
        try:
            self.samples.append(int(nv.nvmlDeviceGetClockInfo(self._handle, nv.NVML_CLOCK_SM)))
            get = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
            mask = int(get(self._handle))
        except Exception as exc:  # noqa: BLE001
            self.reason = f"NVML stopped answering: {exc}"
            self._nvml = None
            return
        self.reasons.update(name for bit, name in THROTTLE_REASONS.items() if mask & bit)

    def report(self) -> dict[str, Any]:
        return {"available": self.available or bool(self.samples), "samples_mhz": list(self.samples),
                "max_mhz": self.max_mhz, "throttle": sorted(self.reasons), "unavailable_reason": self.reason}

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down is best effort
                pass
            self._nvml = None
