"""Sequences (issue 29, docs/sequences.md) on the CPU: a SYNTHETIC sequence capture
(tests/sequence_sim.py: a two-stream pipeline of two kernels with an event, a device copy,
a fill and a host copy between them) opened, replayed and validated through the replay
server's real code over the simulated core; variants rebuilt per module and fused, with
the first diverging launch found; the fusion skeleton and its inferred intermediates; the
CLI's refusals; a damaged or edited sequence manifest refused with the file and the field.
The GPU suite runs the same paths on real captures (tests/gpu/test_sequences.py)."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

import replay_sim as sim
import sequence_sim as S
from kerncap import api
from kerncap.cli import main
from kerncap.errors import CaptureFormatError, KerncapError, UsageError
from kerncap.reproducer.format import Capture
from kerncap.recompile.sequence_kernel import kernel_index, kernel_of_source
from kerncap.reproducer.sequence_variant import write_variant


@pytest.fixture
def seq(tmp_path, monkeypatch):
    S.install(monkeypatch)
    monkeypatch.setattr("kerncap.replay.client.ReplayClient", S.SeqClient)
    return S.synthetic_sequence(tmp_path / "seq")


def _client(repro):
    return S.SeqClient(repro)


def test_the_capture_opens_as_a_sequence_with_its_payloads(seq):
    cap = Capture.open(seq)
    s = cap.sequence
    assert [s.kernel_of(i).name for i in range(len(s.launches))] == ["_Z5scalePKfPf", "_Z3addPKfPf"]
    assert [st.op for st in s.steps] == ["launch", "record", "wait", "copy", "memset", "launch", "copy"]
    # the host bytes of the h2d copy are a payload like a region's chunks: pack, store, verify see them
    h2d = s.steps[6]
    assert h2d.payload[0] in set(cap.iter_blobs())
    cap.verify()
    assert "2 launches of 2 kernels" in s.summary()


def test_it_replays_and_validates_byte_exact_and_times_each_launch(seq):
    c = _client(seq)
    v = c.validate()
    assert v.passed and all(r.mismatched_bytes == 0 for r in v.regions)
    r = c.replay(iterations=3, warmup=1, per_launch=True)
    assert [l["label"] for l in r.launches] == ["launch 0 (scale(float const*, float*))",
                                                "launch 1 (add(float const*, float*))"]
    assert [l["stream"] for l in r.launches] == [0, 0]


def test_a_rebuilt_module_that_computes_otherwise_fails_at_its_launch(seq):
    (seq / "variants").mkdir()
    (seq / "variants" / "add_wrong.cubin").write_bytes(b"synthetic")
    variant = write_variant(seq, "wrong", modules={0: "variants/add_wrong.cubin"})
    c = _client(seq)
    v = c.validate(cubin=variant)
    assert not v.passed and [r.id for r in v.regions if not r.passed] == [2]  # y, region 2
    where = c.localize(variant)
    assert where["diverged"] and where["at"] == "launch 1 (add(float const*, float*))"
    assert where["launches_checked"] == 2 and [ch["id"] for ch in where["checks"]] == [2]
    same = c.localize(None)
    assert not same["diverged"] and same["launches_checked"] == 2



def test_a_cubin_lacking_one_of_a_modules_launched_kernels_replaces_no_module(tmp_path):
    """A bare cubin replaces the modules whose launched kernels it defines, every one of
    them: seq_small's one module launches five kernels; its own cubin replaces it, and so
    does nothing once one launched kernel (sp_bias, here renamed) is one the cubin lacks:
    refused up front, not a module swapped in whose launch of that kernel then fails."""
    from kerncap.replay.sequence_replay import variant_of

    repro = shutil.copytree(Path(__file__).parent / "fixtures" / "captures" / "seq_small", tmp_path / "seq")
    cap = Capture.open(repro)
    cubin = cap.root / cap.sequence.modules[0].cubin
    assert variant_of(cap, cubin).modules == {0: cubin}
    path = repro / "capture" / "sequence.json"
    doc = json.loads(path.read_text())
    bias = next(k for k in doc["kernels"] if k["name"] == "_Z7sp_biasPfPKfPKji")
    bias["name"] = "_Z7sp_biasPfPKfPKjii"  # rebuilt with another signature: not in the cubin
    path.write_text(json.dumps(doc, indent=1))
    with pytest.raises(KerncapError, match="defines none of the sequence's modules' kernels"):
        variant_of(Capture.open(repro), cubin)


def _mark(seq, states: dict[int, str]) -> None:
    """Marks regions as allocated or freed inside the window, as the capture records them:
    a freed region's post-state is its pre-state (nothing was read back after the free)."""
    path = seq / "capture" / "manifest.json"
    m = json.loads(path.read_text())
    for r in m["regions"]:
        if r["id"] in states:
            r["sequence_state"] = states[r["id"]]
            if states[r["id"]] == "freed":
                r["post"], r["written"] = list(r["pre"]), False
    path.write_text(json.dumps(m, indent=1))


