"""Launch kinds that only a stand-in covered before (issue 27), on real captures:

* coop_grid: `cudaLaunchCooperativeKernel` of a kernel with a grid-wide barrier
  (cooperative_groups `this_grid().sync()`), its grid as large as the device holds at
  once. The capture records the launch as cooperative with the app's grid; it replays
  (cooperatively: a plain launch of a grid barrier is not allowed) and validates
  byte-exact, and so does an unmodified recompile of its source.
* ptsz_stream: built with `--default-stream per-thread`: the launch arrives through the
  per-thread entry point (`cuLaunchKernel_ptsz`) on the per-thread default stream, and
  the capture validates byte-exact.

Both apps are in tests/gpu/apps.py's APPS too, so test_capture_apps.py,
test_replay_apps.py and test_interception_paths.py (the CUPTI path) cover them as well.
Run on the GPU machine: bash tests/gpu/run.sh -s tests/gpu/test_launch_kinds.py
"""

from __future__ import annotations

import pytest

from .apps import APPS

pytestmark = pytest.mark.gpu


def test_cooperative_launch_is_captured_replayed_and_validated(captures):
    from kerncap.replay.client import ReplayClient

    got = captures.get("coop_grid")
    cap = got.capture
    print(f"coop_grid: {cap.kernel['launch_api']}, grid {cap.launch['grid']}, attributes {cap.launch['attributes']}")
    assert cap.launch["cooperative"] is True, cap.launch
    assert cap.launch["grid"] == [got.report["grid"], 1, 1]
    with ReplayClient(got.reproducer) as rc:
        v = rc.validate()
    assert v.passed, [(r.name, r.mismatched_bytes) for r in v.regions if r.mismatched_bytes]
    assert {r.id for r in v.regions if r.kind == "region"} >= {got.region_of(k).id for k in ("out", "partial", "total")}


def test_cooperative_kernel_unmodified_recompile_validates_byte_exact(testapps_build, tmp_path):
    from kerncap.recompile import recompile
    from kerncap.replay.client import ReplayClient

    from .test_recompile_big import extract_with_sources

    repro = extract_with_sources(APPS["coop_grid"], testapps_build, tmp_path)
    built = recompile(repro)
    print(f"coop_grid recompile: {built.mode}, {built.summary}")
    with ReplayClient(repro) as rc:
        v = rc.validate(cubin=built.cubin)
    assert v.passed, [(r.name, r.mismatched_bytes) for r in v.regions if r.mismatched_bytes]


def test_per_thread_default_stream_launch_takes_the_ptsz_entry_point(captures):
    from kerncap.replay.client import ReplayClient

    got = captures.get("ptsz_stream")
    cap = got.capture
    print(f"ptsz_stream: {cap.kernel['launch_api']} on stream {cap.launch['stream']!r}, "
          f"interception {cap.provenance.get('interception')}")
    assert cap.launch["stream"] == "per-thread", cap.launch
    assert cap.kernel["launch_api"].endswith("_ptsz"), cap.kernel["launch_api"]
    with ReplayClient(got.reproducer) as rc:
        v = rc.validate()
    assert v.passed, [(r.name, r.mismatched_bytes) for r in v.regions if r.mismatched_bytes]
