"""Issue 45: the workbench asks the session where a save lands and what it builds; the
shape (one dispatch, a sequence, a set) decides, not the front end. Over real H200
captures: axpy_small (one dispatch) and seq_small (a five-kernel sequence)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kerncap import api
from kerncap.errors import UsageError
from kerncap.session.session import Session

ROOT = Path(__file__).resolve().parent.parent
AXPY = ROOT / "tests" / "fixtures" / "captures" / "axpy_small"
SEQ = ROOT / "tests" / "fixtures" / "captures" / "seq_small"
DEMO = ROOT / "kerncap_tui" / "demo" / "reproducer"


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def test_one_dispatch_builds_its_source_on_any_save(tmp_path):
    repro = _copy(DEMO, tmp_path)
    s = Session(repro, compile_worker=False)
    assert not s.can_fuse and s.launches == []
    kernel = s.capture.kernel
    assert s.title == (kernel.get("demangled") or kernel["name"])
    assert s.edit_dirs() == [repro / "source"]
    assert s.build_for_save(repro / "source" / "any.cu") == api.BuildRequest()
    assert s.build_by_hand() == api.BuildRequest()
    with pytest.raises(UsageError, match="no launches to fuse"):
        s.launch_names(0, 1)
    bare = Session(_copy(AXPY, tmp_path), compile_worker=False)  # extracted without its sources
    assert bare.edit_dirs() == []
    with pytest.raises(UsageError, match="has no source/ to build"):
        bare.build_by_hand()


def test_a_sequence_builds_the_kernel_or_fusion_a_save_belongs_to(tmp_path):
    repro = _copy(SEQ, tmp_path)
    s = Session(repro, compile_worker=False)
    seq = s.capture.sequence
    assert s.can_fuse and len(s.launches) == len(seq.launches) > 1
    assert s.title == f"sequence: {seq.summary()}"
    assert s.edit_dirs() == [repro / "kernels"]  # fusions/ joins once it exists
    src = next((repro / "kernels" / "1" / "source").rglob("*.cu*"))
    assert s.build_for_save(src) == api.BuildRequest(kernel="1")
    assert s.build_for_save(repro / "kernels" / "1" / "reproducer.json") is None  # not a source
    last = len(seq.launches) - 1
    assert s.build_by_hand(last) == api.BuildRequest(kernel=str(seq.launches[last].kernel))
    assert s.build_by_hand(0, fusion="f") == api.BuildRequest(fusion="f")
    names = s.launch_names(0, 1)
    assert names == [(seq.kernel_of(i).demangled or seq.kernel_of(i).name).split("(")[0] for i in (0, 1)]
    # a range reaching past either end names only the launches that exist
    assert s.launch_names(last, last + 2) == [(seq.kernel_of(last).demangled or seq.kernel_of(last).name).split("(")[0]]
    assert s.launch_names(-1, 0) == names[:1]
    (repro / "fusions").mkdir()
    assert s.edit_dirs() == [repro / "kernels", repro / "fusions"]
    shutil.rmtree(repro / "kernels")
    with pytest.raises(UsageError, match="no kernel sources"):
        s.build_by_hand(0)


def test_holds_reproducer_knows_a_set_a_sequence_and_a_capture_dir(tmp_path):
    assert api.holds_reproducer(AXPY) and api.holds_reproducer(SEQ) and api.holds_reproducer(AXPY / "capture")
    assert not api.holds_reproducer(tmp_path)
    (tmp_path / "set.json").write_text("{}")
    assert api.holds_reproducer(tmp_path)
