"""One physical allocation mapped at several addresses (issue 43: `cuMemCreate` once,
`cuMemMap` at two adjacent ranges, a ring buffer wrapping by address) on the CPU: the
manifest's `physical` field (docs/capture-format.md, "Aliased mappings") and older
captures without it, the replay planner mapping one allocation at every alias (and saying
which groups it cannot), and the glue: the replay core is asked for one shared mapping,
the alias is restored and compared as the region it aliases, so the captured kernel
validates. The manifests are synthetic: the committed axpy capture
(tests/fixtures/captures/axpy_small) with two aliased 2 MiB regions added. The capture
side (the interposer over the stand-in libcuda) is tested in test_entry_hooks.py; the GPU
suite runs the real app (tests/gpu/test_aliased_gpu.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import xxhash

from kerncap import api
from kerncap.errors import CaptureFormatError
from kerncap.replay.plan import plan_address_space, shared_maps
from kerncap.reproducer.format import Capture

import replay_sim as sim


def validate_once(reproducer, cubin=None):
    """One launch checked against the captured post-state, through the reproducer's session."""
    with api.open(reproducer, compile_worker=False) as s:
        return s.validate_once(cubin)

MiB = 1 << 20
PAGE = 2 * MiB
AXPY = Path(__file__).parent / "fixtures" / "captures" / "axpy_small"
RING = 0x7F00_0000_0000  # 32 MiB-aligned, far from the axpy regions


def R(id, base, size, physical=None):
    return SimpleNamespace(id=id, base=base, size=size, physical=physical)


# -- the planner ------------------------------------------------------------------------------


def test_aliases_get_one_allocation_and_no_memory_of_their_own():
    regions = [R(0, RING - 64 * MiB, 4096), R(1, RING, PAGE, (7, 0)), R(2, RING + PAGE, PAGE, (7, 0))]
    shared, notes = shared_maps(regions, PAGE)
    assert notes == []
    assert [(m.size, m.bases, m.regions) for m in shared] == [(PAGE, (RING, RING + PAGE), (1, 2))]
    plan = plan_address_space(regions, PAGE, shared=shared)
    assert plan.maps == [(RING - 64 * MiB, PAGE)]  # region 0's page only
    assert plan.shared == shared and plan.aliases == {2}
    assert plan.mapped_bytes == 2 * PAGE  # the aliased allocation counts once
    assert any(s.base <= RING and RING + 2 * PAGE <= s.end for s in plan.spans)
    assert "region 2 maps the physical allocation of region 1" in shared[0].note


def test_without_aliases_the_plan_is_unchanged():
    regions = [R(0, RING, PAGE), R(1, RING + PAGE, PAGE), R(2, RING + 4 * PAGE, PAGE, (3, 0))]  # one mapping only
    shared, notes = shared_maps(regions, PAGE)
    assert shared == [] and notes == []
    assert plan_address_space(regions, PAGE, shared=shared) == plan_address_space(regions, PAGE)


@pytest.mark.parametrize("second, why", [
    (R(2, RING + PAGE, PAGE, (7, PAGE)), "map different parts of one physical allocation (7)"),
    (R(2, RING + PAGE, 2 * PAGE, (7, 0)), "map different parts of one physical allocation (7)"),
])
def test_groups_the_replay_cannot_share_are_named_and_get_their_own_memory(second, why):
    regions = [R(1, RING, PAGE, (7, 0)), second]
    shared, notes = shared_maps(regions, PAGE)
    assert shared == [] and len(notes) == 1 and notes[0].startswith("regions 1, 2 " + why.split(" (")[0])
    assert why in notes[0] and "a write through one is not seen through the others" in notes[0]
    plan = plan_address_space(regions, PAGE, shared=shared)
    assert plan.aliases == set() and plan.mapped_bytes == PAGE + second.size


def test_a_granularity_the_aliases_do_not_fit_is_named():
    regions = [R(1, RING, PAGE, (7, 0)), R(2, RING + PAGE, PAGE, (7, 0))]
    shared, notes = shared_maps(regions, 4 * PAGE)
    assert shared == [] and "not multiples of this GPU's 8 MiB allocation granularity" in notes[0]


def test_aliases_at_aligned_addresses_whose_size_is_not_a_granule_multiple_get_their_own_memory():
    """cuMemMap maps whole granules: aligned bases are not enough, the size must be a
    multiple too; such a group is named and each region gets memory of its own."""
    size = PAGE + 4096
    regions = [R(1, RING, size, (7, 0)), R(2, RING + 2 * PAGE, size, (7, 0))]
    shared, notes = shared_maps(regions, PAGE)
    assert shared == [] and len(notes) == 1
    assert notes[0].startswith("regions 1, 2 map one physical allocation (7) at addresses or sizes that are not "
                               "multiples of this GPU's 2 MiB allocation granularity")
    plan = plan_address_space(regions, PAGE, shared=shared)
    assert plan.aliases == set() and plan.shared == []
    assert plan.maps == [(RING, 4 * PAGE)]  # each region's two pages, its own


# -- the manifest -----------------------------------------------------------------------------


