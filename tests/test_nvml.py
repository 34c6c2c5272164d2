"""NVML wrapped once (kerncap.core.nvml): the stack's GPU facts and the replay server's
clock sampler both go through it. On the CPU pynvml is absent (each says so); the
stand-in module below answers like pynvml so the wrapper's paths (found by PCI bus id,
UUID or index; one call failing; NVML gone mid-run; shut down after use) are checked
here; the GPU suite reads the real NVML (tests/gpu/test_check_gpu.py: driver, UUID,
clocks recorded; test_trust_gpu.py: the SM clock of a comparison)."""

from __future__ import annotations

import sys
import types

import pytest

from kerncap.core import nvml, stack
from kerncap.replay.clocks import ClockSampler


class FakeNvml(types.ModuleType):
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, *, fail_init=False, fail_clock_after=None, fail_max=False):
        super().__init__("pynvml")
        self.fail_init, self.fail_clock_after, self.fail_max = fail_init, fail_clock_after, fail_max
        self.inits = self.shutdowns = self.clock_calls = 0
        self.looked_up = []

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED")
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        self.looked_up.append(("pci", bus))
        return "h"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.looked_up.append(("uuid", uuid))
        return "h"

    def nvmlDeviceGetHandleByIndex(self, i):
        self.looked_up.append(("index", i))
        return "h"

    def nvmlDeviceGetClockInfo(self, h, which):
        self.clock_calls += 1
        if self.fail_clock_after is not None and self.clock_calls > self.fail_clock_after:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return 1980 if which == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetMaxClockInfo(self, h, which):
        if self.fail_max:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 1980

    def nvmlDeviceGetApplicationsClock(self, h, which):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x4 | 0x1  # software power cap (+ idle, not a slowdown)

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H200"

    def nvmlDeviceGetUUID(self, h):
        return "GPU-1234"

    def nvmlSystemGetDriverVersion(self):
        return b"580.159.04"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000


@pytest.fixture
def fake(monkeypatch):
    def install(**kw):
        module = FakeNvml(**kw)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module
    return install


def test_without_pynvml_both_users_say_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with pytest.raises(nvml.NvmlUnavailable, match="pip install nvidia-ml-py"):
        nvml.open_device(index=0)
    assert ClockSampler("0000:00:00.0").report()["unavailable_reason"] == nvml.INSTALL_HINT
    assert stack._nvml_facts(None, 0) is None  # then nvidia-smi is asked


def test_stack_facts_come_through_the_wrapper_and_nvml_is_shut_down(fake, monkeypatch):
    module = fake()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    facts = stack._nvml_facts(None, None)
    assert facts == {"name": "NVIDIA H200", "uuid": "GPU-1234", "driver": "580.159.04", "cuda_driver": 13000,
                     "clocks": {"sm_mhz": 1980, "mem_mhz": 2619, "max_sm_mhz": 1980, "max_mem_mhz": 1980,
                                "app_sm_mhz": None}, "source": "nvml"}
    assert module.looked_up == [("index", 3)] and module.inits == module.shutdowns == 1
    stack._nvml_facts("GPU-1234", None)
    assert module.looked_up[-1] == ("uuid", "GPU-1234")


def test_clock_sampler_by_bus_id_and_nvml_going_away(fake):
    module = fake(fail_clock_after=2)
    s = ClockSampler("0000:19:00.0")
    assert module.looked_up == [("pci", "0000:19:00.0")] and s.available
    s.sample()
    s.sample()
    report = s.report()
    assert report["samples_mhz"] == [1980, 1980] and report["throttle"] == ["software power cap"]
    s.sample()  # NVML stops answering: said, and the session is closed
    report = s.report()
    assert report["unavailable_reason"].startswith("NVML stopped answering") and module.shutdowns == 1
    assert report["available"]  # the samples taken before still count


def test_nvml_that_does_not_start(fake):
    fake(fail_init=True)
    s = ClockSampler("0000:19:00.0")
    assert not s.available and "NVML_ERROR_DRIVER_NOT_LOADED" in s.report()["unavailable_reason"]


class OldNvml(FakeNvml):
    """An NVML before 12: the clock event reasons still go by their old name (throttle)."""

    def __getattribute__(self, name):
        if name == "nvmlDeviceGetCurrentClocksEventReasons":
            raise AttributeError(name)
        return super().__getattribute__(name)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return 0x4 | 0x1


def test_an_nvml_before_12_reports_its_throttle_reasons_and_one_with_neither_says_so(monkeypatch):
    """NVML 12 renamed nvmlDeviceGetCurrentClocksThrottleReasons: an older one is asked by
    its old name, so a comparison's clock report still names a power cap."""
    monkeypatch.setitem(sys.modules, "pynvml", OldNvml())
    with nvml.open_device(index=0) as d:
        assert d.clock_event_reasons() == 0x5
    s = ClockSampler("0000:19:00.0")
    s.sample()
    report = s.report()
    assert report["throttle"] == ["software power cap"] and report["samples_mhz"] == [1980] and s.available
    s.close()

    class NoReasons(OldNvml):
        def __getattribute__(self, name):
            if name == "nvmlDeviceGetCurrentClocksThrottleReasons":
                raise AttributeError(name)
            return super().__getattribute__(name)

    monkeypatch.setitem(sys.modules, "pynvml", NoReasons())
    with nvml.open_device(index=0) as d, pytest.raises(nvml.NvmlUnavailable, match="no clock event reasons"):
        d.clock_event_reasons()


def test_a_maximum_clock_nvml_does_not_give_shuts_nvml_down_and_says_why(fake):
    """NVML answers the device look-up but not the maximum SM clock: the sampler is
    unavailable, says why, and its NVML session is shut down (not left open for the
    server's life). Mutation caught: the device not closed on that path."""
    module = fake(fail_max=True)
    s = ClockSampler("0000:19:00.0")
    assert not s.available and "NVML did not answer for GPU 0000:19:00.0" in s.report()["unavailable_reason"]
    assert module.inits == module.shutdowns == 1
    s.sample()  # nothing to sample: no call reaches NVML
    assert module.clock_calls == 0 and s.report()["samples_mhz"] == []
