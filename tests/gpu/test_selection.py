"""Selection (issue 13) on one GPU: NVTX ranges through the C/C++ NVTX API (nvtx3) and
through torch.cuda.nvtx, `profile --by-nvtx`, and the bad-input messages for a pattern
never seen, --rank without rank variables, --rank and --pid that disagree
(docs/selection.md). Prints the figures the issue asks for."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kerncap.errors import KerncapError

from .apps import AppSpec, app_env

pytestmark = pytest.mark.gpu

NVTX_APP = AppSpec("nvtx_ranges", "nv_tagged")
LAYERS_APP = AppSpec("nvtx_layers", "kc_nvtx_layer", python=True, timeout=300.0)


def tag_of(cap) -> int:
    """nv_tagged(float* out, const float* in, int n, int tag): the `tag` argument."""
    return struct.unpack("<i", cap.params[3].value)[0]


def extract_nvtx(build: Path, work: Path, pattern: str, match: str = "substring", dispatch: int = 0,
                 spec: AppSpec = NVTX_APP, env: dict[str, str] | None = None, **kwargs):
    from kerncap.capture.extract import extract
    from kerncap.capture.selection import Selection

    work.mkdir(parents=True, exist_ok=True)
    return extract(spec.kernel, spec.command(build), output=work / "reproducer", dispatch=dispatch,
                   timeout=spec.timeout, env=env or app_env(spec, work),
                   selection=Selection(nvtx=pattern, nvtx_match=match), **kwargs)


@pytest.mark.parametrize("pattern,match,dispatch,tag,path", [
    ("outer/inner.7", "substring", 0, 2, "outer/inner.7"),          # nested push/pop, default domain
    ("outer/inner.7", "substring", 1, 6, "outer/inner.7"),          # its second launch
    ("^outer$", "regex", 0, 3, "outer"),                            # the path exactly
    ("kcdomain:phase.B", "substring", 0, 4, "kcdomain:phase.B"),    # named domain, registered string
    ("window", "substring", 0, 5, "window"),                        # start/end range, launch on another thread
])
def test_cpp_nvtx_selects_the_launch_in_the_range(testapps_build, tmp_path, pattern, match, dispatch, tag, path):
    res = extract_nvtx(testapps_build, tmp_path, pattern, match, dispatch)
    nvtx = res.capture.launch["nvtx"]
    print(f"\n--nvtx {pattern!r} ({match}) dispatch {dispatch}: tag {tag_of(res.capture)}, path {nvtx['path']!r}")
    assert tag_of(res.capture) == tag
    assert nvtx["path"] == path
    if pattern == "window":
        assert nvtx["ranges"] == ["window"] and nvtx["stack"] == []
    from kerncap.reproducer.info import format_summary, summarize

    assert f"nvtx        {path}" in format_summary(summarize(res.reproducer_dir))


def test_nvtx_pattern_never_seen_lists_the_ranges_closest_first(testapps_build, tmp_path):
    with pytest.raises(KerncapError) as exc:
        extract_nvtx(testapps_build, tmp_path, "outer/inner.8")
    msg = exc.value.message
    print(f"\n{msg}")
    assert "matched no range the target ran in" in msg
    listed = [line.strip() for line in msg.splitlines()[1:]]
    assert listed[0] == "outer/inner.7" and "kcdomain:phase.B" in listed and "window" in listed
    assert not (tmp_path / "reproducer").exists()


def test_profile_by_nvtx_ranks_time_per_range_and_kernel(testapps_build):
    from kerncap.commands.profile import print_nvtx_table
    from kerncap.capture.profile import run_profile

    result = run_profile(NVTX_APP.command(testapps_build), by_nvtx=True, timeout=120)
    print_nvtx_table(result, top=0)
    rows = {r["path"]: r for r in result.nvtx_ranges if "nv_tagged" in r["kernel"]}
    assert rows["outer/inner.7"]["calls"] == 2
    assert rows["outer"]["calls"] == 1 and rows["kcdomain:phase.B"]["calls"] == 1 and rows["window"]["calls"] == 1
    assert rows[""]["calls"] == 1  # outside every range
    assert sum(r["calls"] for r in rows.values()) == 6
    assert all(r["total_ns"] > 0 for r in rows.values())
    only = run_profile(NVTX_APP.command(testapps_build), nvtx="inner.7", timeout=120)
    assert [k.calls for k in only.kernels if "nv_tagged" in k.name] == [2]


def test_torch_nvtx_layer5_of_the_second_forward(testapps_build, tmp_path):
    """Evidence: the kernel inside forward.S1024/layer.5 is that one: its grid and `seq`
    argument are 1024 and layer 5's own weights are among its arguments and in the closure."""
    res = extract_nvtx(testapps_build, tmp_path, "forward.S1024/layer.5", spec=LAYERS_APP)
    cap = res.capture
    report = json.loads((tmp_path / "report.json").read_text())
    ints = [struct.unpack("<i", p.value)[0] for p in cap.params if p.size == 4]
    ptrs = [struct.unpack("<Q", p.value)[0] for p in cap.params if p.size == 8]
    nvtx = cap.launch["nvtx"]
    print(f"\ncaptured grid {cap.launch['grid']}, int args {ints}, nvtx {nvtx}")
    assert cap.launch["grid"][0] == 1024 and 1024 in ints and 256 in ints
    assert report["w5"] in ptrs and all(report[f"w{i}"] not in ptrs for i in (0, 1, 2, 3, 4, 6, 7))
    assert cap.region_of(report["w5"]) is not None  # the layer's weights are in the closure
    assert nvtx["path"] == "step.1/forward.S1024/layer.5"
    assert nvtx["stack"] == ["forward.S1024", "layer.5"] and nvtx["ranges"] == ["step.1"]
    from kerncap.replay.client import ReplayClient

    with ReplayClient(res.reproducer_dir) as rc:
        assert rc.validate().passed


def test_rank_without_rank_variables_is_explained(testapps_build, tmp_path):
    from kerncap.capture.extract import extract
    from kerncap.capture.selection import Selection

    spec = AppSpec("axpy_inplace", "axpy_inplace")
    env = {k: v for k, v in app_env(spec, tmp_path).items()
           if k not in ("RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")}
    with pytest.raises(KerncapError) as exc:
        extract(spec.kernel, spec.command(testapps_build), output=tmp_path / "r", env=env, timeout=120,
                selection=Selection(rank=0))
    print(f"\n{exc.value}")
    assert "no process of the job sets a rank variable" in exc.value.message


def test_rank_and_pid_that_disagree_stop_the_app_at_once(testapps_build, tmp_path):
    """The app is rank 0 (RANK set by hand) but not pid 1: the request cannot be met."""
    import time

    from kerncap.capture.extract import extract
    from kerncap.capture.selection import Selection

    spec = AppSpec("axpy_inplace", "axpy_inplace")
    t0 = time.monotonic()
    with pytest.raises(KerncapError) as exc:
        extract(spec.kernel, spec.command(testapps_build), output=tmp_path / "r", timeout=120,
                env=app_env(spec, tmp_path, RANK="0", WORLD_SIZE="1"), selection=Selection(rank=0, pid=1))
    print(f"\n{exc.value} ({time.monotonic() - t0:.1f} s)")
    assert "--rank 0 is process" in exc.value.message and "not --pid 1" in exc.value.message

