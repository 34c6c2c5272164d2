"""Capture every test application and check the manifest against what the app did."""

from __future__ import annotations

import struct

import pytest

from .apps import (
    APPS,
    MOE_WEIGHTS,
    POINTER_TABLE_OUTS,
    TEMPLATE_K3,
    looks_like_device_address,
    u64,
)

pytestmark = pytest.mark.gpu

ALL_APPS = sorted(APPS)


@pytest.mark.parametrize("app", ALL_APPS)
def test_manifest_complete(captures, app):
    got = captures.get(app)
    cap, spec = got.capture, got.spec
    cap.verify()  # every payload present with the right size and hash; cubin present

    kernel = cap.kernel
    assert spec.kernel in kernel["name"] or spec.kernel in kernel.get("demangled", "")
    assert kernel["launch_api"].startswith(("cuLaunchKernel", "cuLaunchCooperativeKernel"))
    assert len(kernel["module"]["sha256"]) == 64 and cap.cubin_path.is_file()
    assert kernel["attributes"]["num_regs"] > 0

    launch = cap.launch
    assert len(launch["grid"]) == 3 and all(g >= 1 for g in launch["grid"])
    assert len(launch["block"]) == 3 and all(b >= 1 for b in launch["block"])
    assert launch["param_form"] in ("array", "extra")

    buf = cap.param_buffer
    assert cap.params, "no parameters recorded"
    for p in cap.params:
        assert buf[p.offset : p.offset + p.size] == p.value, f"param {p.index} disagrees with param_buffer"

    assert cap.regions, "no regions captured"
    for before, after in zip(cap.regions, cap.regions[1:]):
        assert before.end <= after.base, f"regions {before.id} and {after.id} overlap or are unsorted"

    prov = cap.provenance
    gpu = prov["gpu"]
    assert gpu["name"] and gpu["uuid"].startswith("GPU-")
    assert tuple(gpu["cc"]) == (9, 0)
    assert gpu["driver_version"] >= 13000
    assert prov["dispatch_index"] == spec.dispatch
    assert prov["match"]["pattern"] == spec.kernel and prov["match"]["mode"] == spec.match
    assert prov["bytes"]["logical"] == cap.logical_bytes
    assert prov["capture_seconds"]["total"] > 0


@pytest.mark.parametrize("app", ALL_APPS)
def test_pointer_params_lie_in_regions(captures, app):
    cap = captures.get(app).capture
    for p in cap.params:
        if p.size != 8:
            continue
        value = u64(p.value)
        region = cap.region_of(value)
        if p.region is not None:
            assert region is not None and region.id == p.region, f"param {p.index}: wrong region annotation"
            assert p.region_offset == value - region.base
        if looks_like_device_address(value):
            assert region is not None, f"param {p.index} = {value:#x} points into no captured region"
            assert p.region == region.id, f"param {p.index} = {value:#x} lacks its pointer annotation"


@pytest.mark.parametrize("app", ALL_APPS)
def test_reported_buffers_are_captured(captures, app):
    got = captures.get(app)
    for key in (*got.spec.writes, *got.spec.reads):
        assert got.region_of(key) is not None, f"{app}: buffer {key} = {got.report[key]:#x} was not captured"


@pytest.mark.parametrize("app", ALL_APPS)
def test_pre_and_post_differ_exactly_where_the_kernel_writes(captures, app):
    got = captures.get(app)
    cap, spec = got.capture, got.spec
    for r in cap.regions:
        assert r.written == (r.pre != r.post), f"region {r.id}: 'written' disagrees with its payloads"
    written = {r.id for r in cap.regions if r.written}
    expected = {got.region_of(k).id for k in spec.writes}
    untouched = {got.region_of(k).id for k in spec.reads} - expected
    assert expected <= written, f"regions the kernel writes were not seen written: {sorted(expected - written)}"
    assert not (untouched & written), f"regions the kernel only reads changed: {sorted(untouched & written)}"
    if spec.exact:
        assert written == expected, f"unexpected written regions {sorted(written - expected)}"
    else:
        assert written, "the kernel wrote nothing"


def test_pointer_table_restores_tables_and_constant(captures):
    got = captures.get("pointer_table")
    cap = got.capture
    scale = [g for g in cap.globals if g.name == "scale"]
    assert scale, f"__constant__ scale missing; globals: {[g.name for g in cap.globals]}"
    g = scale[0]
    assert g.size == 4 and not g.written
    assert struct.unpack("<f", cap.read_bytes(g.pre, g.size))[0] == 1.5
    # The out table (a device buffer of pointers) holds the output buffers' addresses.
    table = got.region_of("out_table")
    raw = cap.read_bytes(table.pre, table.size)
    offset = got.report["out_table"] - table.base
    pointers = struct.unpack("<4Q", raw[offset : offset + 32])
    assert list(pointers) == [got.report[k] for k in POINTER_TABLE_OUTS]


