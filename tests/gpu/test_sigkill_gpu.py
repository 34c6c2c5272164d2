"""SIGKILL of `kerncap extract` and `kerncap validate` at random points (>= 20 trials
each) on the H200: nothing complete-looking is left, the replay server of a killed
validate goes away by itself, the next command names what to remove and works.
Prints the trial counts by outcome. The CPU variant is tests/test_sigkill.py."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from .apps import AppSpec, app_env

pytestmark = pytest.mark.gpu

TRIALS = 20
SMALL_AXPY = AppSpec("axpy_inplace", "axpy_inplace", args=("65536",))
RNG = random.Random(20)


def kerncap(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kerncap", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def kill_at(proc: subprocess.Popen, when) -> None:
    """SIGKILL `proc` after `when` seconds, or as soon as when() is true."""
    if callable(when):
        deadline = time.monotonic() + 60
        while proc.poll() is None and not when() and time.monotonic() < deadline:
            time.sleep(0.002)
    else:
        time.sleep(when)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()


def processes_with(marker: str) -> list[int]:
    """Pids whose environment holds `marker` (a trial's own tag: only our processes)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def wait_gone(marker: str, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_sigkill_during_extract(testapps_build, tmp_path):
    from kerncap.core.fsio import find_leftovers, remove_quietly
    from kerncap.reproducer.format import Capture

    command = SMALL_AXPY.command(testapps_build)

    def extract(out: Path, tag: str) -> subprocess.Popen:
        env = app_env(SMALL_AXPY, tmp_path, KC_TRIAL=tag)
        return kerncap("extract", SMALL_AXPY.kernel, "-o", str(out), "--", *command, env=env)

    t0 = time.monotonic()
    full = extract(tmp_path / "full", "full")
    _, err = full.communicate(timeout=300)
    assert full.returncode == 0, err
    duration = time.monotonic() - t0
    outcomes: Counter = Counter()
    for trial in range(TRIALS):
        out, tag = tmp_path / f"e{trial}", f"kc-trial-{uuid.uuid4().hex}"
        kind = trial % 3
        when = (lambda out=out: any(out.parent.glob(f"{out.name}.run-*/capture*"))) if kind == 1 else \
            (lambda out=out: any(out.parent.glob(f"{out.name}.run-*/proc-*.json"))) if kind == 2 else \
            RNG.uniform(0.0, duration)
        kill_at(extract(out, tag), when)
        assert wait_gone(tag, 60) == [], "the orphaned app did not finish"
        if out.exists():
            Capture.open(out).verify()  # complete, never half-made
            outcomes["complete"] += 1
            continue
        left = find_leftovers(tmp_path, out.name)
        outcomes["left run dir" if left else "nothing"] += 1
        again = extract(out, tag)
        _, err = again.communicate(timeout=300)
        assert again.returncode == 0, err
        for item in left:
            assert str(item.path) in err, f"the next extract did not name {item.path}:\n{err}"
            remove_quietly(item.path)
        Capture.open(out).verify()
    print(f"\nextract killed {TRIALS} times (full run {duration:.2f} s): {dict(outcomes)}")
    assert not find_leftovers(tmp_path)


def test_sigkill_during_validate(vector_capture, tmp_path):
    from kerncap.reproducer.format import Capture

    t0 = time.monotonic()
    first = kerncap("validate", str(vector_capture))
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, out + err
    duration = time.monotonic() - t0
    outcomes: Counter = Counter()
    for trial in range(TRIALS):
        tag = f"kc-trial-{uuid.uuid4().hex}"
        proc = kerncap("validate", str(vector_capture), env={**os.environ, "KC_TRIAL": tag})
        kill_at(proc, RNG.uniform(0.0, duration))
        left = wait_gone(tag, 30)  # the replay server exits when its client's pipe closes
        assert left == [], f"trial {trial}: processes of the killed validate still run: {left}"
        outcomes["killed" if proc.returncode == -signal.SIGKILL else f"exit {proc.returncode}"] += 1
        Capture.open(vector_capture).verify()  # replay never writes the reproducer
        if trial % 5 == 4:
            again = kerncap("validate", str(vector_capture))
            out, err = again.communicate(timeout=300)
            assert again.returncode == 0, out + err
    print(f"\nvalidate killed {TRIALS} times (full run {duration:.2f} s): {dict(outcomes)}")
