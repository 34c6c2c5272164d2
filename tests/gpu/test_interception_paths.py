"""The two interception paths capture the same thing: interposed driver entry points
(libkerncap_entry.so, the default) and CUPTI callbacks (KERNCAP_INTERCEPT=cupti;
docs/interposer.md). The suite's captures (`captures`) take the path the run's
KERNCAP_INTERCEPT asks for, else the default; these tests capture every app of the
suite, eager and from CUDA graphs, through the *other* path and compare, and check that
the entry path recovers the cubin by the late subscription at the target (docs/facts.md §24)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .apps import APPS, app_env
from .test_graphs import explicit, floats, graphs  # noqa: F401  (graphs: the module fixture)

pytestmark = pytest.mark.gpu

# What proc-<pid>.json's interception.path says for each KERNCAP_INTERCEPT value.
PATH_NAMES = {"entry": "entry points", "cupti": "cupti"}
SUITE_PATH = os.environ.get("KERNCAP_INTERCEPT") or "entry"
OTHER_PATH = "cupti" if SUITE_PATH == "entry" else "entry"


def extract_through(path: str, spec, build_dir: Path, work: Path):
    from kerncap.capture.extract import extract
    from kerncap.reproducer.format import Capture

    work.mkdir(parents=True, exist_ok=True)
    res = extract(spec.kernel, spec.command(build_dir), output=work / "reproducer", dispatch=spec.dispatch,
                  match=spec.match, keep_running=spec.keep_running, timeout=spec.timeout, keep_run_dir=True,
                  env=app_env(spec, work, KERNCAP_INTERCEPT=path))
    procs = [json.loads(p.read_text()) for p in Path(res.run_dir).glob("proc-*.json")]
    report = json.loads((work / "report.json").read_text()) if (work / "report.json").exists() else {}
    return Capture.open(res.reproducer_dir), procs, report, Path(res.reproducer_dir)


def triton_sources(repro: Path) -> dict | None:
    """reproducer.json's sources when the kernel came from Triton (or Inductor), else None."""
    sources = json.loads((repro / "reproducer.json").read_text()).get("sources") or {}
    return sources if sources.get("kind") == "triton" else None


def assert_same_capture(entry, entry_repro: Path, cupti, cupti_repro: Path) -> None:
    """`entry` and `cupti`: captures of one app through the two paths (in either order)."""
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


def interception_paths(procs: list[dict]) -> set:
    return {p.get("interception", {}).get("path") for p in procs}


@pytest.mark.parametrize("app", sorted(APPS))
def test_both_interception_paths_capture_the_same(captures, testapps_build, tmp_path, app):
    from kerncap.replay.client import ReplayClient

    cap, procs, _, repro = extract_through(OTHER_PATH, APPS[app], testapps_build, tmp_path / app)
    paths = interception_paths(procs)
    assert paths == {PATH_NAMES[OTHER_PATH]}, f"{app}: {paths}"
    assert cap.provenance["interception"] == PATH_NAMES[OTHER_PATH], "the manifest says how it was captured"
    suite = captures.get(app)
    assert suite.capture.provenance["interception"] == PATH_NAMES[SUITE_PATH], "the suite's capture took the asked path"
    if OTHER_PATH == "entry":
        assert any(p.get("interception", {}).get("wrappers_handed", 0) > 0 for p in procs)
    assert_same_capture(cap, repro, suite.capture, suite.reproducer)
    with ReplayClient(repro) as rc:
        assert rc.validate().passed


@pytest.mark.parametrize("mode", ["setparams", "capture"])
def test_graph_node_through_the_other_path_equals_the_eager_step(graphs, testapps_build, tmp_path, mode):
    cap, procs, report, _ = extract_through(OTHER_PATH, explicit(mode), testapps_build, tmp_path / mode)
    assert interception_paths(procs) == {PATH_NAMES[OTHER_PATH]}
    assert cap.launch.get("graph"), "captured from the graph launch"
    _, ecap, ereport, _ = graphs.get(explicit("eager"), "explicit-eager")
    for key in ("in", "acc", "late", "out3"):
        for state in ("pre", "post"):
            assert (floats(cap, report, key, state) == floats(ecap, ereport, key, state)).all(), (key, state)


@pytest.mark.parametrize("pattern,dispatch,tag", [("outer/inner.7", 1, 6), ("kcdomain:phase.B", 0, 4),
                                                  ("window", 0, 5)])
def test_nvtx_selection_through_the_other_path(testapps_build, tmp_path, pattern, dispatch, tag):
    """--nvtx through the other path (entry: kerncap as NVTX's own tool, nvtx_tool.cpp;
    cupti: CUPTI's NVTX callbacks) picks the launches test_selection.py picks."""
    from .test_selection import NVTX_APP, extract_nvtx, tag_of

    res = extract_nvtx(testapps_build, tmp_path, pattern, dispatch=dispatch, keep_run_dir=True,
                       env=app_env(NVTX_APP, tmp_path, KERNCAP_INTERCEPT=OTHER_PATH))
    procs = [json.loads(p.read_text()) for p in Path(res.run_dir).glob("proc-*.json")]
    assert interception_paths(procs) == {PATH_NAMES[OTHER_PATH]}
    assert tag_of(res.capture) == tag