def _blob(repro: Path, data: bytes) -> str:
    h = xxhash.xxh64(data, seed=0).hexdigest()
    (repro / "capture" / "blobs" / f"{h}.bin").write_bytes(data)
    return h


def add_ring(repro: Path, *, physical: bool = True) -> dict:
    """Synthetic: a 2 MiB allocation mapped at RING and RING + 2 MiB (regions 2 and 3),
    zero before the kernel; after it, both hold the ramp the kernel wrote through the
    second mapping (the app's memory is one)."""
    m = json.loads((repro / "capture" / "manifest.json").read_text())
    ramp = _blob(repro, np.arange(PAGE // 4, dtype=np.float32).tobytes())
    for i, base in ((2, RING), (3, RING + PAGE)):
        r = {"id": i, "base": base, "size": PAGE, "api": "cuMemMap", "kind": "vmm", "written": True,
             "zero_fraction": 1.0, "reservation": {"base": RING, "size": 64 * MiB}, "pre": [None], "post": [ramp]}
        if physical:
            r["physical"] = {"allocation": 1, "offset": 0}
        m["regions"].append(r)
    (repro / "capture" / "manifest.json").write_text(json.dumps(m))
    return m


def test_the_manifest_reads_physical_and_an_older_capture_opens_without_it(tmp_path):
    import shutil

    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    assert [r.physical for r in Capture.open(repro).regions] == [None, None]  # the committed capture predates it
    add_ring(repro)
    cap = Capture.open(repro)
    assert [r.physical for r in cap.regions] == [None, None, (1, 0), (1, 0)]


@pytest.mark.parametrize("bad", [{"allocation": 0, "offset": 0}, {"allocation": 1}, {"allocation": 1, "offset": -1},
                                 "1"])
def test_a_damaged_physical_field_is_named(tmp_path, bad):
    import shutil

    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    m = add_ring(repro)
    m["regions"][3]["physical"] = bad
    (repro / "capture" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(CaptureFormatError) as exc:
        Capture.open(repro)
    assert "regions[3].physical" in exc.value.message


# -- the replay (simulated core) ----------------------------------------------------------------


def ring_kernel(m, s):
    """axpy, and the ramp written through the second mapping (region 3's address)."""
    sim.axpy(m, s)
    s.view(RING + PAGE, PAGE)[:] = np.arange(PAGE // 4, dtype=np.float32).tobytes()


@pytest.fixture
def ring(tmp_path, monkeypatch):
    return sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": ring_kernel})


def test_the_alias_maps_one_allocation_and_validates_as_one_region(ring):
    add_ring(ring)
    from kerncap.replay.native_session import NativeSession

    ns = NativeSession(ring)
    assert ns.session.shared == [(PAGE, [RING, RING + PAGE])]
    assert not any(b < RING + 2 * PAGE and RING < b + n for b, n in ns.session.maps)  # no memory of its own
    assert [s.label for s in ns.session.items if s.label.startswith("region")] == ["region 0", "region 1", "region 2"]
    assert ns.info()["shared"] == [{"size": PAGE, "bases": [RING, RING + PAGE], "regions": [2, 3]}]
    assert any("region 3 maps the physical allocation of region 2" in n for n in ns.notes())
    v = validate_once(ring)
    assert v.passed, [(c.id, c.mismatched_bytes) for c in v.regions if not c.passed]
    assert sorted(c.id for c in v.regions if c.kind == "region") == [0, 1, 2]  # compared once


def test_without_the_field_each_mapping_replays_alone_and_the_write_is_lost(ring):
    """What an older capture of the same app does (the issue's 'capture may be polluted'):
    region 3 is memory of its own, the kernel's write lands there, region 2 stays zero."""
    add_ring(ring, physical=False)
    from kerncap.replay.native_session import NativeSession

    ns = NativeSession(ring)
    assert getattr(ns.session, "shared", []) == [] and ns.plan.aliases == set()
    v = validate_once(ring)
    assert not v.passed
    assert [c.id for c in v.regions if not c.passed] == [2]


# -- prune ------------------------------------------------------------------------------------


def test_prune_keeps_every_mapping_of_one_memory(tmp_path):
    """The kernel reaches only the second mapping (region 3); the first (region 2) is the
    same memory, written as well: keeping one keeps both, else the closure would drop
    region 2 and refuse the prune for a write it 'cannot reach'."""
    import shutil

    from kerncap.prune.closure import compute_closure
    from kerncap.prune.roots import ALIASES, Named, Roots

    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    add_ring(repro)
    cap = Capture.open(repro)
    closure = compute_closure(cap, Roots(direct=[Named(0, "argument 1", "arguments"),
                                                 Named(1, "argument 2", "arguments"),
                                                 Named(3, "argument 3", "arguments")]))
    assert closure.kept == [0, 1, 2, 3] and closure.refusal == ""
    assert closure.reasons[2] == "maps the memory of region 3" and closure.kinds[2] == ALIASES
    without = compute_closure(cap, Roots(direct=[Named(0, "argument 1", "arguments")]))
    assert 2 not in without.kept and 3 not in without.kept  # neither mapping reached: both go (and are named)
    assert {r.id for r in without.unreached_written} >= {2, 3}
