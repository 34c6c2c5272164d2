"""CPU suite: the fuzz tests (test_fuzz.py) count the cases they tried; the total is
printed at the end of the run."""

from __future__ import annotations

FUZZ_CASES: dict[str, int] = {}


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if FUZZ_CASES:
        total = sum(FUZZ_CASES.values())
        parts = ", ".join(f"{name} {n}" for name, n in sorted(FUZZ_CASES.items()))
        terminalreporter.write_line(f"fuzz: {total} cases tried ({parts}); none raised anything but KerncapError")