def test_a_region_freed_inside_the_sequence_is_left_out_and_an_allocated_one_is_judged(seq, monkeypatch):
    """w (region 4) is freed inside the window: its recorded post-state is its pre-state
    (zeros), the replay's fill leaves 7.0 there, and that difference is no failure: the row
    says why it was not judged. y (region 2) was allocated inside the window: a variant
    that computes it wrongly still fails there."""
    monkeypatch.setattr("kerncap.replay.differential.ReplayClient", S.SeqClient, raising=False)
    _mark(seq, {4: "freed", 2: "allocated"})
    c = _client(seq)
    v = c.validate()
    w = next(r for r in v.regions if r.kind == "region" and r.id == 4)
    assert w.mismatched_bytes > 0, "the fill left 7.0 where the capture recorded zeros"
    assert w.excluded and "freed inside the sequence" in w.excluded and w.passed
    assert v.passed and v.failures == []
    again = type(w).from_dict(w.to_dict())
    assert again.passed and again.excluded == w.excluded and w.to_dict()["passed"] is True
    assert any("region 4 (0x7f0000400000) was freed inside the sequence" in n for n in v.notes)
    assert all(r.excluded is None for r in v.regions if r.id != 4), "only the freed region is left out"
    report = api.validate_request([seq], api.ValidateRequest(cubin=None, runs=3))
    assert report.passed and report.exit_status == 0, report.summary()
    # nor is it a difference from the capture: no "polluted" note, no escalation to 4 x 3 runs
    det = report.reproducers[0].determinism
    assert det.capture_mismatch == [] and det.runs == 3, det.text()
    (seq / "variants").mkdir()
    (seq / "variants" / "add_wrong.cubin").write_bytes(b"synthetic")
    variant = write_variant(seq, "wrong", modules={0: "variants/add_wrong.cubin"})
    bad = c.validate(cubin=variant)
    assert not bad.passed and [r.id for r in bad.failures] == [2]  # y, allocated inside the window, judged
    assert not api.validate_request([seq], api.ValidateRequest(cubin=str(variant), runs=1)).passed


def _fused_body(config: dict) -> str:
    names = {p["address"]: p["name"] for p in config["params"] if p.get("kind") == "buffer"}
    x, y = names[S.BASES["x"]], names[S.BASES["y"]]
    return f"  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < 256) {y}[i] = 2.0f * {x}[i] + 1.0f;\n"


def test_a_fusion_skeleton_names_every_buffer_and_scalar_with_its_role(seq):
    source = api.fuse_skeleton(seq, 0, 1, "pair")
    text = source.read_text()
    config = json.loads((source.parent / "fusion.json").read_text())
    buffers = [p for p in config["params"] if p["kind"] == "buffer"]
    assert [(b["address"], b["ctype"], b["role"]) for b in buffers] == [
        (S.BASES["x"], "const float*", "read"), (S.BASES["tmp"], "float*", "written"),
        (S.BASES["y"], "float*", "written")]
    assert 'extern "C" __global__ void kc_fused(' in text and "const float* buf0," in text
    # what stays between the replaced launches is said
    assert "event 0 record" in text and "d2d copy" in text
    with pytest.raises(KerncapError, match="exists"):
        api.fuse_skeleton(seq, 0, 1, "pair")
    with pytest.raises(UsageError, match="one launch"):
        api.fuse_skeleton(seq, 1, 1, "single")


def test_a_skeleton_parameter_keeps_every_level_of_indirection():
    """A kernel taking an array of pointers (`float**`, `const float* const*`) gets a
    skeleton parameter of that type: declared `float*`, the fused kernel would read the
    pointer table as floats. Mutation caught: every pointer declared with one `*`."""
    from kerncap.recompile.fusion import _clean_ctype

    assert _clean_ctype("float**") == ("float**", True)
    assert _clean_ctype("const float**") == ("const float**", False)
    assert _clean_ctype("float*") == ("float*", True)
    assert _clean_ctype("std::vector<int>**") == ("void**", True)


