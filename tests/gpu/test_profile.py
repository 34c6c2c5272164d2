"""`kerncap profile` against torch.profiler on the same workload."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from .apps import PYAPPS

pytestmark = pytest.mark.gpu

TOP = 3


def normalized(name: str) -> str:
    return re.sub(r"\s+", "", name)


def test_profile_ranks_like_torch_profiler(tmp_path):
    from kerncap.capture.profile import run_profile

    app = str(PYAPPS / "torch_matmul.py")
    result = run_profile([sys.executable, app], timeout=300)
    ours = result.kernels
    assert len(ours) >= TOP, [k.name for k in ours]
    assert result.cupti_finalized is True, result.warnings  # CUPTI detached before the app exited

    reference_path = tmp_path / "torch_profile.json"
    proc = subprocess.run(
        [sys.executable, app, "--torch-profile", str(reference_path)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    reference = json.loads(reference_path.read_text())
    theirs = sorted(reference.items(), key=lambda item: item[1]["total_us"], reverse=True)[:TOP]

    top = sorted(ours, key=lambda k: k.total_ns, reverse=True)[:TOP]
    for rank, (k, (name, ref)) in enumerate(zip(top, theirs)):
        ours_names = {normalized(k.name), normalized(k.demangled or "")}
        assert normalized(name) in ours_names, f"rank {rank}: kerncap {k.demangled or k.name!r}, torch.profiler {name!r}"
        assert k.calls == ref["calls"], f"{name}: {k.calls} calls vs {ref['calls']}"
        ref_ns = ref["total_us"] * 1e3
        assert abs(k.total_ns - ref_ns) <= 0.10 * ref_ns, f"{name}: total {k.total_ns} ns vs {ref_ns:.0f} ns"
