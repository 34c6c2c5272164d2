"""attach_triton / recompile / region_dtypes on the CPU.

The hook records come from a real run of the hook against real Triton on a fake CUDA
driver (see test_triton_hook.py); the capture directory around them is built here from
the real Triton cubin, since no GPU is available to make one. GPU evidence:
tests/gpu/test_triton_repro.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("elftools")
xxhash = pytest.importorskip("xxhash")

from kerncap.errors import KerncapError  # noqa: E402
from kerncap.reproducer.format import Capture  # noqa: E402
from kerncap.triton import attach_triton, recompile, region_dtypes  # noqa: E402
from kerncap.triton.kernel_source import function_only_module, sanitize_module  # noqa: E402
from kerncap.triton.pinned import parse_config  # noqa: E402
from test_triton_hook import app_dir, fake_inject, run_capture  # noqa: E402,F401  (fixtures)

N = 1000


def _blob(cap: Path, data: bytes) -> str:
    h = xxhash.xxh64_hexdigest(data)
    (cap / "blobs" / f"{h}.bin").write_bytes(data)
    return h


def build_capture(root: Path, cubin: bytes, ptrs: list[int], grid: list[int], num_warps: int) -> Capture:
    """A capture of kc_add(x, y, out, n) around the real cubin: three 4 KiB regions at
    the recorded tensor addresses, parameters laid out as the cubin's .nv.info says."""
    from kerncap.sources.cubin import open_elf, param_layout

    cap = root / "capture"
    (cap / "blobs").mkdir(parents=True)
    (cap / "cubins").mkdir()
    sha = hashlib.sha256(cubin).hexdigest()
    (cap / "cubins" / f"{sha}.cubin").write_bytes(cubin)
    xs = struct.pack(f"<{N}f", *[i * 0.5 for i in range(N)]) + bytes(4096 - 4 * N)
    ys = struct.pack(f"<{N}f", *[1.0] * N) + bytes(4096 - 4 * N)
    outs = struct.pack(f"<{N}f", *[i * 0.5 + 1.0 for i in range(N)]) + bytes(4096 - 4 * N)
    regions = []
    for rid, (ptr, pre, post) in enumerate(zip(ptrs, (xs, ys, bytes(4096)), (xs, ys, outs))):
        regions.append({"id": rid, "base": ptr, "size": 4096, "api": "cuMemAlloc_v2", "kind": "device",
                        "written": pre != post, "zero_fraction": 0.0,
                        "pre": [_blob(cap, pre) if any(pre) else None], "post": [_blob(cap, post)]})
    slots = param_layout(open_elf(cubin, "test cubin"), "kc_add")
    values = [struct.pack("<Q", p) for p in ptrs] + [struct.pack("<i", N)] + [bytes(8)] * (len(slots) - 4)
    params, buf = [], bytearray(sum(s.size for s in slots) + 8)
    for i, (slot, value) in enumerate(zip(slots, values)):
        entry = {"index": i, "offset": slot.offset, "size": slot.size, "value": value.hex()}
        if i < 3:
            entry["pointer"] = {"region": i, "offset": 0}
        params.append(entry)
        buf[slot.offset : slot.offset + slot.size] = value
    manifest = {
        "format": "kerncap-capture", "format_version": 1, "complete": True, "chunk_size": 4 << 20, "hash": "xxh64",
        "provenance": {"synthetic": True, "gpu": {"name": "synthetic sm_90", "cc": [9, 0]}, "dispatch_index": 0},
        "kernel": {"name": "kc_add", "demangled": "kc_add", "handle_kind": "CUfunction", "launch_api": "cuLaunchKernelEx",
                   "module": {"cubin": f"cubins/{sha}.cubin", "sha256": sha, "selection": "handle", "candidates": 1},
                   "attributes": {}},
        "launch": {"grid": grid, "block": [32 * num_warps, 1, 1], "shared_mem_bytes": 0, "stream": "null",
                   "attributes": [], "param_form": "array"},
        "params": params, "param_buffer": bytes(buf).hex(), "regions": regions, "globals": [], "warnings": [],
    }
    (cap / "manifest.json").write_text(json.dumps(manifest))
    return Capture.open(root)


