"""A real H200 capture of a kernel that ran as a node of a CUDA graph (issue 12):
testapps graph_explicit `setparams`, dispatch 2 of gx_target = launch L2 of the
executable graph, after cudaGraphExecKernelNodeSetParams changed its scalar to 5 and its
output to out3 (tests/gpu/test_graphs.py makes the same capture on the GPU)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kerncap.reproducer.format import Capture
from kerncap.reproducer.info import format_summary, summarize

FIXTURE = Path(__file__).parent / "fixtures" / "captures" / "graph_explicit"


@pytest.fixture(scope="module")
def cap() -> Capture:
    return Capture.open(FIXTURE)


def floats(cap: Capture, region_id: int, state: str) -> list[float]:
    region = next(r for r in cap.regions if r.id == region_id)
    raw = cap.read_bytes(getattr(region, state), region.size)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def test_manifest_says_where_in_the_graph_the_dispatch_ran(cap):
    g = cap.launch["graph"]
    assert (g["exec_id"], g["exec_launch"], g["updates"], g["built_by"]) == (1, 2, 2, "graph API")
    assert (g["node_index"], g["nodes"], g["targets"], g["prefix_nodes"]) == (2, 4, 1, 2)
    assert cap.kernel["launch_api"] == "cuGraphLaunch"
    assert cap.provenance["dispatch_index"] == 2


def test_parameters_are_the_ones_in_force_at_that_launch(cap):
    params = {p.index: p for p in cap.params}
    assert struct.unpack("<f", params[3].value)[0] == 5.0  # set before L2 (L0 had 2, L1 had 3)
    out = params[0].region
    assert out is not None and [r.id for r in cap.regions if r.written] == [out]


def test_pre_state_holds_the_earlier_nodes_writes_and_post_only_the_targets(cap):
    params = {p.index: p for p in cap.params}
    out, acc, inp = params[0].region, params[1].region, params[2].region
    assert set(floats(cap, inp, "pre")) == {3.0}   # gx_prep of L0, L1 and L2
    assert set(floats(cap, acc, "pre")) == {1.5}
    assert set(floats(cap, out, "post")) == {10.5}  # 1.5 * 5 + 3
    untouched = [r for r in cap.regions if r.id not in (out, acc, inp)]
    assert all(r.pre == r.post for r in untouched)


def test_info_shows_the_graph_origin():
    s = summarize(FIXTURE)
    assert s["launch"]["graph"]["exec_launch"] == 2
    text = format_summary(s)
    line = next(l for l in text.splitlines() if l.startswith("graph"))
    assert "launch 2 of executable graph #1" in line and "2 update(s) since instantiation" in line, line
    assert "pre-state after 2 earlier node(s)" in line, line
    json.dumps(s)  # --json stays plain data
