"""Graph edges that carry data (issue 43): a --sequence graph capture records, per step,
the edges into it in the app's graph with their CUgraphEdgeData (graph_deps), and the
graph order rebuilds them (native/replay/sequence.cpp capture_graph_edges); captures made
before, without graph_deps, still open and replay with the serial order's edges."""

from __future__ import annotations

import json

import pytest

import sequence_sim as S
from kerncap.errors import CaptureFormatError
from kerncap.replay.sequence_replay import build
from kerncap.reproducer.format import Capture

PROGRAMMATIC = (1, 1, 0)  # CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC from CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
DEPS = [[], [(0, 0, 0, 0)], [(1, 0, 0, 0)], [(2, 0, 0, 0)], [(2, 0, 0, 0)], [(0, *PROGRAMMATIC), (4, 0, 0, 0)],
        [(5, 0, 0, 0)]]


@pytest.fixture
def core(monkeypatch):
    return S.install(monkeypatch)


def _with_deps(path, deps=DEPS):
    doc_path = path / "capture" / "sequence.json"
    doc = json.loads(doc_path.read_text())
    for step, d in zip(doc["steps"], deps):
        step["graph_deps"] = [{"step": s, "type": t, "from_port": a, "to_port": b} for s, t, a, b in d]
    doc_path.write_text(json.dumps(doc))
    return path


def test_the_graph_order_rebuilds_the_recorded_edges_with_their_data(core, tmp_path):
    cap = Capture.open(_with_deps(S.synthetic_sequence(tmp_path / "seq")))
    assert cap.sequence.steps[5].graph_deps == ((0, 1, 1, 0), (4, 0, 0, 0))
    spec, prog = build(core, cap, [], None, "graph")
    assert spec.graph_edges is True
    assert [list(s.graph_deps) for s in spec.steps] == [list(d) for d in DEPS]
    assert any("with the app graph's edges (default, programmatic)" in n for n in prog.notes), prog.notes
    # The other orders serialize the steps: a full dependency orders no less than any edge.
    spec, _ = build(core, cap, [], None, "streams")
    assert spec.graph_edges is False


def test_a_capture_without_graph_deps_still_opens_and_replays_in_the_serial_graph(core, tmp_path):
    cap = Capture.open(S.synthetic_sequence(tmp_path / "seq"))
    assert all(s.graph_deps is None for s in cap.sequence.steps)
    spec, prog = build(core, cap, [], None, "graph")
    assert spec.graph_edges is False
    assert any("captured from the streams order" in n for n in prog.notes), prog.notes


@pytest.mark.parametrize("deps, words", [
    ([[], [(3, 0, 0, 0)]], "steps[1].graph_deps names step 3"),
    ([[], [(1, 0, 0, 0)]], "steps[1].graph_deps names step 1"),
    ([[], [{"type": 1}]], "steps is malformed"),
])
def test_an_edge_that_does_not_come_from_an_earlier_step_is_refused(tmp_path, deps, words):
    path = S.synthetic_sequence(tmp_path / "seq")
    doc_path = path / "capture" / "sequence.json"
    doc = json.loads(doc_path.read_text())
    for step, d in zip(doc["steps"], deps):
        step["graph_deps"] = [x if isinstance(x, dict) else dict(zip(("step", "type", "from_port", "to_port"), x))
                              for x in d]
    doc_path.write_text(json.dumps(doc))
    with pytest.raises(CaptureFormatError) as e:
        Capture.open(path)
    assert words in e.value.message, e.value.message