@pytest.fixture(scope="module")
def hook_run(app_dir, fake_inject, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("hookrun") / "run"
    result = run_capture(app_dir, out, fake_inject)
    return out, result


@pytest.fixture
def reproducer(hook_run, tmp_path):
    run_dir, result = hook_run
    root = tmp_path / "repro"
    root.mkdir()
    capture = build_capture(root, bytes.fromhex(result["cubins"]["2"]), result["ptrs"], [16, 1, 1], num_warps=2)
    sources = attach_triton(root, capture, run_dir)
    return root, capture, sources


# -- attach -------------------------------------------------------------------------------


def test_attach_writes_editable_source_spec_and_script(reproducer, app_dir):  # noqa: F811
    root, capture, sources = reproducer
    assert sources["kind"] == "triton" and sources["method"] == "triton-hook"
    assert sources["confidence"] == "exact"
    assert sources["translation_unit"] == "source/kernel.py"
    assert sources["config"]["num_warps"] == 2 and sources["config"]["autotune_kwargs"] == {"BLOCK": {"type": "int", "value": 64}}
    for f in sources["files"]:
        assert (root / f).is_file(), f
    kernel = (root / "source" / "kernel.py").read_text()
    original = (app_dir / "app.py").read_text()
    assert kernel.count("\n") == original.count("\n")  # line numbers preserved
    def_line = lambda text: text.splitlines().index("def kc_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):")  # noqa: E731
    assert def_line(kernel) == def_line(original)
    assert "\n    main()\n" not in kernel and "fakegpu.install()" not in kernel
    spec = json.loads((root / "source" / "triton.json").read_text())
    assert spec["launch"]["grid"] == [16, 1, 1]
    assert spec["selection"] == {"record_by": "sha256", "launch_by": "params+grid", "hook_file": spec["selection"]["hook_file"],
                                 "warnings": []}
    assert os.access(root / "reproducer.py", os.X_OK)
    compile((root / "reproducer.py").read_text(), "reproducer.py", "exec")


def test_attach_takes_the_captured_launchs_autotune_config_over_the_records(hook_run, tmp_path, monkeypatch):
    """An autotuned kernel's record may carry another config than the launch captured (the
    autotuner's pick for other shapes): the sources' config and the spec pin the launch's.
    Mutation caught: the record's config taken first."""
    import dataclasses

    from kerncap.triton import records

    run_dir, result = hook_run
    real = records.select

    def select(capture, run):
        chosen = real(capture, run)
        record = {**chosen.record, "autotune_config": {"kwargs": {"BLOCK": {"type": "int", "value": 128}}}}
        launch = {**chosen.launch, "autotune_config": {"kwargs": {"BLOCK": {"type": "int", "value": 64}}}}
        return dataclasses.replace(chosen, record=record, launch=launch)

    monkeypatch.setattr(records, "select", select)
    root = tmp_path / "repro"
    root.mkdir()
    capture = build_capture(root, bytes.fromhex(result["cubins"]["2"]), result["ptrs"], [16, 1, 1], num_warps=2)
    sources = attach_triton(root, capture, run_dir)
    assert sources["config"]["autotune_kwargs"] == {"BLOCK": {"type": "int", "value": 64}}
    spec = json.loads((root / "source" / "triton.json").read_text())
    assert spec["autotune_config"]["kwargs"]["BLOCK"]["value"] == 64


def test_attach_falls_back_to_the_kernel_name_with_a_warning(hook_run, tmp_path):
    run_dir, result = hook_run
    root = tmp_path / "repro"
    root.mkdir()
    other = bytes.fromhex(result["cubins"]["4"])  # the benchmarked config's cubin: never recorded
    capture = build_capture(root, other, result["ptrs"], [8, 1, 1], num_warps=4)
    sources = attach_triton(root, capture, run_dir)
    assert sources["confidence"] == "likely"
    assert any("sha256" in w for w in sources["warnings"])


def test_attach_without_records_names_the_run_dir(tmp_path, hook_run):
    _run_dir, result = hook_run
    root = tmp_path / "repro"
    root.mkdir()
    capture = build_capture(root, bytes.fromhex(result["cubins"]["2"]), result["ptrs"], [16, 1, 1], 2)
    with pytest.raises(KerncapError, match="no triton-"):
        attach_triton(root, capture, tmp_path)


def test_the_captured_launch_is_the_one_all_of_whose_tensors_are_the_captures(hook_run, tmp_path):
    """Among the hook's launches of the captured grid, the captured one is the launch each
    of whose tensor pointers is a parameter of the capture. A later launch that shares
    only some of them (the same input, another output: the app's next call) is not it,
    though it comes last. Mutation caught: a launch sharing any one pointer taken for the
    captured one (its tensors' shapes and dtypes would then describe the wrong call)."""
    import copy
    import shutil

    from kerncap.triton import records

    run_dir, result = hook_run
    root = tmp_path / "repro"
    root.mkdir()
    capture = build_capture(root, bytes.fromhex(result["cubins"]["2"]), result["ptrs"], [16, 1, 1], num_warps=2)
    chosen = records.select(capture, run_dir)
    assert chosen.launch_match == "params+grid" and not chosen.warnings
    ptrs = [a["data_ptr"] for a in chosen.launch["args"] if a.get("kind") == "tensor"]
    assert len(ptrs) == 3 and set(ptrs) <= set(result["ptrs"])
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    [path] = run.glob("triton-*.json")
    doc = json.loads(path.read_text())
    record = doc["kernels"][chosen.record["cubin_sha256"]]
    later = copy.deepcopy(chosen.launch)
    tensors = [a for a in later["args"] if a.get("kind") == "tensor"]
    for arg in tensors[1:]:  # x stays the capture's; y and out are another call's
        arg["data_ptr"] += 1 << 20
    record["launches"].append(later)
    path.write_text(json.dumps(doc))
    again = records.select(capture, run)
    assert again.launch_match == "params+grid" and not again.warnings
    assert [a["data_ptr"] for a in again.launch["args"] if a.get("kind") == "tensor"] == ptrs


def test_the_capturing_processs_record_is_taken_over_another_processs_of_the_same_cubin(hook_run, tmp_path):
    """Two ranks launched the captured cubin, each writing its triton-<pid>.json: the record
    of the process the capture names (provenance pid) holds the captured launch, though the
    other file sorts after it. Mutation caught: every process's records searched alike (the
    last file's record taken: its launch is not the captured one)."""
    import copy

    from kerncap.triton import records

    run_dir, result = hook_run
    root = tmp_path / "repro"
    root.mkdir()
    build_capture(root, bytes.fromhex(result["cubins"]["2"]), result["ptrs"], [16, 1, 1], num_warps=2)
    manifest = root / "capture" / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["provenance"]["pid"] = 100
    manifest.write_text(json.dumps(doc))
    capture = Capture.open(root)
    [path] = run_dir.glob("triton-*.json")
    hook = json.loads(path.read_text())
    run = tmp_path / "run"
    run.mkdir()
    (run / "triton-100.json").write_text(json.dumps(hook))
    other = copy.deepcopy(hook)
    for record in other["kernels"].values():
        for launch in record.get("launches") or []:
            launch["grid"] = [99, 1, 1]
            for arg in launch.get("args", []):
                if arg.get("kind") == "tensor":
                    arg["data_ptr"] += 1 << 20
    (run / "triton-200.json").write_text(json.dumps(other))
    chosen = records.select(capture, run)
    assert chosen.source_file.name == "triton-100.json"
    assert chosen.by == "sha256" and chosen.launch_match == "params+grid" and not chosen.warnings
    assert chosen.launch["grid"] == [16, 1, 1]


def test_region_dtypes_come_from_the_tensor_arguments(reproducer):
    root, capture, _ = reproducer
    assert region_dtypes(root, capture) == {0: "float32", 1: "float32", 2: "float32"}


# -- recompile ----------------------------------------------------------------------------


def test_recompile_unmodified_matches_the_captured_layout(reproducer):
    root, capture, _ = reproducer
    res = recompile(root)
    assert res.cubin.parent == root / "variants" and res.cubin.is_file()
    assert "parameter layout matches the capture" in res.log
    assert "the cubin is identical to the captured one" in res.log
    launch = json.loads(res.cubin.with_suffix(".launch.json").read_text())
    assert launch["block"] == [64, 1, 1] and launch["changed"] == []
    assert res.command[0] == "triton.compile"


def test_recompile_with_a_pinned_config_reports_the_launch_change(reproducer):
    root, _capture, _ = reproducer
    res = recompile(root, "num_warps=8,num_stages=2")
    launch = json.loads(res.cubin.with_suffix(".launch.json").read_text())
    assert launch["block"] == [256, 1, 1] and "block" in launch["changed"]
    assert "num_warps': 8" in res.log and "overridden" in res.log


def test_recompile_sees_edits(reproducer):
    root, _capture, _ = reproducer
    first = recompile(root).cubin.read_bytes()
    path = root / "source" / "kernel.py"
    path.write_text(path.read_text().replace("tl.load(x_ptr + offs, mask=m) + tl.load", "tl.load(x_ptr + offs, mask=m) * tl.load"))
    assert recompile(root).cubin.read_bytes() != first


def test_recompile_rejects_a_signature_change(reproducer):
    root, _capture, _ = reproducer
    path = root / "source" / "kernel.py"
    path.write_text(path.read_text().replace("out_ptr, n, BLOCK", "out_ptr, n, scale, BLOCK"))
    with pytest.raises(KerncapError, match="signature of kc_add changed: added scale"):
        recompile(root)


def test_a_parameter_layout_refusal_names_the_parameter_the_variant_adds(reproducer):
    """A recompiled cubin that takes one parameter more than the capture (e.g. a global
    scratch pointer the kernel newly needs) is refused naming it, and each it lacks too.
    Mutation caught: only the parameters both take compared (the added one unnamed)."""
    from types import SimpleNamespace

    from kerncap.triton import pinned
    from kerncap.triton.recompile import _check_params

    root, capture, _ = reproducer
    cubin = recompile(root).cubin.read_bytes()
    spec = pinned.load_spec(root)
    ordered = sorted(capture.params, key=lambda p: p.index)
    fewer = SimpleNamespace(kernel=capture.kernel, cubin_path=root / "absent.cubin", params=ordered[:-1])
    with pytest.raises(KerncapError) as err:
        _check_params(cubin, fewer, spec)
    last = ordered[-1]
    assert f"captured absent, now offset {last.offset} size {last.size}" in str(err.value)
    more = SimpleNamespace(kernel=capture.kernel, cubin_path=root / "absent.cubin",
                           params=[*ordered, SimpleNamespace(index=len(ordered), offset=last.offset + 8, size=8)])
    with pytest.raises(KerncapError, match=rf"#{len(ordered)}: captured offset {last.offset + 8} size 8, now absent"):
        _check_params(cubin, more, spec)


def test_recompile_rejects_reordered_arguments(reproducer):
    """Two pointer arguments swapped keep the parameter layout (the cubin check passes) but
    the replay would hand each the other's buffer: the signature check names the order.
    Mutation caught: the argument lists compared as sets."""
    root, _capture, _ = reproducer
    path = root / "source" / "kernel.py"
    path.write_text(path.read_text().replace("def kc_add(x_ptr, y_ptr,", "def kc_add(y_ptr, x_ptr,"))
    with pytest.raises(KerncapError, match=r"signature of kc_add changed: reordered \(x_ptr, y_ptr, out_ptr, n, BLOCK "
                                           r"-> y_ptr, x_ptr, out_ptr, n, BLOCK\)"):
        recompile(root)
    assert not list(root.glob("variants/*.cubin"))


def test_recompile_rejects_a_parameter_made_constexpr(reproducer):
    """`n` made a tl.constexpr keeps the argument names but drops it from the parameter
    buffer the replay passes: the signature check names it. Mutation caught: only a
    constexpr that became a runtime argument checked."""
    root, _capture, _ = reproducer
    path = root / "source" / "kernel.py"
    path.write_text(path.read_text().replace("out_ptr, n, BLOCK", "out_ptr, n: tl.constexpr, BLOCK"))
    with pytest.raises(KerncapError, match="signature of kc_add changed: n is now a tl.constexpr"):
        recompile(root)
    assert not list(root.glob("variants/*.cubin"))


def test_recompile_reports_the_compiler_message(reproducer):
    root, _capture, _ = reproducer
    path = root / "source" / "kernel.py"
    path.write_text(path.read_text().replace("tl.program_id(0)", "tl.no_such_op(0)"))
    with pytest.raises(KerncapError, match="kc_add does not compile") as err:
        recompile(root)
    assert "no_such_op" in err.value.message


def test_recompile_reports_a_syntax_error_with_its_line(reproducer):
    root, _capture, _ = reproducer
    path = root / "source" / "kernel.py"
    lines = path.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "tl.program_id" in line)
    lines[at] = "    pid = = 1\n"
    path.write_text("".join(lines))
    with pytest.raises(KerncapError, match=f"kernel.py:{at + 1}: syntax error"):
        recompile(root)


