"""Issue 4 on the GPU: extract with --source-dir, recompile only the kernel from the
reproducer's editable copy, replay and validate it against the capture."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .apps import TESTAPPS
from .smooth_edits import SMOOTH_MANGLED, edit, kernel_header
from .timing import print_comparison

pytestmark = pytest.mark.gpu

TEMPLATE_K3 = "_Z7stencilILi3EEvPKfPfi"


@pytest.fixture(scope="module")
def smooth_repro(testapps_build, tmp_path_factory) -> Path:
    from kerncap.capture.extract import extract

    out = tmp_path_factory.mktemp("smooth") / "reproducer"
    res = extract(SMOOTH_MANGLED, [str(testapps_build / "smooth")], output=out, match="exact",
                  source_dir=TESTAPPS / "cuda", build_dir=testapps_build, timeout=120)
    assert res.sources and res.sources["kind"] == "cuda", res.sources
    return Path(res.reproducer_dir)


def test_sources_found_for_the_captured_kernel(smooth_repro):
    import json

    sources = json.loads((smooth_repro / "reproducer.json").read_text())["sources"]
    assert sources["translation_unit"].endswith("smooth.cu")
    assert any(f.endswith("smooth_kernel.cuh") for f in sources["files"])
    assert sources["confidence"] == "exact"
    assert kernel_header(smooth_repro).is_file()


def test_template_instance_from_the_right_translation_unit(testapps_build, tmp_path):
    from kerncap.capture.extract import extract

    res = extract(TEMPLATE_K3, [str(testapps_build / "template_multi")], output=tmp_path / "r", match="exact",
                  dispatch=1, source_dir=TESTAPPS / "cuda", build_dir=testapps_build, timeout=120)
    assert res.sources["translation_unit"].endswith("tu_b.cu"), res.sources


def test_recompile_edit_replay_validate(smooth_repro, tmp_path):
    from kerncap.recompile.cuda import recompile
    from kerncap.replay.client import ReplayClient

    work = tmp_path / "r"
    shutil.copytree(smooth_repro, work)
    header = kernel_header(work)
    original = header.read_text()
    unmodified = recompile(work).cubin
    with ReplayClient(work) as rc:
        assert rc.validate().passed
        assert rc.validate(cubin=unmodified).passed, "the unmodified recompile must validate byte-exact"

        edit(header, "fast")
        fast = recompile(work).cubin
        v = rc.validate(cubin=fast)
        assert v.passed, v.to_dict()
        assert fast.read_bytes() != unmodified.read_bytes(), "the edit built the same cubin"
        print_comparison(rc, [unmodified, fast], label="smooth, boundary check hoisted (bench/speedups.py judges it)")

        header.write_text(original)
        edit(header, "wrong")
        wrong = recompile(work).cubin
        v = rc.validate(cubin=wrong)
        assert not v.passed
        failing = [r for r in v.regions if r.mismatched_bytes]
        assert len(failing) == 1 and failing[0].kind == "region"
