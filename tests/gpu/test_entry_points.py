"""Capture through interposed driver entry points instead of CUPTI callbacks
(KERNCAP_INTERCEPT=entry, libkerncap_entry.so; docs/interposer.md): every app of the
suite, eager and from CUDA graphs, must capture what the CUPTI path captures, with the
cubin recovered by the late subscription at the target (docs/facts.md §24)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .apps import APPS, app_env
from .test_graphs import explicit, floats, graphs  # noqa: F401  (graphs: the module fixture)

pytestmark = pytest.mark.gpu


def extract_through_entry_points(spec, build_dir: Path, work: Path):
    from kerncap.capture.extract import extract
    from kerncap.reproducer.format import Capture

    work.mkdir(parents=True, exist_ok=True)
    res = extract(spec.kernel, spec.command(build_dir), output=work / "reproducer", dispatch=spec.dispatch,
                  match=spec.match, keep_running=spec.keep_running, timeout=spec.timeout, keep_run_dir=True,
                  env=app_env(spec, work, KERNCAP_INTERCEPT="entry"))
    procs = [json.loads(p.read_text()) for p in Path(res.run_dir).glob("proc-*.json")]
    report = json.loads((work / "report.json").read_text()) if (work / "report.json").exists() else {}
    return Capture.open(res.reproducer_dir), procs, report, Path(res.reproducer_dir)


def triton_sources(repro: Path) -> dict | None:
    """reproducer.json's sources when the kernel came from Triton (or Inductor), else None."""
    sources = json.loads((repro / "reproducer.json").read_text()).get("sources") or {}
    return sources if sources.get("kind") == "triton" else None


def assert_same_capture(entry, entry_repro: Path, cupti, cupti_repro: Path) -> None:
    assert entry.kernel["name"] == cupti.kernel["name"]
    triton = triton_sources(entry_repro)
    if triton is not None:
        # The cubin is the one Triton compiled in this very run (its sha256 is the Python
        # hook's record's). Autotuning may pick another config than the CUPTI run did, and
        # then the binaries, launch shapes and allocation histories legitimately differ.
        assert triton["confidence"] == "exact", triton
        assert triton_sources(cupti_repro)["confidence"] == "exact"
        if entry.kernel["module"]["sha256"] != cupti.kernel["module"]["sha256"]:
            return
    assert entry.kernel["module"]["sha256"] == cupti.kernel["module"]["sha256"], "another cubin"
    for key in ("grid", "block", "shared_mem_bytes"):
        assert entry.launch.get(key) == cupti.launch.get(key), key
    assert [p.size for p in entry.params] == [p.size for p in cupti.params]
    if triton is not None:
        return  # allocation history depends on the compile cache's warmth (docs/facts.md §27)
    assert sorted(r.size for r in entry.regions) == sorted(r.size for r in cupti.regions)
    assert sorted(r.size for r in entry.regions if r.written) == sorted(r.size for r in cupti.regions if r.written)


@pytest.mark.parametrize("app", sorted(APPS))
def test_entry_point_capture_equals_the_cupti_capture(captures, testapps_build, tmp_path, app):
    from kerncap.replay.client import ReplayClient

    cap, procs, _, repro = extract_through_entry_points(APPS[app], testapps_build, tmp_path / app)
    paths = {p.get("interception", {}).get("path") for p in procs}
    assert paths == {"entry points"}, f"{app}: {paths}"
    assert any(p.get("interception", {}).get("wrappers_handed", 0) > 0 for p in procs)
    cupti = captures.get(app)
    assert_same_capture(cap, repro, cupti.capture, cupti.reproducer)
    with ReplayClient(repro) as rc:
        assert rc.validate().passed


@pytest.mark.parametrize("mode", ["setparams", "capture"])
def test_graph_node_through_entry_points_equals_the_eager_step(graphs, testapps_build, tmp_path, mode):
    cap, procs, report, _ = extract_through_entry_points(explicit(mode), testapps_build, tmp_path / mode)
    assert {p.get("interception", {}).get("path") for p in procs} == {"entry points"}
    assert cap.launch.get("graph"), "captured from the graph launch"
    _, ecap, ereport, _ = graphs.get(explicit("eager"), "explicit-eager")
    for key in ("in", "acc", "late", "out3"):
        for state in ("pre", "post"):
            assert (floats(cap, report, key, state) == floats(ecap, ereport, key, state)).all(), (key, state)


@pytest.mark.parametrize("pattern,dispatch,tag", [("outer/inner.7", 1, 6), ("kcdomain:phase.B", 0, 4),
                                                  ("window", 0, 5)])
def test_nvtx_selection_through_entry_points(testapps_build, tmp_path, pattern, dispatch, tag):
    """--nvtx with kerncap as NVTX's own tool (nvtx_tool.cpp): the same launches as the
    CUPTI path's test_selection.py picks."""
    from .test_selection import NVTX_APP, extract_nvtx, tag_of

    res = extract_nvtx(testapps_build, tmp_path, pattern, dispatch=dispatch, keep_run_dir=True,
                       env=app_env(NVTX_APP, tmp_path, KERNCAP_INTERCEPT="entry"))
    procs = [json.loads(p.read_text()) for p in Path(res.run_dir).glob("proc-*.json")]
    assert {p.get("interception", {}).get("path") for p in procs} == {"entry points"}
    assert tag_of(res.capture) == tag