def test_recompile_refuses_another_triton_version(reproducer):
    import triton

    root, _capture, _ = reproducer
    spec_path = root / "source" / "triton.json"
    spec = json.loads(spec_path.read_text())
    spec["triton_version"] = "3.5.0"
    spec_path.write_text(json.dumps(spec))
    with pytest.raises(KerncapError, match=f"captured with Triton 3.5.0, this environment has Triton {triton.__version__}"):
        recompile(root)


def test_config_parsing_rejects_constexprs_and_unknown_options(reproducer):
    root, _capture, _ = reproducer
    spec = json.loads((root / "source" / "triton.json").read_text())
    assert parse_config("num_warps=4, enable_fp_fusion=false", spec) == {"num_warps": 4, "enable_fp_fusion": False}
    assert (spec.get("autotune_config") or {}).get("kwargs"), "the fixture's kernel is autotuned over BLOCK"
    untuned = {**spec, "autotune_config": None}
    with pytest.raises(KerncapError, match="BLOCK is a constexpr of .* that the autotuner did not choose"):
        parse_config("BLOCK=128", untuned)
    # An autotuned constexpr may be pinned: that is another of the autotuner's configs.
    assert parse_config("BLOCK=128,num_warps=8", spec) == {"BLOCK": 128, "num_warps": 8}
    with pytest.raises(KerncapError, match="expected KEY=VALUE"):
        parse_config("num_warps", spec)
    with pytest.raises(KerncapError, match="no_such_option: not a Triton compile option"):
        recompile(root, "no_such_option=1")


