"""Autotune candidates and the grid of a pinned config (kerncap.triton.configs), and
the dtype of a region that tensors of several dtypes share (region_dtypes).

The Inductor record is real: source/triton.json of a torch.compile(max-autotune)
RMSNorm captured on the H200 (tests/fixtures/triton/). GPU evidence:
tests/gpu/test_triton_repro.py (test_pinned_other_inductor_configs_...).
"""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from kerncap.errors import KerncapError
from kerncap.triton import configs

FIXTURE = Path(__file__).parent / "fixtures" / "triton" / "inductor_rmsnorm.triton.json"


@pytest.fixture
def inductor() -> dict:
    return json.loads(FIXTURE.read_text())


def _xnumel(spec: dict) -> int:
    return next(a["value"] for a in spec["launch"]["args"] if a.get("name") == "xnumel")


def test_inductor_candidates_carry_their_grids(inductor):
    cands = configs.candidates(inductor)
    assert len(cands) == len(inductor["inductor"]["configs"]) >= 3
    xnumel = _xnumel(inductor)
    for c in cands:
        assert set(c.constexprs) == {"XBLOCK", "R0_BLOCK"} and c.options["num_warps"] >= 1
        assert c.grid == [-(-xnumel // c.constexprs["XBLOCK"]), 1, 1]
    captured = [c for c in cands if c.captured]
    assert len(captured) == 1 and captured[0].grid == inductor["launch"]["grid"]
    assert captured[0].config.startswith(f"XBLOCK={captured[0].constexprs['XBLOCK']},R0_BLOCK=")


def test_pinned_inductor_grid_follows_xblock_only(inductor):
    grid = inductor["launch"]["grid"]
    assert configs.pinned_grid(inductor, {}) == (grid, None)
    same, note = configs.pinned_grid(inductor, {"R0_BLOCK": 64})
    assert same == grid and "Inductor's grid" in note
    new, note = configs.pinned_grid(inductor, {"XBLOCK": 8, "R0_BLOCK": 64})
    assert new == [-(-_xnumel(inductor) // 8), 1, 1] and str(new) in note


def test_pinned_inductor_grid_refuses_what_it_cannot_derive(inductor):
    with pytest.raises(KerncapError, match="cannot tell how Inductor's grid depends on RSPLIT"):
        configs.pinned_grid(inductor, {"RSPLIT": 4})
    split = copy.deepcopy(inductor)
    split["launch"]["grid"] = [7, 1, 1]  # not cdiv(xnumel, XBLOCK): e.g. a split grid
    with pytest.raises(KerncapError, match=r"is not cdiv\(xnumel=\d+, XBLOCK=\d+\) on axis 0") as err:
        configs.pinned_grid(split, {"XBLOCK": 8})
    assert "pin a config with the captured XBLOCK" in err.value.hint


def _user_spec(grids: list[list[int]]) -> dict:
    enc = lambda v: {"type": "int", "value": v}  # noqa: E731
    blocks = [32, 64, 128][: len(grids)]
    return {
        "function": "k", "options": {"num_warps": 4},
        "autotune_config": {"kwargs": {"BLOCK_M": enc(64)}, "num_warps": 4,
                            "configs": [{"kwargs": {"BLOCK_M": enc(b)}, "num_warps": 4, "grid": g}
                                        for b, g in zip(blocks, grids)]},
        "launch": {"grid": grids[1], "args": []},
    }


def test_pinned_user_config_launches_the_grid_the_app_computed_for_it():
    spec = _user_spec([[32, 1, 1], [16, 1, 1], [8, 1, 1]])
    grid, note = configs.pinned_grid(spec, {"BLOCK_M": 32})
    assert grid == [32, 1, 1] and "the app's grid" in note
    with pytest.raises(KerncapError, match="the grid for this config is unknown") as err:
        configs.pinned_grid(spec, {"BLOCK_M": 16})
    assert "--list-configs" in err.value.hint
    same = _user_spec([[16, 1, 1], [16, 1, 1], [16, 1, 1]])
    assert configs.pinned_grid(same, {"BLOCK_M": 16})[0] == [16, 1, 1]



def test_a_config_whose_grid_the_hook_could_not_tell_is_refused_even_when_the_others_agree():
    """The app's grid callable failed for one config (the hook recorded grid_error), and
    the configs it could evaluate all launch the captured grid: pinning that one must not
    assume the captured grid (it may need another number of programs), it is refused
    naming why. Mutation caught: "every config launches the captured grid" judged on the
    known grids only."""
    spec = _user_spec([[16, 1, 1], [16, 1, 1], [16, 1, 1]])
    unknown = spec["autotune_config"]["configs"][2]
    unknown["grid"], unknown["grid_error"] = None, "grid callable raised KeyError: 'BLOCK_N'"
    with pytest.raises(KerncapError, match=r"the grid for this config is unknown \(grid callable raised "
                                           r"KeyError: 'BLOCK_N'\)") as err:
        configs.pinned_grid(spec, {"BLOCK_M": 128})
    assert "--list-configs" in err.value.hint
    # a config whose grid is known is pinned at it
    grid, note = configs.pinned_grid(spec, {"BLOCK_M": 32})
    assert grid == [16, 1, 1] and "the app's grid" in note

def test_a_config_differing_from_the_capture_only_in_its_compile_options_is_not_the_captured_one():
    """The app's autotuner offered the captured BLOCK_M with num_warps 4 and with 8; the
    capture ran num_warps 4: only that config is marked captured (--list-configs' mark).
    Mutation caught: the captured mark judged on the constexprs alone."""
    spec = _user_spec([[32, 1, 1], [16, 1, 1]])
    enc = {"type": "int", "value": 64}
    spec["autotune_config"]["configs"] = [
        {"kwargs": {"BLOCK_M": enc}, "num_warps": 8, "num_stages": 3, "grid": [16, 1, 1]},
        {"kwargs": {"BLOCK_M": enc}, "num_warps": 4, "num_stages": 3, "grid": [16, 1, 1]},
    ]
    spec["options"] = {"num_warps": 4, "num_stages": 3}
    cands = configs.candidates(spec)
    assert [c.captured for c in cands] == [False, True]
    assert cands[1].config == "BLOCK_M=64,num_warps=4,num_stages=3"


def test_list_configs_prints_pinnable_configs(inductor, tmp_path):
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / "triton.json").write_text(json.dumps(inductor))
    proc = subprocess.run([sys.executable, "-m", "kerncap", "recompile", str(tmp_path), "--list-configs"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"{len(inductor['inductor']['configs'])} autotune configs of triton_red_fused")
    marked = [line for line in lines if line.startswith("  * XBLOCK=")]
    assert len(marked) == 1 and str(inductor["launch"]["grid"]) in marked[0]
    as_json = subprocess.run([sys.executable, "-m", "kerncap", "recompile", str(tmp_path), "--list-configs", "--json"],
                             capture_output=True, text=True, timeout=60)
    assert sum(c["captured"] for c in json.loads(as_json.stdout)) == 1


# -- region_dtypes: a segment shared by tensors of several dtypes ---------------------------

xxhash = pytest.importorskip("xxhash")


def _mixed_capture(root: Path, post_changes: dict[int, bytes]) -> Path:
    """One 4 KiB region at 0x10000 holding a bf16 tensor at +0 (256 B) and an fp32
    tensor at +512 (64 B), with a Triton spec whose arguments point at both."""
    from kerncap.triton.pinned import SPEC_FORMAT

    cap = root / "capture"
    (cap / "blobs").mkdir(parents=True)
    pre = bytes(range(256)) * 16
    post = bytearray(pre)
    for offset, data in post_changes.items():
        post[offset:offset + len(data)] = data

    def blob(data: bytes) -> str:
        h = xxhash.xxh64_hexdigest(data)
        (cap / "blobs" / f"{h}.bin").write_bytes(data)
        return h

    base = 0x10000
    manifest = {
        "format": "kerncap-capture", "format_version": 1, "complete": True, "chunk_size": 4096, "hash": "xxh64",
        "provenance": {}, "kernel": {"name": "k", "module": {"cubin": "cubins/x.cubin",
                                                             "sha256": hashlib.sha256(b"").hexdigest()}},
        "launch": {"grid": [1, 1, 1], "block": [32, 1, 1]}, "params": [], "param_buffer": "",
        "regions": [{"id": 0, "base": base, "size": 4096, "api": "cuMemAlloc_v2", "kind": "device",
                     "written": bytes(post) != pre, "zero_fraction": 0.0, "pre": [blob(pre)], "post": [blob(bytes(post))]}],
        "globals": [], "warnings": [],
    }
    (cap / "manifest.json").write_text(json.dumps(manifest))
    (root / "source").mkdir()
    args = [{"name": "w", "kind": "tensor", "dtype": "bfloat16", "shape": [128], "strides": [1], "data_ptr": base,
             "element_size": 2},
            {"name": "rstd", "kind": "tensor", "dtype": "float32", "shape": [16, 1], "strides": [1, 1],
             "data_ptr": base + 512, "element_size": 4}]
    (root / "source" / "triton.json").write_text(json.dumps({"format": SPEC_FORMAT, "launch": {"args": args}}))
    return root


@pytest.mark.parametrize(("changes", "expected"), [
    ({520: b"\x01\x02"}, "float32"),  # only rstd's bytes changed
    ({4: b"\x01"}, "bfloat16"),  # only w's
    ({4: b"\x01", 520: b"\x02"}, None),  # both: no one dtype covers the change
    ({2000: b"\x01"}, None),  # outside every tensor
    ({255: b"\x00"}, "bfloat16"),  # w's last element (its span ends past it, not before)
    ({575: b"\x00"}, "float32"),  # rstd's last element
])
def test_shared_region_takes_the_dtype_of_the_bytes_the_kernel_wrote(tmp_path, changes, expected):
    from kerncap.reproducer.format import Capture
    from kerncap.triton import region_dtypes

    root = _mixed_capture(tmp_path, changes)
    assert region_dtypes(root, Capture.open(root)).get(0) == expected
