"""A sequence carries what one dispatch carries (issue 43): testapps/cuda/seq_tex_host.cu
runs three kernels inside the NVTX range "layer" that read a texture over a cudaArray and
a lookup table in mapped pinned host memory, and write mapped host memory. The sequence
capture (instance 1) records the array and the texture object, the host regions' contents
before and after the window, each launch's texture handle and host pointers, and the
closure check (native/capture/manifest_writer.cpp, the writer one dispatch uses); `kerncap
info` says it lacks nothing; it replays byte-exact with no "lacks" note, in the streams
and the serial order. The CPU side of the same writer: tests/test_manifest_writer.py."""

from __future__ import annotations

import json

import pytest

from kerncap import api
from kerncap.reproducer.format import Capture
from kerncap.reproducer.info import lacks

from .apps import TESTAPPS, AppSpec, app_env

pytestmark = pytest.mark.gpu

KERNELS = ["st_sample", "st_gather", "st_reduce"]


@pytest.fixture(scope="module")
def layer(testapps_build, tmp_path_factory):
    work = tmp_path_factory.mktemp("seq_tex_host")
    spec = AppSpec("seq_tex_host", "", timeout=120.0)
    res = api.extract("", spec.command(testapps_build), output=work / "reproducer", timeout=spec.timeout,
                      env=app_env(spec, work), sequence=api.SequenceRequest("nvtx"),
                      selection=api.Selection(nvtx="layer"), dispatch=1)
    print(api.format_extract(res))
    for w in res.warnings:
        print(f"  warning: {w}")
    report = json.loads((work / "report.json").read_text())
    return res, report


def test_the_sequence_records_the_texture_the_host_memory_and_the_closure(layer):
    res, report = layer
    cap = Capture.open(res.reproducer_dir)
    seq = cap.sequence
    assert [seq.kernel_of(i).demangled.split("(")[0] for i in range(len(seq.launches))] == KERNELS
    assert lacks(cap) == [], lacks(cap)
    # the cudaArray and the texture over it, restorable
    (array,) = [a for a in cap.arrays if a.captured]
    assert (array.width, array.height) == (report["w"], report["h"])
    (tex,) = [o for o in cap.texture_objects if o.handle == report["handle"]]
    assert tex.restorable, tex.why
    # launch 0 passes the texture's handle; the manifest's first launch says so too
    handles = [p.handle_object for p in seq.launches[0].params if p.handle_object is not None]
    assert handles == [tex.id]
    assert [p.handle_object for p in cap.params if p.handle_object is not None] == [tex.id]
    # the mapped table and the sums: snapshotted before and after the window
    hosts = {h.base: h for h in cap.host_regions}
    table, sums = hosts[report["table"]], hosts[report["sums"]]
    assert table.snapshotted and sums.snapshotted
    assert sums.written and not table.written
    # launch 1 reaches the table, launch 2 the sums, through their device pointers
    m = json.loads((res.reproducer_dir / "capture" / "sequence.json").read_text())
    host_hits = [{h["host_region"] for p in l["params"] for h in p.get("host_pointers", [])} for l in m["launches"]]
    assert host_hits == [set(), {table.id}, {sums.id}], host_hits
    # the closure check ran over every launch and found nothing outside the capture
    assert cap.manifest["closure"]["words_checked"] > 0
    assert cap.manifest["closure"]["unresolved"] == []


@pytest.mark.parametrize("order", ["streams", "serial"])
def test_the_sequence_replays_byte_exact_with_no_lacks_note(layer, order):
    res, _ = layer
    report = api.validate_request([res.reproducer_dir], api.ValidateRequest(runs=2), order=order)
    text = api.format_trust_report(report)
    print(text)
    assert report.verdict == "pass", text
    assert "lacks" not in text, text


def test_info_says_nothing_is_lacking(layer):
    res, _ = layer
    info = api.info(res.reproducer_dir)
    text = api.format_info(info)
    print(text)
    assert "LACKS" not in text and "lacks" not in text