def test_a_buffer_one_launch_reads_and_a_later_one_writes_is_written_in_the_skeleton(seq):
    """Launch 0 reads x through a const pointer, launch 1 then writes it (add(tmp, x): an
    in-place update): the fused kernel writes x, so the skeleton declares it `float*`,
    role written, whatever order its uses come in. Mutation caught: only a buffer of no
    known signature upgraded to written (x stayed `const float*`, role read, and the fused
    kernel's write to it would not compile)."""
    path = seq / "capture" / "sequence.json"
    doc = json.loads(path.read_text())
    doc["launches"][1] = S._launch(1, 1, 0, [S.BASES["tmp"], S.BASES["x"]])
    path.write_text(json.dumps(doc, indent=1))
    source = api.fuse_skeleton(seq, 0, 1, "inplace")
    config = json.loads((source.parent / "fusion.json").read_text())
    buffers = {b["address"]: b for b in config["params"] if b["kind"] == "buffer"}
    assert sorted(buffers) == [S.BASES["x"], S.BASES["tmp"]]
    x = buffers[S.BASES["x"]]
    assert (x["ctype"], x["role"], x["launches"]) == ("float*", "written", [0, 1])
    assert (buffers[S.BASES["tmp"]]["ctype"], buffers[S.BASES["tmp"]]["role"]) == ("float*", "written")
    assert f"    float* {x['name']},  // written; launch 0" in source.read_text()


@pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").is_file(),
                    reason="needs nvcc (the fused kernel is compiled)")
def test_a_fused_variant_validates_on_what_is_live_after_its_range(seq):
    source = api.fuse_skeleton(seq, 0, 1, "pair")
    config = json.loads((source.parent / "fusion.json").read_text())
    source.write_text(source.read_text().replace("  // TODO: the work of the replaced launches\n", _fused_body(config)))
    variant = api.fuse_build(seq, "pair")
    doc = json.loads(variant.read_text())
    (tmp,) = doc["fuse"]["excluded"]
    assert (tmp["address"], tmp["bytes"], tmp["why"]) == (S.BASES["tmp"], S.BYTES, "inferred")
    assert (seq / "fusions" / "pair" / "fused.cubin").is_file()
    # the simulated fused kernel writes y = 2x + 1 and leaves tmp unwritten: tmp is excluded
    # (z, written by the copy from tmp between the launches, reads the stale tmp: it fails)
    c = _client(seq)
    v = c.validate(cubin=variant)
    failing = [r.id for r in v.regions if not r.passed]
    assert 1 not in failing  # tmp, masked
    assert failing == [3]    # z: the copy between the fused launches read what launch 0 would have written
    assert any("not compared: buf1" in n and "inferred" in n for n in v.notes)
    where = c.localize(variant)
    assert where["diverged"] and where["at"] == "launches 0-1, fused"


def test_validates_report_names_what_a_fusion_leaves_out(seq, monkeypatch):
    """On the H200 the report of a fused sequence listed the masked intermediate as `ok`
    and never named it: `kerncap validate` prints each one under its input."""
    monkeypatch.setattr("kerncap.replay.differential.ReplayClient", S.SeqClient, raising=False)
    source = api.fuse_skeleton(seq, 0, 1, "pair")
    config = json.loads((source.parent / "fusion.json").read_text())
    source.write_text(source.read_text().replace("  // TODO: the work of the replaced launches\n", _fused_body(config)))
    variant = api.fuse_build(seq, "pair")
    text = api.format_trust_report(api.validate_request([seq], api.ValidateRequest(cubin=str(variant), runs=1)))
    assert "not compared: buf1 [0x" in text and "(inferred" in text, text


def test_an_intermediate_declared_that_the_skeleton_lacks_is_named(seq):
    api.fuse_skeleton(seq, 0, 1, "pair")
    from kerncap.recompile.fusion import infer_intermediates

    config = json.loads((seq / "fusions" / "pair" / "fusion.json").read_text())
    with pytest.raises(UsageError, match=r"(?s)--intermediate nope: the skeleton has no buffer nope.*buf0, buf1, buf2"):
        infer_intermediates(Capture.open(seq), config, ("nope",))
    declared = infer_intermediates(Capture.open(seq), config, ("buf0",))
    assert {(e["name"], e["why"]) for e in declared} == {("buf0", "declared"), ("buf1", "inferred")}


def test_the_fused_kernels_parameters_are_named_by_the_skeleton():
    from kerncap.replay.sequence_replay import fused_param_error
    from kerncap.reproducer.sequence_variant import FusedParam, Fusion, SequenceVariant

    fuse = Fusion(0, 1, Path("f.cubin"), "kc_fused", (1, 1, 1), (1, 1, 1), 0,
                  (FusedParam("buf0", 8, bytes(8)), FusedParam("buf1", 8, bytes(8)), FusedParam("l1_arg2", 4, bytes(4))))
    v = SequenceVariant(Path("v.json"), fuse=fuse)
    msg = fused_param_error("variant x: the parameters of kc_fused differ from the capture: parameter 1 is 4 bytes "
                            "at offset 8, the capture has 8 bytes at offset 8", v)
    assert "parameter 1 (buf1 in the skeleton) is 4 bytes at offset 8; the skeleton passes 8 bytes" in msg
    msg = fused_param_error("variant x: the parameters of kc_fused differ from the capture: it takes 2 parameters, "
                            "the capture has 3", v)
    assert msg.endswith("it lacks l1_arg2")
    assert fuse.param_layout()[1] == [(0, 8), (8, 8), (16, 4)]