# -- kernel module sanitising ---------------------------------------------------------------


SCRIPT = '''"""doc"""
import torch
import triton
import triton.language as tl
from triton import Config
try:
    import helper
except ImportError:
    helper = None

BLOCK = tl.constexpr(128)
SIZES = [Config({"B": 64}), Config({"B": 128})]
x = torch.randn(1 << 20, device="cuda")
torch.manual_seed(0)


def configs():
    return SIZES


@triton.autotune(configs=configs(), key=["n"])
@triton.jit
def k(x_ptr, n, B: tl.constexpr):
    pass


for _ in range(3):
    k[(1,)](x, 1)
if __name__ == "__main__":
    main()
'''


def test_sanitize_keeps_definitions_and_blanks_work():
    text, blanked = sanitize_module(SCRIPT)
    assert text.count("\n") == SCRIPT.count("\n")
    kept = text.splitlines()
    for line in ("import torch", "BLOCK = tl.constexpr(128)", 'SIZES = [Config({"B": 64}), Config({"B": 128})]',
                 "    import helper", '@triton.autotune(configs=configs(), key=["n"])', "def configs():"):
        assert line in kept, line
    for gone in ('x = torch.randn(1 << 20, device="cuda")', "torch.manual_seed(0)", "    k[(1,)](x, 1)", "    main()"):
        assert gone not in kept, gone
    assert kept.index("def k(x_ptr, n, B: tl.constexpr):") == SCRIPT.splitlines().index("def k(x_ptr, n, B: tl.constexpr):")
    assert len(blanked) == 4