def test_template_multi_captures_the_requested_instance(captures):
    cap = captures.get("template_multi").capture
    assert cap.kernel["name"] == TEMPLATE_K3
    assert "stencil<3>" in cap.kernel["demangled"]
    assert cap.provenance["dispatch_index"] == 1


def test_dyn_smem_records_large_dynamic_shared_memory(captures):
    got = captures.get("dyn_smem")
    assert got.capture.launch["shared_mem_bytes"] == got.report["smem"] > 48 * 1024
    assert got.capture.kernel["attributes"]["max_dynamic_shared_size_bytes"] >= got.report["smem"]


def test_multistream_other_thread_writes_are_not_in_the_capture(captures):
    """DESIGN fact 7: the writer thread must be held while the dispatch is captured."""
    got = captures.get("multistream")
    other = got.region_of("other")
    assert other.pre == other.post and not other.written, (
        "the writer thread's buffer changed between pre- and post-state: "
        "another thread's kernels ran during the capture"
    )
    assert got.capture.launch["stream"] in ("null", "legacy")


def test_torch_matmul_nvjet_uses_extra_and_launch_attributes(captures):
    cap = captures.get("torch_matmul").capture
    assert "nvjet" in cap.kernel["name"]
    assert cap.kernel["launch_api"].startswith("cuLaunchKernelEx")
    assert cap.launch["param_form"] == "extra"
    ids = [a["id"] for a in cap.launch["attributes"]]
    assert 4 in ids, f"no cluster-dimension launch attribute (id 4); got ids {ids}"


def test_triton_autotune_dispatch_skips_benchmark_launches(captures):
    got = captures.get("triton_autotune")
    best = got.report["best"]
    assert best, "the app never reported its chosen config"
    n = got.report["n"]
    launch = got.capture.launch
    assert launch["grid"] == [-(-n // best["BLOCK_SIZE"]), 1, 1], f"grid is not the chosen config's ({best})"
    assert launch["block"] == [32 * best["num_warps"], 1, 1]


def test_triton_flash_attn_dispatch_is_the_chosen_config(captures):
    got = captures.get("triton_flash_attn")
    best = got.report["best"]
    assert best, "the app never reported its chosen config"
    launch = got.capture.launch
    grid = [got.report["seq"] // best["BLOCK_M"], got.report["batch"] * got.report["heads"], 1]
    assert launch["grid"] == grid, f"grid is not the chosen config's ({best})"
    assert launch["block"] == [32 * best["num_warps"], 1, 1]


def test_triton_moe_expert_weights_are_captured_through_the_table(captures):
    """No kernel argument points at an expert weight: the kernel reads their addresses
    from `table` (device memory). The capture holds them because it keeps every live
    allocation (address-space closure), and replay at the original addresses validates."""
    from kerncap.replay.client import ReplayClient

    got = captures.get("triton_moe")
    cap, report = got.capture, got.report
    weight_bytes = report["d_in"] * report["d_out"] * 2  # fp16
    table = got.region_of("table")
    raw = cap.read_bytes(table.pre, table.size)
    offset = report["table"] - table.base
    pointers = struct.unpack(f"<{len(MOE_WEIGHTS)}Q", raw[offset : offset + 8 * len(MOE_WEIGHTS)])
    assert list(pointers) == [report[k] for k in MOE_WEIGHTS], "the captured table does not hold the weights' addresses"
    params = {u64(p.value) for p in cap.params if p.size == 8}
    for key in MOE_WEIGHTS:
        address = report[key]
        assert address not in params, f"a kernel argument points at {key} directly"
        region = cap.region_of(address)
        assert region is not None, f"{key} = {address:#x} lies in no captured region"
        assert address + weight_bytes <= region.end, f"{key} runs past the end of region {region.id}"
        start = address - region.base
        pre = cap.read_bytes(region.pre, region.size)[start : start + weight_bytes]
        post = cap.read_bytes(region.post, region.size)[start : start + weight_bytes]
        assert pre == post and any(pre), f"{key}: captured weights are all zero or changed"
    with ReplayClient(got.reproducer) as rc:
        result = rc.validate()
    assert result.passed, [r for r in result.regions if r.mismatched_bytes]


def test_torch_expandable_regions_come_from_cumemmap(captures):
    got = captures.get("torch_expandable")
    for key in ("a", "b", "out"):
        region = got.region_of(key)
        assert region.api == "cuMemMap" and region.kind == "vmm", f"{key}: region {region.id} from {region.api}"