def _edit(seq: Path, change) -> None:
    path = seq / "capture" / "sequence.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("change, field", [
    (lambda d: d["launches"][1].update(kernel=7), "launches[1].kernel"),
    (lambda d: d["steps"][2].update(event=3), "steps[2].event"),
    (lambda d: d["steps"].pop(0), "steps"),
    (lambda d: d["steps"][6].update(payload=[]), "steps[6].payload"),
    (lambda d: d["kernels"][0].update(module=2), "kernels[0].module"),
    (lambda d: d["steps"][3].update(op="teleport"), "steps[3].op"),
    # one past the last: the bounds are exclusive
    (lambda d: d["launches"][1].update(kernel=len(d["kernels"])), "launches[1].kernel"),
    (lambda d: d["kernels"][1].update(module=len(d["modules"])), "kernels[1].module"),
    (lambda d: d["launches"][1].update(stream_id=len(d["streams"])), "launches[1].stream_id"),
    (lambda d: d["steps"][1].update(event=d["events"]), "steps[1].event"),
    # a launch step on a stream that exists, but not the one its launch ran on
    (lambda d: d["steps"][0].update(stream=1), "steps[0].stream"),
    # a module's global one past the manifest's last (the synthetic manifest has none)
    (lambda d: d["modules"][0].update(globals=[0]), "modules[0].globals[0]"),
    # a sequence.json of a format this kerncap does not know
    (lambda d: d.update(format_version=2), "format_version"),
])
def test_an_edited_sequence_manifest_is_refused_naming_the_field(seq, change, field):
    _edit(seq, change)
    with pytest.raises(CaptureFormatError) as e:
        Capture.open(seq)
    assert "sequence.json" in e.value.message and field in e.value.message, e.value.message


def test_an_edited_sequence_variant_is_refused_naming_the_field(seq):
    """A sequence variant is untrusted input: a module or a launch range one past the
    sequence's last, a range backwards, a parameter value of another size, a cubin
    outside the reproducer are each refused naming the field; the last module and the
    last launch are accepted. Mutation caught: a module index one past the last read as
    a module (`>=` -> `>`)."""
    from kerncap.reproducer.sequence_variant import read_variant

    s = Capture.open(seq).sequence
    n_modules, n_launches = len(s.modules), len(s.launches)
    fuse = {"cubin": "variants/f.cubin", "kernel": "f", "grid": [1], "block": [32],
            "params": [{"name": "n", "size": 4, "value": "01000000"}]}

    def read(name, **kw):
        return read_variant(seq, write_variant(seq, name, **kw), s)

    v = read("last-module", modules={n_modules - 1: "variants/m.cubin"})
    assert list(v.modules) == [n_modules - 1] and v.modules[n_modules - 1] == (seq / "variants" / "m.cubin").resolve()
    v = read("last-launch", fuse={**fuse, "first": 0, "last": n_launches - 1})
    assert (v.fuse.first, v.fuse.last, v.fuse.grid, v.fuse.block) == (0, n_launches - 1, (1, 1, 1), (32, 1, 1))
    for name, kw, field in [
        ("past-module", {"modules": {n_modules: "variants/m.cubin"}}, f"modules.{n_modules} names no module"),
        ("past-launch", {"fuse": {**fuse, "first": 0, "last": n_launches}}, "fuse.first/last"),
        ("backwards", {"fuse": {**fuse, "first": 1, "last": 0}}, "fuse.first/last"),
        ("short-param", {"fuse": {**fuse, "first": 0, "last": 0, "params": [{"name": "n", "size": 8, "value": "01"}]}},
         "fuse.params[0].value holds 1 bytes"),
        ("outside", {"modules": {0: "../elsewhere.cubin"}}, "modules.0 is malformed"),
    ]:
        with pytest.raises(CaptureFormatError) as e:
            read(name, **kw)
        assert f"{name}.json" in e.value.message and field in e.value.message, (name, e.value.message)


def test_a_truncated_sequence_manifest_is_refused_naming_the_file(seq):
    path = seq / "capture" / "sequence.json"
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(CaptureFormatError, match=r"sequence\.json is not valid JSON"):
        Capture.open(seq)
    path.unlink()
    with pytest.raises(CaptureFormatError, match=r"sequence\.json is missing"):
        Capture.open(seq)


def test_a_global_naming_no_module_is_refused(seq):
    path = seq / "capture" / "manifest.json"
    doc = json.loads(path.read_text())
    doc["globals"] = [{"name": "g", "size": 4, "written": False, "pre": [None], "post": [None], "module": 5}]
    path.write_text(json.dumps(doc))
    with pytest.raises(CaptureFormatError, match=r"globals\[0\]\.module names no module"):
        Capture.open(seq)