def test_recompile_list_configs_prints_the_recorded_configs_as_json_or_a_table(reproducer, capsys):
    """`kerncap recompile DIR --list-configs [--json]`: the autotuner's configs as --config
    values with their grids, the captured one marked; --json gives the same as a list."""
    from kerncap.cli import main

    root, _, _ = reproducer
    assert main(["recompile", str(root), "--list-configs", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(c["config"], c["grid"], c["captured"]) for c in listed] == [
        ("BLOCK=64,num_warps=2,num_stages=3,num_ctas=1", [16, 1, 1], True),
        ("BLOCK=128,num_warps=4,num_stages=3,num_ctas=1", [8, 1, 1], False)]
    assert main(["recompile", str(root), "--list-configs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "2 autotune configs of kc_add (grid in programs); pin one with --config:"
    assert lines[1].startswith("  * BLOCK=64,") and lines[1].endswith("grid [16, 1, 1]")
    assert lines[2].startswith("    BLOCK=128,") and lines[3] == "  * the captured config"
    assert not (root / "variants").exists()  # listing builds nothing


def test_recompile_pins_another_autotuned_block(reproducer):
    root, _capture, _ = reproducer
    spec = json.loads((root / "source" / "triton.json").read_text())
    captured = spec["autotune_config"]["kwargs"]["BLOCK"]
    other = (captured["value"] if isinstance(captured, dict) else captured) * 2
    res = recompile(root, f"BLOCK={other}")
    assert f"autotuned constexprs pinned to {{'BLOCK': {other}}}" in res.log
    # The hook recorded the grid the app's grid lambda gives for that config.
    launch = json.loads(res.cubin.with_suffix(".launch.json").read_text())
    assert launch["grid"] == [-(-N // other), 1, 1] and "grid" in launch["changed"], launch
    assert f"the app's grid for BLOCK={other}" in res.log
    assert f"BLOCK={other}" in res.command
    assert res.cubin.read_bytes() != recompile(root).cubin.read_bytes()


def test_a_kernel_rebuilt_from_its_source_alone_keeps_its_line_numbers():
    """With no module file, source/kernel.py is the Triton imports and the function at the
    line it had in the app, so a compiler message's line is the app's. Mutation caught:
    the function one line late."""
    source = "@triton.jit\ndef k(x_ptr, n):\n    pid = tl.program_id(0)\n"
    for first_line in (3, 10, 40):
        lines = function_only_module(source, first_line).splitlines()
        assert lines[first_line - 1:first_line + 2] == source.splitlines(), first_line
        assert lines[:2] == ["import triton", "import triton.language as tl"]
    assert function_only_module(source, None).splitlines()[2:] == source.splitlines()
