"""Issue 43 on the GPU: one physical allocation mapped at two adjacent addresses.

vmm_ring (testapps/cuda/vmm_ring.cu) maps one cuMemCreate allocation of S bytes at
[ring, ring + S) and again at [ring + S, ring + 2S); ring_step's dispatch 1 reads a
window across the wrap and writes half of it through the second mapping. The capture
names the two regions as one allocation (manifest `physical`), the replay maps one
allocation at both, restores and compares it once (as the first region), so the captured
kernel validates byte-exact and replays; before, it failed with the alias's bytes
"different" and blamed the capture.

Run on the GPU machine: bash tests/gpu/run.sh tests/gpu/test_aliased_gpu.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .apps import AppSpec, Once, app_env

pytestmark = pytest.mark.gpu

VMM_RING = AppSpec("vmm_ring", "ring_step", dispatch=1, writes=("ring", "out"))
_once = Once()


@pytest.fixture(scope="module")
def ring(testapps_build, tmp_path_factory):
    def extract_it():
        from kerncap.capture.extract import extract
        from kerncap.reproducer.format import Capture

        work = tmp_path_factory.mktemp("aliased")
        res = extract(VMM_RING.kernel, VMM_RING.command(testapps_build), output=work / "reproducer",
                      dispatch=VMM_RING.dispatch, match=VMM_RING.match, timeout=VMM_RING.timeout,
                      env=app_env(VMM_RING, work))
        report = json.loads((work / "report.json").read_text())
        cap = Capture.open(Path(res.reproducer_dir))
        print(f"vmm_ring: {len(cap.regions)} regions; warnings: {cap.warnings}")
        return Path(res.reproducer_dir), cap, report, res

    return _once.get("vmm_ring", extract_it)


def _failing(v) -> str:
    return ", ".join(f"{r.kind} {r.id}: {r.mismatched_bytes} bytes" for r in v.regions if not r.passed) or "(none)"


def test_the_capture_names_both_mappings_as_one_allocation(ring):
    _, cap, report, res = ring
    first, alias = cap.region_of(report["ring"]), cap.region_of(report["alias"])
    assert first is not None and alias is not None and first.id != alias.id
    assert (first.base, first.size, first.kind) == (report["ring"], report["bytes"], "vmm")
    assert (alias.base, alias.size, alias.kind) == (report["alias"], report["bytes"], "vmm")
    assert first.physical is not None and first.physical == alias.physical and first.physical[1] == 0
    # The allocation is mapped twice, so both hold what the kernel wrote through either.
    assert first.written and alias.written and first.post == alias.post
    assert not [w for w in cap.warnings if "physical allocation" in w], cap.warnings
    assert not [w for w in res.warnings if "physical allocation" in w]
    others = [r for r in cap.regions if r.physical is not None and r.id not in (first.id, alias.id)]
    assert others == []


def test_the_captured_kernel_validates_byte_exact_and_replays(ring):
    from kerncap.replay.client import ReplayClient

    repro, cap, report, _ = ring
    first, alias = cap.region_of(report["ring"]), cap.region_of(report["alias"])
    out = cap.region_of(report["out"])
    with ReplayClient(repro) as rc:
        v = rc.validate()
        info = rc.info
        r = rc.replay(iterations=5, warmup=1)
    print(f"validate: passed={v.passed}; shared={info['shared']}; replay median {r.median_ms:.4f} ms")
    assert v.passed, _failing(v)
    assert info["shared"] == [{"size": report["bytes"], "bases": [report["ring"], report["alias"]],
                               "regions": [first.id, alias.id]}]
    assert any(f"region {alias.id} maps the physical allocation of region {first.id}" in n for n in info["notes"])
    compared = {c.id: c for c in v.regions if c.kind == "region"}
    assert alias.id not in compared, "the alias is compared as the region it aliases, once"
    assert compared[first.id].passed and compared[first.id].mismatched_bytes == 0
    assert compared[out.id].passed
    assert r.median_ms > 0 and r.iterations == 5
