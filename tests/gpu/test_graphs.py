"""CUDA graphs (issue 12) end to end: a kernel that runs as a node of a launched graph is
captured at its node, with the parameters in force at that launch, byte-exact against
an eager capture of the same step, replayed/validated/recompiled like any capture; what
kerncap cannot follow is refused with the reason (docs/graphs.md)."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from kerncap.errors import KerncapError

from .apps import PYAPPS, TESTAPPS, AppSpec, Once, app_env

pytestmark = pytest.mark.gpu

N = 1 << 14  # testapps/cuda/graph_explicit.cu: kN


class GraphCaptures:
    """One extract per (app, mode, dispatch) per session."""

    def __init__(self, build: Path, root: Path):
        self.build, self.root, self.once = build, root, Once()

    def get(self, spec: AppSpec, label: str, **kwargs):
        return self.once.get(label, lambda: self._extract(spec, label, **kwargs))

    def _extract(self, spec: AppSpec, label: str, **kwargs):
        from kerncap.reproducer.format import Capture
        from kerncap.capture.extract import extract

        work = self.root / label
        work.mkdir(parents=True)
        res = extract(spec.kernel, spec.command(self.build), output=work / "reproducer",
                      dispatch=spec.dispatch, match=spec.match, keep_running=spec.keep_running,
                      timeout=spec.timeout, env=app_env(spec, work), **kwargs)
        report = json.loads((work / "report.json").read_text()) if (work / "report.json").exists() else {}
        return Path(res.reproducer_dir), Capture.open(res.reproducer_dir), report, work


@pytest.fixture(scope="module")
def graphs(testapps_build, tmp_path_factory) -> GraphCaptures:
    return GraphCaptures(testapps_build, tmp_path_factory.mktemp("graphs"))


def explicit(mode: str, dispatch: int = 2) -> AppSpec:
    return AppSpec("graph_explicit", "gx_target", dispatch=dispatch, args=(mode,), keep_running=True)


def floats(cap, report: dict, key: str, state: str):
    np = pytest.importorskip("numpy")
    region = cap.region_of(report[key])
    raw = cap.read_bytes(getattr(region, state), region.size)
    return np.frombuffer(raw, dtype=np.float32, count=N, offset=report[key] - region.base)


def failing(result) -> str:
    return ", ".join(f"{r.kind} {r.id}: {r.mismatched_bytes} bytes" for r in result.regions
                     if r.mismatched_bytes or r.unexpected_write) or "(none)"


MODES = ["setparams", "capture", "child", "update", "reinstantiate"]


@pytest.mark.parametrize("mode", MODES)
def test_graph_node_captured_with_the_parameters_in_force(graphs, mode):
    """Dispatch 2 of gx_target is launch L2: a = 5 into out3 (changed by the mode's update
    calls), after L2's gx_prep (in = 3, acc = 1.5) and before L2's gx_after (late = 2)."""
    from kerncap.replay.client import ReplayClient

    repro, cap, report, work = graphs.get(explicit(mode), f"explicit-{mode}")
    assert (work / "done").exists(), f"{mode}: the app's own result check failed under keep-running"
    g = cap.launch.get("graph")
    assert g, f"{mode}: the capture does not say it ran in a graph: {cap.launch}"
    print(f"{mode}: {json.dumps(g)}")
    if mode == "reinstantiate":
        assert g["exec_launch"] == 0 and g["exec_id"] == 3, g  # a new executable graph per change
    else:
        assert g["exec_launch"] == 2 and g["exec_id"] == 1, g
    assert g["built_by"] == ("stream capture" if mode == "capture" else "graph API"), g
    if mode == "child":
        assert len(g["path"]) == 2, g
    params = {p.index: p for p in cap.params}
    assert struct.unpack("<f", params[3].value)[0] == 5.0, "the scalar in force at L2 is a = 5"
    assert struct.unpack("<Q", params[0].value)[0] == report["out3"], "the pointer in force at L2 is out3"
    assert (floats(cap, report, "in", "pre") == 3.0).all(), "pre-state lacks L2's gx_prep writes to in"
    assert (floats(cap, report, "acc", "pre") == 1.5).all(), "pre-state lacks L2's gx_prep writes to acc"
    assert (floats(cap, report, "late", "pre") == 2.0).all(), "late: L2's gx_after must not have run yet"
    assert (floats(cap, report, "late", "post") == 2.0).all(), "post-state holds a later node's writes"
    assert (floats(cap, report, "out3", "post") == 10.5).all()
    written = {r.id for r in cap.regions if r.written}
    assert written == {cap.region_of(report["out3"]).id}, f"written regions {written}"
    with ReplayClient(repro) as rc:
        result = rc.validate()
    assert result.passed, f"{mode}: {failing(result)}"


def test_graph_capture_equals_the_eager_capture_of_the_same_step(graphs):
    _, gcap, greport, _ = graphs.get(explicit("setparams"), "explicit-setparams")
    _, ecap, ereport, _ = graphs.get(explicit("eager"), "explicit-eager")
    assert not ecap.launch.get("graph")
    for key in ("in", "acc", "late", "out3"):
        for state in ("pre", "post"):
            assert (floats(gcap, greport, key, state) == floats(ecap, ereport, key, state)).all(), (key, state)
    # Same scalars (pointers differ: addresses move between runs).
    assert [p.value for p in gcap.params][3:] == [p.value for p in ecap.params][3:]


def test_unmodified_recompile_of_a_graph_node_validates(graphs, tmp_path):
    from kerncap.recompile.cuda import recompile
    from kerncap.replay.client import ReplayClient

    repro, *_ = graphs.get(explicit("setparams"), "explicit-setparams-src", source_dir=TESTAPPS / "cuda",
                           build_dir=graphs.build)
    cubin = recompile(repro).cubin
    with ReplayClient(repro) as rc:
        result = rc.validate(cubin=cubin)
    assert result.passed, failing(result)


def test_stream_captured_graph_target(graphs):
    """testapps graph_target: 4 nodes of graph_scale per launch, 3 launches; dispatch 5 is
    launch 1, node 1: p = p/2 + 1 applied 5 times from 0 before it."""
    from kerncap.replay.client import ReplayClient

    np = pytest.importorskip("numpy")
    spec = AppSpec("graph_target", "graph_scale", dispatch=5, keep_running=True)
    repro, cap, _, work = graphs.get(spec, "graph_target")
    assert (work / "done").exists()
    g = cap.launch["graph"]
    assert (g["exec_launch"], g["target_index"], g["built_by"]) == (1, 1, "stream capture"), g
    (region,) = [r for r in cap.regions if r.written]
    pre = np.frombuffer(cap.read_bytes(region.pre, region.size), dtype=np.float32)[: 1 << 20]
    assert (pre == np.float32(1.9375)).all()
    with ReplayClient(repro) as rc:
        assert rc.validate().passed


# -- PyTorch ---------------------------------------------------------------------------------

MLP_TRITON = AppSpec("torch_graph_mlp", "kc_bias_gelu", python=True, dispatch=4, keep_running=True, timeout=300.0)
MLP_GEMM = AppSpec("torch_graph_mlp", "nvjet", python=True, dispatch=7, keep_running=True, timeout=300.0)
COMPILE = AppSpec("torch_compile_graphs", "^triton_(red|per)_fused", match="regex", python=True, dispatch=3,
                  keep_running=True, timeout=400.0)


@pytest.mark.parametrize("spec", [MLP_TRITON, MLP_GEMM, COMPILE], ids=lambda s: f"{s.name}-{s.kernel}")
def test_pytorch_graph_kernels_validate_and_replay_timed(graphs, testapps_build, tmp_path, spec):
    from kerncap.capture.profile import run_profile
    from kerncap.replay.client import ReplayClient

    repro, cap, report, work = graphs.get(spec, f"{spec.name}-{spec.dispatch}")
    assert (work / "done").exists(), "the app's own check failed under keep-running"
    assert cap.launch.get("graph"), f"dispatch {spec.dispatch} of {spec.kernel} did not run in a graph"
    with ReplayClient(repro) as rc:
        result = rc.validate()
        assert result.passed, failing(result)
        timing = rc.replay(iterations=50, warmup=5)
    profile = run_profile(spec.command(testapps_build), env=app_env(spec, tmp_path), timeout=spec.timeout)
    name = cap.kernel.get("name")
    stat = max((k for k in profile.kernels if k.name == name), key=lambda k: k.total_ns, default=None)
    assert stat is not None, f"profile has no {name}"
    replay_ns = timing.median_ms * 1e6
    print(f"{spec.name} {name[:60]}: app avg {stat.avg_ns:.0f} ns ({stat.calls} calls), replay median "
          f"{replay_ns:.0f} ns")  # how close: bench/replay.py's `accuracy` figure
    assert timing.iterations == 50 and min(timing.times_ms) > 0, timing


def test_graph_mlp_capture_is_the_replay_that_ran(graphs):
    """kc_bias_gelu dispatch 4 = graph replay 2, whose input x was filled with 3/8."""
    np = pytest.importorskip("numpy")
    _, cap, report, _ = graphs.get(MLP_TRITON, f"{MLP_TRITON.name}-{MLP_TRITON.dispatch}")
    region = cap.region_of(report["x"])
    raw = cap.read_bytes(region.pre, region.size)
    x = np.frombuffer(raw, dtype=np.float16, count=16384 * 256, offset=report["x"] - region.base)
    assert (x == np.float16(3 / 8)).all()


@pytest.mark.parametrize("spec", [MLP_TRITON, COMPILE], ids=["triton", "inductor"])
def test_triton_graph_kernels_recompile_byte_exact(graphs, spec):
    from kerncap.replay.client import ReplayClient
    from kerncap.triton import recompile

    repro, *_ = graphs.get(spec, f"{spec.name}-{spec.dispatch}")
    record = json.loads((repro / "reproducer.json").read_text())
    assert record["sources"] and record["sources"]["kind"] == "triton", record.get("notes")
    res = recompile(repro)
    with ReplayClient(repro) as rc:
        result = rc.validate(cubin=res.cubin)
    assert result.passed, f"{failing(result)}\n{res.log}"


# -- refusals --------------------------------------------------------------------------------


def refusal(testapps_build, tmp_path, spec: AppSpec) -> str:
    from kerncap.capture.extract import extract

    with pytest.raises(KerncapError) as err:
        extract(spec.kernel, spec.command(testapps_build), output=tmp_path / "r", dispatch=spec.dispatch,
                keep_running=True, timeout=spec.timeout, env=app_env(spec, tmp_path))
    text = str(err.value)
    print(text)
    assert (tmp_path / "done").exists(), "the app did not finish normally under the capture library"
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())
    return text


@pytest.mark.parametrize("mode, dispatch, words", [
    ("conditional", 0, r"conditional"),
    ("never", 0, r"instantiated but never launched"),
    ("twostreams", 3, r"two streams at once"),
    ("destroyed", 5, r"destroyed after 1 launch"),
])
def test_graph_refusals_name_the_reason(testapps_build, tmp_path, mode, dispatch, words):
    text = refusal(testapps_build, tmp_path, explicit(mode, dispatch))
    assert re.search(words, text), text


def test_device_side_graph_launch_is_refused(testapps_build, tmp_path):
    text = refusal(testapps_build, tmp_path, AppSpec("graph_device", "gd_scale", keep_running=True))
    assert re.search(r"device-side launch|DEVICE_LAUNCH", text), text
