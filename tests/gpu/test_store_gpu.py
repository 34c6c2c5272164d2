"""`kerncap store` then replay on the GPU: a reproducer whose payloads live only in the
workspace's chunk store is hydrated by ReplayClient.start and validates byte-exact."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu


def test_stored_reproducer_hydrates_and_validates_byte_exact(vector_capture, tmp_path):
    from kerncap.replay.client import ReplayClient
    from kerncap.reproducer.format import Capture
    from kerncap.reproducer.stored import missing_blobs

    repro = tmp_path / "reproducers" / "axpy"
    shutil.copytree(vector_capture, repro)
    proc = subprocess.run([sys.executable, "-m", "kerncap", "store", str(repro)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cap = Capture.open(repro)
    assert missing_blobs(cap), "store left the payloads in place"
    assert (tmp_path / "store").is_dir()
    with ReplayClient(repro) as rc:
        result = rc.validate()
    assert result.passed, [(r.id, r.mismatched_bytes) for r in result.regions if r.mismatched_bytes]
    assert not missing_blobs(Capture.open(repro)), "replay did not hydrate every payload"
