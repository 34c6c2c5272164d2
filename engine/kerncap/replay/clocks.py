"""The SM clock during a timing comparison, from NVML (kerncap.core.nvml, optional).

Runs inside the replay server. The device is found by its PCI bus id (CUDA ordinals and
NVML indices differ under CUDA_VISIBLE_DEVICES). When pynvml is missing or NVML does
not answer, the report says so instead of guessing.
"""

from __future__ import annotations

from typing import Any

from kerncap.core import nvml

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
        self._device: nvml.Device | None = None
        try:
            device = nvml.open_device(pci_bus_id=pci_bus_id)
        except nvml.NvmlUnavailable as exc:
            self.reason = str(exc)
            return
        try:
            self.max_mhz = int(device.call("GetMaxClockInfo", device.constant("NVML_CLOCK_SM")))
        except (nvml.NvmlUnavailable, AttributeError, TypeError, ValueError) as exc:
            device.close()
            self.reason = f"NVML did not answer for GPU {pci_bus_id}: {exc}"
            return
        self._device = device

    @property
    def available(self) -> bool:
        return self._device is not None

    def sample(self) -> None:
        d = self._device
        if d is None:
            return
        try:
            self.samples.append(int(d.call("GetClockInfo", d.constant("NVML_CLOCK_SM"))))
            mask = d.clock_event_reasons()
        except nvml.NvmlUnavailable as exc:
            self.reason = str(exc)
            self.close()
            return
        self.reasons.update(name for bit, name in THROTTLE_REASONS.items() if mask & bit)

    def report(self) -> dict[str, Any]:
        return {"available": self.available or bool(self.samples), "samples_mhz": list(self.samples),
                "max_mhz": self.max_mhz, "throttle": sorted(self.reasons), "unavailable_reason": self.reason}

    def close(self) -> None:
        device, self._device = self._device, None
        if device is not None:
            device.close()
