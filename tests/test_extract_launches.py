"""`kerncap extract` keeps the app's launch counts up to the capture (launches.json).

The fake app publishes a real H200 capture (tests/fixtures/captures/axpy_small) the way
the capture library does, then, like the capturing process, writes its proc-<pid>.json
with `kernels_seen` a moment later (after the manifest) and keeps running; a second
process of the app reports its own launches."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from kerncap.reproducer.launches import LAUNCHES_FILE, AppLaunches
from kerncap.errors import KerncapError
from kerncap.capture.extract import extract

CAPTURE = Path(__file__).parent / "fixtures" / "captures" / "axpy_small" / "capture"

APP = textwrap.dedent(
    r'''
    import json, os, shutil, subprocess, sys, time
    out = os.environ["KERNCAP_OUT"]

    def report(seen, launches):
        path = os.path.join(out, "proc-%d.json" % os.getpid())
        open(path + ".tmp", "w").write(json.dumps({"pid": os.getpid(), "errors": [], "launches": launches,
                                                   "kernels_seen": seen, "target_matches": 1}))
        os.rename(path + ".tmp", path)

    if sys.argv[1:] == ["worker"]:
        report({"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int, at::native::FillFunctor<float>)": 7}, 7)
        sys.exit(0)
    subprocess.run([sys.executable, __file__, "worker"], check=True)
    open(os.path.join(out, "capture.lock"), "w").write("%d\n" % os.getpid())
    partial = os.path.join(out, "capture.partial-%d" % os.getpid())
    shutil.copytree(os.environ["FAKE_CAPTURE"], partial)
    os.rename(partial, os.path.join(out, "capture"))
    time.sleep(0.5)  # the capture library writes the proc report right after the manifest
    report({"axpy_inplace(float, float const*, float*, int)": 3,
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int, at::native::FillFunctor<float>)": 12,
            "init(float*, int)": 1}, 16)
    time.sleep(60)
    '''
)


@pytest.fixture
def run(tmp_path, monkeypatch):
    app = tmp_path / "app.py"
    app.write_text(APP)
    lib = tmp_path / "libkerncap_inject.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("KERNCAP_INJECT_LIB", str(lib))

    def go(output: Path):
        return extract("axpy", [sys.executable, str(app)], output=output, env={"FAKE_CAPTURE": str(CAPTURE)},
                       output_sink=lambda stream, data: None, timeout=60)

    return go


def test_launch_counts_of_every_process_up_to_the_capture(run, tmp_path):
    result = run(tmp_path / "repro")
    launches = AppLaunches.load(result.reproducer_dir)
    assert launches is not None
    assert [(k.name.split("(")[0], k.calls, k.captured) for k in launches.kernels] == [
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >", 19, False),
        ("axpy_inplace", 3, True),
        ("init", 1, False),
    ]
    assert launches.processes == 2 and launches.launches == 23
    assert launches.captured.name == "axpy_inplace(float, float const*, float*, int)"
    assert "does not time kernels" in launches.note
    assert launches.command[0] == sys.executable


def test_reproducer_without_launches_and_a_damaged_file(tmp_path):
    assert AppLaunches.load(tmp_path) is None
    (tmp_path / LAUNCHES_FILE).write_text("{not json")
    with pytest.raises(KerncapError, match="launches.json is not valid JSON") as err:
        AppLaunches.load(tmp_path)
    assert "extract again" in err.value.hint
    (tmp_path / LAUNCHES_FILE).write_text(json.dumps({"format": "kerncap-launches", "kernels": [{"name": "k"}],
                                                      "processes": 1, "launches": 1}))
    with pytest.raises(KerncapError, match=r"kernels\[0\]\.calls|calls"):  # read against its schema
        AppLaunches.load(tmp_path)


def test_captured_kernel_found_by_its_short_name():
    procs = [{"kernels_seen": {"k<4>(float*)": 2, "other(int)": 5}, "launches": 7}]
    got = AppLaunches.from_reports(procs, "k<4>(float* __restrict__)", ["app"])
    assert [k.captured for k in got.kernels] == [False, True]


def test_a_short_name_several_kernels_share_marks_none_of_them_captured():
    """Overloads share a short name: when the captured kernel's full name is none of theirs,
    no entry is marked rather than the first (most launched) of them."""
    procs = [{"kernels_seen": {"k(int*)": 9, "k(float*)": 4, "other(int)": 5}, "launches": 18}]
    got = AppLaunches.from_reports(procs, "k(float* __restrict__)", ["app"])
    assert [k.name for k in got.kernels] == ["k(int*)", "other(int)", "k(float*)"]
    assert [k.captured for k in got.kernels] == [False, False, False] and got.captured is None
    exact = AppLaunches.from_reports(procs, "k(float*)", ["app"])  # the full name decides
    assert exact.captured is not None and exact.captured.name == "k(float*)" and exact.captured.calls == 4