def test_info_shows_the_launches_and_the_window(seq, capsys):
    assert main(["info", str(seq)]) == 0
    out = capsys.readouterr().out
    assert "sequence    2 launches of 2 kernels (1 modules) on 2 stream(s)" in out
    assert "window      from dispatch 0 of 'scale', 2 launches" in out
    assert main(["info", str(seq), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [l["kernel"] for l in data["sequence"]["launches"]] == ["scale(float const*, float*)",
                                                                  "add(float const*, float*)"]


def test_info_names_regions_the_window_frees_or_allocates_even_when_it_only_frees(seq, capsys):
    _mark(seq, {4: "freed"})
    assert main(["info", str(seq)]) == 0
    out = capsys.readouterr().out
    assert "regions allocated inside: none; freed inside (not compared): [4]" in out, out
    _mark(seq, {2: "allocated"})
    assert main(["info", str(seq)]) == 0
    assert "regions allocated inside: [2]; freed inside (not compared): [4]" in capsys.readouterr().out
    assert main(["info", str(seq), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["sequence"]
    assert data["freed"] == [4] and data["allocated"] == [2]


def test_list_names_a_sequence_and_its_launches(seq, capsys):
    """`kerncap list` (and the MCP's list_reproducers, the same rows): a sequence is not
    listed as its first launch's kernel."""
    assert main(["list", str(seq.parent)]) == 0
    assert "sequence (run): 2 launches of 2 kernels" in capsys.readouterr().out
    assert main(["list", str(seq.parent), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["sequence"] == {"mode": "run", "launches": 2, "kernels": 2, "streams": 2, "steps": 7}


@pytest.mark.parametrize("argv, words", [
    (["extract", "--sequence", "run", "k", "--", "true"], "--sequence run needs --count C or --until PATTERN"),
    (["extract", "--sequence", "nvtx", "--", "true"], "--sequence nvtx needs --nvtx PATH"),
    (["extract", "--sequence", "graph", "--nvtx", "x", "--", "true"], "--sequence graph needs KERNEL"),
    (["extract", "k", "--count", "3", "--", "true"], "--count and --until bound a run"),
    (["extract", "k", "--until", "add", "--", "true"], "--count and --until bound a run"),  # not ignored
    (["extract", "k", "--sequence", "nvtx", "--nvtx", "l", "--count", "3", "--", "true"], "bound a run"),
    (["extract", "k", "--sequence", "run", "--count", "3", "--dispatch", "1,2", "--", "true"], "one window"),
])
def test_the_cli_refuses_what_does_not_make_a_sequence(argv, words, capsys):
    assert main(argv) == 2
    assert words in capsys.readouterr().err


def test_fuse_refuses_intermediates_without_build_and_writes_no_skeleton(seq, capsys):
    """--intermediate is declared when the fusion is built: given with a skeleton's
    --first/--last it is a usage error, not silently dropped. Mutation caught: the check
    skipped (a skeleton written, the declaration lost)."""
    assert main(["fuse", str(seq), "--first", "0", "--last", "1", "--intermediate", "buf1"]) == 2
    assert "--intermediate goes with --build" in capsys.readouterr().err
    assert not (seq / "fusions").exists()


def test_commands_of_one_dispatch_refuse_a_sequence_or_its_kernel_entries(seq, capsys):
    # (prune takes a sequence: tests/test_sequence_prune.py)
    assert main(["recompile", str(seq)]) == 2
    assert "pick the kernel to rebuild" in capsys.readouterr().err
    assert main(["replay", str(seq), "--per-launch", "--compare", "x.cubin"]) == 2
    # a kernel entry is rebuilt, never replayed alone
    entry = seq / "kernels" / "0"
    (entry / "capture").mkdir(parents=True)
    from kerncap.capture.sequence_extract import kernel_entry_manifest

    (entry / "capture" / "manifest.json").write_text(json.dumps(kernel_entry_manifest(Capture.open(seq), 0)))
    with pytest.raises(CaptureFormatError, match="is a kernel entry of a sequence"):
        S.SeqClient(entry).validate()


def test_store_and_pack_carry_the_host_payloads(seq, tmp_path):
    packed = api.pack(seq, tmp_path / "seq.kcap")
    out = tmp_path / "unpacked"
    api.unpack(packed.path, out)
    cap = Capture.open(out)
    h2d = cap.sequence.steps[6]
    assert cap.read_chunk(h2d.payload[0], h2d.bytes) == S.PAYLOAD


NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").is_file() else None)


@pytest.mark.skipif(NVCC is None, reason="needs nvcc (the pipeline's kernels are compiled)")
def test_a_kernel_of_a_sequence_is_rebuilt_whole_unit_into_a_variant_of_its_module(tmp_path, monkeypatch):
    """kernels/<k>/ (a kernel entry: its first launch, the module's cubin, the sources
    found for it) rebuilt like any reproducer, its whole translation unit: the sequence
    variant replaces the module every launch of its kernels comes from."""
    import subprocess

    from kerncap.capture.sequence_extract import write_kernel_entries
    from kerncap.reproducer.sequence_variant import read_variant
    from kerncap.sources.cubin import kernel_names, open_elf

    src = Path(__file__).resolve().parents[1] / "testapps" / "cuda"
    cubin = tmp_path / "pipeline.cubin"
    subprocess.run([NVCC, "-cubin", "-arch=sm_90", "-lineinfo", f"-I{src}", "-o", str(cubin),
                    str(src / "seq_pipeline.cu")], check=True, capture_output=True, timeout=600)
    repro = S.pipeline_kernels_sequence(tmp_path / "seq", cubin.read_bytes())
    notes: list[str] = []
    entries = write_kernel_entries(repro, src, None, notes)
    assert [(e["dir"], e["sources"]) for e in entries] == [("kernels/0", "cuda"), ("kernels/1", "cuda")], notes
    with pytest.raises(CaptureFormatError, match="kernel entry of a sequence"):
        S.install(monkeypatch)
        S.SeqClient(repro / "kernels" / "1").validate()
    with pytest.raises(UsageError, match="whole translation unit"):
        api.recompile_sequence_kernel(repro, "sp_add", mode="reduced")
    with pytest.raises(UsageError, match="names 2 kernels"):
        api.recompile_sequence_kernel(repro, "sp_")
    built, variant = api.recompile_sequence_kernel(repro, "sp_add")
    v = read_variant(repro, variant, Capture.open(repro).sequence)
    (module, path), = v.modules.items()
    assert module == 0 and path == Path(built.cubin).resolve() and path.is_relative_to(repro / "kernels" / "1")
    assert {"_Z8sp_scalePKfPfi", "_Z6sp_addPKfPfi"} <= kernel_names(open_elf(path.read_bytes(), str(path)))


def _pipeline_with_entries(tmp_path, monkeypatch):
    """The synthetic sequence over seq_pipeline.cu's real module (compiled here), with its
    kernel entries and their sources; the simulated core runs sp_scale/sp_add as scale/add,
    from the captured module and from a rebuilt one (variants/1.cubin of the entry)."""
    import subprocess

    from kerncap.capture.sequence_extract import write_kernel_entries

    src = Path(__file__).resolve().parents[1] / "testapps" / "cuda"
    cubin = tmp_path / "pipeline.cubin"
    subprocess.run([NVCC, "-cubin", "-arch=sm_90", "-lineinfo", f"-I{src}", "-o", str(cubin),
                    str(src / "seq_pipeline.cu")], check=True, capture_output=True, timeout=600)
    repro = S.pipeline_kernels_sequence(tmp_path / "seq", cubin.read_bytes())
    write_kernel_entries(repro, src, None, [])
    for module in ("captured", "1.cubin", "2.cubin"):
        monkeypatch.setitem(S.SEQ_KERNELS, (module, "_Z8sp_scalePKfPfi"), S.scale)
        monkeypatch.setitem(S.SEQ_KERNELS, (module, "_Z6sp_addPKfPfi"), S.add)
    S.install(monkeypatch)
    monkeypatch.setattr("kerncap.replay.client.ReplayClient", S.SeqClient)
    return repro


@pytest.mark.skipif(NVCC is None, reason="needs nvcc (the pipeline's kernels are compiled)")
def test_a_sequence_build_rebuilds_one_kernel_and_records_the_sequence_and_its_launches(tmp_path, monkeypatch):
    """Session.build on a sequence (the workbench's save, `kerncap build --kernel`): kernel
    1's entry rebuilt whole unit, the whole sequence timed and validated, a History row with
    the kernel and every launch's time; the baseline holds the launches' times too; an
    unchanged source builds nothing; two editable kernels and no --kernel is refused."""
    repro = _pipeline_with_entries(tmp_path, monkeypatch)
    with api.open_session(repro, compile_worker=False) as s:
        with pytest.raises(UsageError, match="2 have sources"):
            s.build(api.BuildRequest(rounds=5, iterations=2, runs=2))
        r = s.build(api.BuildRequest(kernel="sp_add", rounds=5, iterations=2, runs=2))
        assert r.status == "recorded", r
        base, v = s.history.variants
        assert base.launch_ms == [0.01, 0.01] and base.kernel is None
        assert v.kernel == 1 and v.validation == "pass" and v.launch_ms == [0.01, 0.01]
        assert v.cubin == "variants/kernel-1-1.json" and v.median_ms == pytest.approx(0.02)
        assert api.changed_launch_ms(v, s.capture) == pytest.approx(0.01)
        assert api.changed_launch_ms(base, s.capture) is None
        again = s.build(api.BuildRequest(kernel="1", rounds=5, iterations=2, runs=2))
        assert again.status == "unchanged" and again.variant.id == v.id
    # the row survives a reload (history.json's schema knows the fields); kernels/ is versioned
    h = api.History.load(repro)
    assert h.variants[-1].launch_ms == [0.01, 0.01] and h.versioned == "kernels"
    assert kernel_of_source(repro, repro / "kernels" / "1" / "source" / "x.cu") == 1
    assert kernel_of_source(repro, repro / "kernels" / "1" / "variants" / "1.cubin") is None


@pytest.mark.skipif(NVCC is None, reason="needs nvcc (the pipeline's kernels are compiled)")
def test_mcp_reads_and_writes_a_sequence_kernels_sources_and_builds_from_them(tmp_path, monkeypatch):
    """An agent edits a sequence through MCP alone: list_sources, read_source and
    write_source with `kernel` reach kernels/<k>/source/ (nothing outside it), and `build`
    with that kernel rebuilds from what was written; without `kernel` on a sequence of two
    editable kernels the tools name both."""
    import anyio
    from mcp import Client

    from kerncap.frontends.mcp_server import build_server

    repro = _pipeline_with_entries(tmp_path, monkeypatch)

    async def go():
        async with Client(build_server([repro.parent])) as c:
            listed = await c.call_tool("list_sources", {"reproducer": repro.name, "kernel": "sp_add"})
            name = next(f["path"] for f in listed.structured_content["files"] if f["path"].endswith(".cu"))
            read = await c.call_tool("read_source", {"reproducer": repro.name, "file": name, "kernel": "sp_add"})
            text = read.structured_content["text"] + "\n// edited over MCP\n"
            wrote = await c.call_tool("write_source", {"reproducer": repro.name, "file": name, "text": text,
                                                       "kernel": "1"})
            escape = await c.call_tool("read_source", {"reproducer": repro.name, "file": "../../reproducer.json",
                                                       "kernel": "1"})
            unnamed = await c.call_tool("list_sources", {"reproducer": repro.name})
            built = await c.call_tool("build", {"reproducer": repro.name, "kernel": "sp_add", "rounds": 5,
                                                "iterations": 2, "runs": 2})
            return name, listed, read, wrote, escape, unnamed, built

    name, listed, read, wrote, escape, unnamed, built = anyio.run(go)
    assert not listed.is_error and listed.structured_content["kernel"] == "sp_add"
    assert listed.structured_content["source_dir"] is None  # a sequence's sources are its kernels'
    assert "__global__ void sp_add" in read.structured_content["text"]
    assert not wrote.is_error
    assert (repro / "kernels" / "1" / "source" / name).read_text().endswith("// edited over MCP\n")
    assert escape.is_error and "without '..'" in escape.content[0].text
    # a hostile sequence whose kernels/ leads elsewhere: refused before anything is read or written
    outside = tmp_path / "elsewhere"
    shutil.move(repro / "kernels", outside)
    (repro / "kernels").symlink_to(outside)
    with pytest.raises(UsageError, match="leads outside"):
        api.write_source(repro, name, "evil", "sp_add")
    assert unnamed.is_error and "2 have sources" in unnamed.content[0].text
    assert not built.is_error, built.content[0].text
    v = api.History.load(repro).variants[-1]
    assert v.kernel == 1 and v.validation == "pass"


def test_mcp_info_validate_and_build_take_a_sequence(seq):
    """MCP's info shows the sequence (as `info --json`), validate goes through the same
    session and passes byte-exact on the captured input, build without kernel entries says
    which step is missing (the simulated core; the GPU suite's MCP tests run the real one)."""
    import anyio
    from mcp import Client

    from kerncap.frontends.mcp_server import build_server

    async def go():
        async with Client(build_server([seq.parent])) as c:
            return [await c.call_tool(name, args) for name, args in (
                ("info", {"reproducer": seq.name}), ("validate", {"reproducer": seq.name, "runs": 2}),
                ("build", {"reproducer": seq.name}))]

    info, validate, build = anyio.run(go)
    assert not info.is_error and len(info.structured_content["sequence"]["launches"]) == 2
    assert not validate.is_error and validate.structured_content["verdict"] == "pass", validate.content[0].text
    assert build.is_error and "none has sources" in build.content[0].text


def test_build_kernel_on_one_dispatch_is_refused(capsys):
    repro = Path(__file__).resolve().parent / "fixtures" / "captures" / "axpy_small"
    assert main(["build", str(repro), "--kernel", "0"]) == 2
    assert "--kernel picks one kernel of a sequence" in capsys.readouterr().err


def test_a_kernel_number_one_past_the_last_names_no_kernel(seq, capsys):
    """`--kernel K` is the kernel's number when it is one (0 .. kernels - 1), else a part of
    its name: with two kernels, `--kernel 2` names none, and recompile and build say so
    (exit 2) with the kernels there are, rather than looking for a kernel entry 2.
    Mutation caught: the number bound off by one (`<=`)."""
    cap = Capture.open(seq)
    assert [kernel_index(cap, str(k)) for k in (0, 1)] == [0, 1]
    with pytest.raises(UsageError, match="--kernel '2' names no kernel of the sequence"):
        kernel_index(cap, "2")
    for verb in ("recompile", "build"):
        assert main([verb, str(seq), "--kernel", "2"]) == 2, verb
        err = capsys.readouterr().err
        assert "--kernel '2' names no kernel of the sequence" in err, err
        assert "0: scale(float const*, float*); 1: add(float const*, float*)" in err, err

def test_a_sequence_variant_is_validated_through_the_request_api_not_taken_for_a_set_variant(seq, monkeypatch):
    """On the H200, `validate_request` with variants/<name>.json of a sequence said "is a
    set variant, and … is not a set": both kinds of variant are variants/*.json."""
    monkeypatch.setattr("kerncap.replay.differential.ReplayClient", S.SeqClient, raising=False)
    (seq / "variants").mkdir()
    (seq / "variants" / "add_wrong.cubin").write_bytes(b"synthetic")
    variant = write_variant(seq, "wrong", modules={0: "variants/add_wrong.cubin"})
    report = api.validate_request([seq], api.ValidateRequest(cubin=str(variant), runs=1))
    assert not report.passed
    same = api.validate_request([seq], api.ValidateRequest(cubin=None, runs=1))
    assert same.passed


@pytest.mark.skipif(NVCC is None, reason="needs nvcc (the pipeline's kernels are compiled)")
def test_recompile_kernel_is_one_result_through_the_cli_and_mcp(tmp_path, monkeypatch, capsys):
    """`kerncap recompile SEQ --kernel K` called its own function and MCP's recompile had no
    `kernel` at all; both now ask the session (Session.recompile(kernel=)) and print the
    same keys, with the sequence variant that uses the new cubin."""
    import anyio
    from mcp import Client

    from kerncap.frontends.mcp_server import build_server

    repro = _pipeline_with_entries(tmp_path, monkeypatch)
    assert main(["recompile", str(repro), "--kernel", "sp_add", "--json"]) == 0
    from_cli = json.loads(capsys.readouterr().out)

    async def go():
        async with Client(build_server([repro.parent])) as c:
            return await c.call_tool("recompile", {"reproducer": repro.name, "kernel": "sp_add"})

    answer = anyio.run(go)
    assert not answer.is_error, answer.content[0].text
    from_mcp = answer.structured_content
    assert set(from_cli) == set(from_mcp) and from_cli["mode"] == from_mcp["mode"] == "full"
    assert [Path(d["variant"]).name for d in (from_cli, from_mcp)] == ["kernel-1-1.json", "kernel-1-2.json"]
    assert all(Path(d["cubin"]).is_relative_to(repro / "kernels" / "1") for d in (from_cli, from_mcp))


def test_an_unclosed_run_is_a_crossing_only_when_another_process_ran_the_until_kernel():
    """diagnose: a run (--until) left open is called a crossing only when the until-kernel
    ran in another process; the capturing process's own earlier launches of it (before the
    window) are no crossing (mutation caught: the capturing process counted among the others)."""
    from kerncap.capture.selection import Selection
    from kerncap.capture.sequence_extract import SequenceRequest, diagnose

    request = SequenceRequest(mode="run", until="softmax")
    unclosed = {"kind": "sequence_unclosed", "message": "the app ended before the run's last launch"}
    own = [{"pid": 10, "errors": [unclosed], "sequence": {"until_seen": 2}}, {"pid": 11, "sequence": {"until_seen": 0}}]
    err = diagnose(request, "gemm", 4, Selection(), own)
    assert err is not None and "crosses" not in err.message
    assert err.message == ("the run from dispatch 4 of 'gemm', up to the next launch of 'softmax' was not captured: "
                           "the app ended before the run's last launch")
    other = [{"pid": 10, "errors": [unclosed], "sequence": {"until_seen": 0}}, {"pid": 11, "sequence": {"until_seen": 3}}]
    err = diagnose(request, "gemm", 4, Selection(), other)
    assert err is not None and "crosses processes: it began in process 10" in err.message
    assert "ran only in process 11 (3 launch(es))" in err.message
