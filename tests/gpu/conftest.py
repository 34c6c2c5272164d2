"""GPU suite fixtures: build the test applications once, extract each app once per
session, and skip everything on machines without an NVIDIA GPU.

Set KERNCAP_TESTAPPS_BUILD=<dir> to build the apps there (and reuse the build across
sessions); otherwise they are built in a session temporary directory. With
KERNCAP_TESTAPPS_PREBUILT=1 as well, that directory is used as it is (several pytest
processes, one per GPU, sharing one build).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from .apps import APPS, TESTAPPS, AppSpec, Once, app_env


def _gpu_present() -> bool:
    # Ask nvidia-smi rather than cuInit here: the pytest process itself never needs a
    # CUDA context (replay runs in its own process).
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


GPU_TEST_TIMEOUT_S = 1800  # a first test also builds testapps/ and extracts its app


def pytest_collection_modifyitems(config, items):
    """pyproject's per-test timeout (300 s) suits the CPU suite; a GPU test may build and
    extract first, so it gets GPU_TEST_TIMEOUT_S unless it says otherwise."""
    for item in items:
        if item.get_closest_marker("gpu") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(GPU_TEST_TIMEOUT_S))


@pytest.fixture(scope="session", autouse=True)
def _require_gpu():
    if not _gpu_present():
        pytest.skip("no NVIDIA GPU here (nvidia-smi -L lists none)")


@pytest.fixture(scope="session")
def testapps_build(tmp_path_factory) -> Path:
    """The CMake build directory of testapps/ (executables at its root, variants/*.cubin)."""
    build = os.environ.get("KERNCAP_TESTAPPS_BUILD")
    build_dir = Path(build) if build else tmp_path_factory.mktemp("testapps-build")
    if build and os.environ.get("KERNCAP_TESTAPPS_PREBUILT"):
        # Built once by the batch before parallel pytest processes share it: two ninja
        # runs in one build directory would race.
        return build_dir
    steps = [
        ["cmake", "-S", str(TESTAPPS), "-B", str(build_dir), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"],
        ["ninja", "-C", str(build_dir)],
    ]
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.fail(f"building the test apps failed: {' '.join(step)}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return build_dir


@pytest.fixture(scope="session")
def variant_cubins(testapps_build) -> Path:
    return testapps_build / "variants"


@dataclass
class CapturedApp:
    spec: AppSpec
    reproducer: Path
    capture: object  # kerncap.reproducer.format.Capture
    report: dict
    result: object  # kerncap.capture.extract.ExtractResult

    def region_of(self, key: str):
        """The captured region holding the buffer the app reported under `key`."""
        return self.capture.region_of(self.report[key])


class Captures:
    """Extracts each app once per session; a failed extract fails every test that needs it."""

    def __init__(self, build_dir: Path, root: Path):
        self.build_dir = build_dir
        self.root = root
        self._once = Once()

    def get(self, name: str) -> CapturedApp:
        return self._once.get(name, lambda: self._extract(APPS[name]))

    def _extract(self, spec: AppSpec) -> CapturedApp:
        from kerncap.capture.extract import extract
        from kerncap.reproducer.format import Capture

        workdir = self.root / spec.name
        workdir.mkdir(parents=True)
        result = extract(
            spec.kernel,
            spec.command(self.build_dir),
            output=workdir / "reproducer",
            dispatch=spec.dispatch,
            match=spec.match,
            keep_running=spec.keep_running,
            timeout=spec.timeout,
            env=app_env(spec, workdir),
        )
        reproducer = Path(result.reproducer_dir)
        report_path = workdir / "report.json"
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
        return CapturedApp(spec, reproducer, Capture.open(reproducer), report, result)


@pytest.fixture(scope="session")
def captures(testapps_build, tmp_path_factory) -> Captures:
    return Captures(testapps_build, tmp_path_factory.mktemp("captures"))


@pytest.fixture(scope="session")
def vector_capture(captures) -> Path:
    """Reproducer directory of the axpy_inplace capture (y += a*x, in place, n = 1<<24)."""
    return captures.get("axpy_inplace").reproducer
