"""Pruned sequences (`kerncap prune`, `extract --prune` on a sequence; docs/prune.md,
"Sequences") on the CPU, on SYNTHETIC sequence captures: tests/sequence_sim.py's
two-stream pipeline (scale, an event, a device copy into z, a fill of w, add, a host copy
into y) extended with two launches and four regions,

    launch 2: stash(table, masked, key)   table[0] = masked ^ key  (a pointer to `hidden`,
                                          passed so that no aligned word of the parameters is it)
    launch 3: follow(table, sink)         sink = 3 * hidden[...]   (through table[0])
    ballast                               nothing reaches it

The pointer to `hidden` exists only in table's post-state: the closure keeps `hidden`
because it scans post-states. The pruned reproducer is validated by the replay server's
real code over the simulated core (tests/sequence_sim.py), which faults on an address
of a dropped region as the GPU does; the GPU suite prunes real captures
(tests/gpu/test_sequences.py, testapps/cuda/seq_pipeline.cu's chain and hidden modes).
No real sequence capture is committed under tests/fixtures/ (there is none to use)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

import sequence_sim as S
from kerncap import api
from kerncap.cli import main
from kerncap.prune import pruner as prune_mod
from kerncap.prune.closure import compute_closure
from kerncap.prune.roots import ARGUMENTS, GLOBALS, HOST, MEMORY_OPS, STORED, STORED_SUFFIX, sequence_roots
from kerncap.prune.pruner import prune_reproducer
from kerncap.reproducer.format import Capture
from test_extract_success import publish  # noqa: F401  (fixture)

KEY = 0x5A5A5A5A5A5A5A5A
EXTRA = {"table": 0x7F0000500000, "hidden": 0x7F0000600000, "sink": 0x7F0000700000, "ballast": 0x7F0000800000}
IDS = {name: i for i, name in enumerate([*sorted(S.BASES, key=S.BASES.get), *EXTRA])}  # region ids by base
HIDDEN = np.arange(S.N, dtype=np.float32) * np.float32(0.5) + np.float32(1)


def stash(mem, params):
    table, masked, key = struct.unpack_from("<3Q", params)
    mem.write(table, struct.pack("<Q", masked ^ key))


def follow(mem, params):
    table, sink = struct.unpack_from("<2Q", params)
    (hidden,) = struct.unpack("<Q", mem.read(table, 8))
    src = np.frombuffer(mem.read(hidden, S.BYTES), dtype=np.float32)
    mem.write(sink, (np.float32(3) * src).tobytes())


@pytest.fixture
def sim(monkeypatch):
    """The simulated replay core with stash and follow; prune validates through it."""
    S.install(monkeypatch)
    monkeypatch.setitem(S.SEQ_KERNELS, ("captured", "_Z5stashPyyy"), stash)
    monkeypatch.setitem(S.SEQ_KERNELS, ("captured", "_Z6followPKyPf"), follow)
    monkeypatch.setattr("kerncap.replay.client.ReplayClient", S.SeqClient)
    monkeypatch.setattr(prune_mod, "ReplayClient", S.SeqClient)


def _param(index: int, offset: int, value: bytes, region: int | None = None) -> dict:
    p = {"index": index, "offset": offset, "size": len(value), "value": value.hex()}
    if region is not None:
        p["pointer"] = {"region": region, "offset": 0}
    return p


def linked_sequence(dest: Path, *, edit=None) -> Path:
    """The SYNTHETIC sequence described above; `edit(manifest, sequence, cap_dir)` changes
    it before it is written."""
    repro = S.synthetic_sequence(dest)
    cap = repro / "capture"
    m = json.loads((cap / "manifest.json").read_text())
    seq = json.loads((cap / "sequence.json").read_text())
    pointer = struct.pack("<Q", EXTRA["hidden"]) + bytes(S.BYTES - 8)
    states = {"table": (bytes(S.BYTES), pointer), "hidden": (HIDDEN.tobytes(), HIDDEN.tobytes()),
              "sink": (bytes(S.BYTES), (np.float32(3) * HIDDEN).tobytes()),
              "ballast": (b"\x5a" * S.BYTES, b"\x5a" * S.BYTES)}
    for name, base in EXTRA.items():
        pre, post = (S._blob(cap, s) for s in states[name])
        m["regions"].append({"id": IDS[name], "base": base, "size": S.BYTES, "api": "cuMemAlloc_v2",
                             "kind": "device", "written": pre != post, "zero_fraction": 0.0, "pre": [pre],
                             "post": [post]})
    seq["kernels"] += [{"id": 2, "module": 0, "name": "_Z5stashPyyy", "demangled": "stash(unsigned long long*, "
                        "unsigned long long, unsigned long long)"},
                       {"id": 3, "module": 0, "name": "_Z6followPKyPf", "demangled": "follow(unsigned long long "
                        "const*, float*)"}]
    stash_buf = struct.pack("<3Q", EXTRA["table"], EXTRA["hidden"] ^ KEY, KEY)
    follow_buf = struct.pack("<2Q", EXTRA["table"], EXTRA["sink"])
    for index, kernel, buf, regions in ((2, 2, stash_buf, [IDS["table"], None, None]),
                                        (3, 3, follow_buf, [IDS["table"], IDS["sink"]])):
        seq["launches"].append({
            "index": index, "kernel": kernel, "launch_api": "cuLaunchKernel", "stream_id": 0, "grid": [1, 1, 1],
            "block": [256, 1, 1], "shared_mem_bytes": 0, "stream": "user", "cooperative": False, "attributes": [],
            "param_form": "array", "param_buffer": buf.hex(),
            "params": [_param(i, 8 * i, buf[8 * i:8 * i + 8], r) for i, r in enumerate(regions)]})
        seq["steps"].append({"op": "launch", "api": "cuLaunchKernel", "stream": 0, "launch": index})
    if edit:
        edit(m, seq, cap)
    m["sequence"].update(launches=len(seq["launches"]), steps=len(seq["steps"]), kernels=len(seq["kernels"]))
    (cap / "sequence.json").write_text(json.dumps(seq, indent=1))
    (cap / "manifest.json").write_text(json.dumps(m, indent=1))
    return repro


# -- the closure of a sequence ----------------------------------------------------------------


def test_the_closure_keeps_every_launchs_arguments_the_memory_operations_and_stored_pointers(tmp_path):
    cap = Capture.open(linked_sequence(tmp_path / "seq"))
    c = compute_closure(cap)
    assert c.refusal == "", c.refusal
    assert c.kept == sorted(IDS[n] for n in ("x", "tmp", "y", "z", "w", "table", "hidden", "sink"))
    assert IDS["ballast"] not in c.kept and c.dropped == 1 and c.regions_full == 9
    r = c.reasons
    assert (r[IDS["x"]], r[IDS["tmp"]], r[IDS["y"]]) == ("launch 0: argument 0", "launch 0: argument 1",
                                                          "launch 1: argument 1")
    assert (r[IDS["table"]], r[IDS["sink"]]) == ("launch 2: argument 0", "launch 3: argument 1")
    # z and w: only a device copy and a fill touch them
    assert r[IDS["z"]] == "step 3: d2d copy destination" and r[IDS["w"]] == "step 4: fill"
    # hidden: its address is in no parameter word (masked) and in no pre-state; launch 2 stores it
    assert r[IDS["hidden"]] == f"pointer at region {IDS['table']}+0x0 (stored in the window)"
    assert c.kinds[IDS["hidden"]] == STORED and c.kinds[IDS["z"]] == MEMORY_OPS and c.kinds[IDS["x"]] == ARGUMENTS
    assert c.by_reason == {"arguments": {"regions": 5, "logical": 5 * S.BYTES},
                           "memory operations": {"regions": 2, "logical": 2 * S.BYTES},
                           "pointers stored in the window": {"regions": 1, "logical": S.BYTES}}
    assert c.logical_full == 9 * S.BYTES and c.logical_pruned == 8 * S.BYTES
    # stored: the ballast's chunk goes; the h2d copy's payload is stored and stays
    payload = cap.sequence.steps[6].payload[0]
    assert c.stored_full - c.stored_pruned == S.BYTES and payload in set(cap.iter_blobs())


def test_without_the_post_state_scan_the_stored_pointer_is_missed(tmp_path):
    """What the post-state scan is for: the pre-state alone does not reach `hidden`."""
    cap = Capture.open(linked_sequence(tmp_path / "seq"))
    roots = sequence_roots(cap)
    roots.post = False
    c = compute_closure(cap, roots)
    assert IDS["hidden"] not in c.kept and IDS["table"] in c.kept


def _stored_in(kind: str):
    """An edit that adds a module global (kind "global") or a pinned host region ("host")
    holding nothing before the window and the ballast's address after it: a pointer one of
    the launches stored there, which only the post-state shows."""
    def edit(m, seq, cap):
        pre, post = S._blob(cap, bytes(64)), S._blob(cap, struct.pack("<Q", EXTRA["ballast"]) + bytes(56))
        if kind == "global":
            m["globals"].append({"name": "g_table", "size": 64, "address": 0x7F0000900000, "written": True,
                                 "module": 0, "pre": [pre], "post": [post]})
            seq["modules"][0]["globals"].append(len(m["globals"]) - 1)
        else:
            m["host_regions"].append({"id": 0, "base": 0x7E0000000000, "size": 64, "api": "cuMemHostAlloc",
                                      "snapshotted": True, "written": True, "pre": [pre], "post": [post]})
    return edit


def test_a_pointer_stored_in_a_module_global_during_the_window_is_followed(tmp_path):
    """A global's post-state is scanned like a region's: the ballast, which no argument,
    memory operation or pre-state reaches, is kept through the pointer stored there."""
    c = compute_closure(Capture.open(linked_sequence(tmp_path / "seq", edit=_stored_in("global"))))
    assert c.reasons[IDS["ballast"]] == "global g_table+0x0" + STORED_SUFFIX and c.kinds[IDS["ballast"]] == GLOBALS
    assert c.refusal == "" and c.dropped == 0


def test_a_pointer_stored_in_a_host_region_during_the_window_is_followed(tmp_path):
    """The same for a pinned host region's post-state (a launch wrote a device address
    into mapped host memory)."""
    c = compute_closure(Capture.open(linked_sequence(tmp_path / "seq", edit=_stored_in("host"))))
    assert c.reasons[IDS["ballast"]] == "pointer at host region 0+0x0" + STORED_SUFFIX
    assert c.kinds[IDS["ballast"]] == HOST and c.refusal == "" and c.dropped == 0


def test_a_pointer_among_a_host_copys_bytes_is_followed(tmp_path):
    """The host bytes an h2d copy writes are scanned like memory (a pointer table uploaded
    inside the window), even where the destination's post-state no longer shows them."""
    def edit(m, seq, cap):
        data = struct.pack("<Q", EXTRA["ballast"]) + bytes(8)
        seq["steps"][6]["payload"] = [S._blob(cap, data)]

    c = compute_closure(Capture.open(linked_sequence(tmp_path / "seq", edit=edit)))
    assert c.reasons[IDS["ballast"]] == "step 6: h2d copy's bytes+0x0" and c.kinds[IDS["ballast"]] == MEMORY_OPS


def test_a_device_to_device_copys_source_is_a_root(tmp_path):
    """A d2d copy reads its source: a region only such a copy reads is kept (named as the
    copy's source), or the pruned sequence copies zeros. Mutation caught: only a d2h copy's
    source counted."""
    def edit(m, seq, cap):
        seq["steps"].append({"op": "copy", "api": "cuMemcpyDtoDAsync_v2", "stream": 0, "kind": "d2d",
                             "dst": S.BASES["z"], "src": EXTRA["ballast"] + 16, "bytes": 64})

    c = compute_closure(Capture.open(linked_sequence(tmp_path / "seq", edit=edit)))
    assert c.reasons[IDS["ballast"]] == "step 9: d2d copy source" and c.kinds[IDS["ballast"]] == MEMORY_OPS
    assert IDS["ballast"] in c.kept and c.dropped == 0 and c.refusal == ""


def test_a_device_to_host_copys_source_a_2d_fill_and_a_span_over_two_regions_are_roots(tmp_path):
    from kerncap.prune.roots import _Spans, _touched
    from kerncap.reproducer.sequence import SeqStep

    def edit(m, seq, cap):
        seq["steps"].append({"op": "copy", "api": "cuMemcpyDtoHAsync_v2", "stream": 0, "kind": "d2h",
                             "dst": 0x1000, "src": EXTRA["ballast"] + 16, "bytes": 64})

    cap = Capture.open(linked_sequence(tmp_path / "seq", edit=edit))
    c = compute_closure(cap)
    assert c.reasons[IDS["ballast"]] == "step 9: d2h copy source" and c.refusal == ""
    # A 2-D fill: rows of `width` elements `pitch` bytes apart, the last row's end included.
    fill = SeqStep(op="memset", dst=0x1000, element=4, width=8, height=3, pitch=256)
    assert _touched(fill) == [(0x1000, 2 * 256 + 32, "fill")]
    spans = _Spans(cap)
    assert spans.overlapping(S.BASES["tmp"] + 1000, S.BASES["y"] - S.BASES["tmp"]) == [IDS["tmp"], IDS["y"]]
    assert spans.overlapping(S.BASES["tmp"] + S.BYTES, 16) == []  # the gap after tmp
    assert spans.overlapping(S.BASES["tmp"] - 8, 9) == [IDS["tmp"]]  # its first byte


def test_a_written_region_no_root_reaches_is_refused_naming_the_launches(tmp_path, sim):
    """w is filled by the window's memset; without that step in sequence.json nothing
    reaches it, yet its post-state differs: the launches found it some other way."""
    def edit(m, seq, cap):
        del seq["steps"][4]  # the fill

    root = linked_sequence(tmp_path / "seq", edit=edit)
    c = compute_closure(Capture.open(root))
    assert [r.id for r in c.unreached_written] == [IDS["w"]]
    assert c.refusal.startswith(f"the sequence wrote region {IDS['w']} ({S.BASES['w']:#x}, 1.0 KiB), which no pointer "
                                "in its launches' arguments, its memory operations")
    assert "one of its 4 launches (launch 0 (scale(float const*, float*)), launch 1 (add(" in c.refusal
    manifest = (root / "capture" / "manifest.json").read_bytes()
    report = prune_reproducer(root)
    assert report.kept == "full" and report.reason == c.refusal
    assert (root / "capture" / "manifest.json").read_bytes() == manifest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seq"]


def test_a_manifest_calling_a_changed_region_unwritten_is_still_refused(tmp_path):
    def edit(m, seq, cap):
        del seq["steps"][4]
        m["regions"][IDS["w"]]["written"] = False  # pre != post all the same

    c = compute_closure(Capture.open(linked_sequence(tmp_path / "seq", edit=edit)))
    assert [r.id for r in c.unreached_written] == [IDS["w"]]


# -- pruning, validated on the simulated core -----------------------------------------------------


def test_a_pruned_sequence_validates_and_replaces_the_full_one(tmp_path, sim, capsys):
    root = linked_sequence(tmp_path / "seq")
    full = Capture.open(root)
    report = prune_reproducer(root)
    assert report.kept == "pruned" and report.validated, report.reason
    assert (report.regions_full, report.regions_pruned) == (9, 8)
    assert report.by_reason["pointers stored in the window"] == {"regions": 1, "logical": S.BYTES}
    assert "kept for arguments: 5 regions (5.0 KiB); memory operations: 2 (2.0 KiB)" in report.by_reason_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seq"]
    pruned = Capture.open(root)
    pruned.verify()  # every chunk, the h2d payload's too, is there
    assert [r.id for r in pruned.regions] == [i for i in range(9) if i != IDS["ballast"]]
    assert pruned.sequence.steps == full.sequence.steps and len(pruned.sequence.launches) == 4
    assert pruned.manifest["pruned"]["by_reason"] == report.by_reason
    assert report.stored_pruned == pruned.stored_bytes
    v = S.SeqClient(root).validate()
    assert v.passed and {c.id for c in v.regions if c.kind == "region"} == {r.id for r in pruned.regions}

    assert main(["info", str(root)]) == 0
    info = capsys.readouterr().out
    assert "sequence    4 launches of 4 kernels" in info and "pruned      from" in info
    assert "kept for arguments: 5 regions" in info and "(stored in the window)" in info
    assert main(["list", str(tmp_path)]) == 0
    assert "sequence (run): 4 launches of 4 kernels" in capsys.readouterr().out
    r = S.SeqClient(root).replay(iterations=2, warmup=0, per_launch=True)
    assert len(r.launches) == 4


def test_a_closure_that_misses_the_stored_pointer_fails_validation_and_keeps_the_full_one(tmp_path, sim,
                                                                                             monkeypatch):
    """Validation is what proves the closure: without the post-state scan `hidden` is
    dropped, follow() faults on it in the replay, and the full reproducer stays."""
    from kerncap.prune import closure as closure_mod

    def pre_only(cap):
        roots = sequence_roots(cap)
        roots.post = False
        return roots

    monkeypatch.setattr(closure_mod, "sequence_roots", pre_only)
    root = linked_sequence(tmp_path / "seq")
    report = prune_reproducer(root)
    assert report.kept == "full" and "replaying the pruned reproducer failed" in report.reason, report.reason
    assert "illegal address" in report.reason and len(Capture.open(root).regions) == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seq"]


def test_no_validate_json_and_the_carriers_of_a_pruned_sequence(tmp_path, sim, capsys):
    """`kerncap prune --no-validate --json`, then pack/unpack and store/hydrate of the
    pruned sequence: each replays byte-exact."""
    root = linked_sequence(tmp_path / "seq")
    assert main(["prune", str(root), "--no-validate", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kept"] == "pruned" and data["validated"] is False and data["regions_pruned"] == 8
    assert data["by_reason"]["memory operations"] == {"regions": 2, "logical": 2 * S.BYTES}
    out = Path(data["output"])
    assert out == tmp_path / "seq-pruned" and (out / "capture" / "sequence.json").is_file()
    assert S.SeqClient(out).validate().passed

    packed = api.pack(out, tmp_path / "p.kcap")
    unpacked = tmp_path / "unpacked"
    api.unpack(packed.path, unpacked)
    assert S.SeqClient(unpacked).validate().passed
    assert [r.id for r in Capture.open(unpacked).regions] == [r.id for r in Capture.open(out).regions]

    api.store(out, tmp_path / "store")
    assert not any((out / "capture" / "blobs").iterdir()), "store moves the blobs out"
    Capture.open(out).verify()  # read through the store: the h2d payload's chunk too
    assert main(["info", str(out)]) == 0 and "pruned      from" in capsys.readouterr().out
    # a pruned and stored sequence prunes again to nothing more (prune hydrates first, as replay does)
    again = prune_reproducer(out, validate=False, output=tmp_path / "again")
    assert again.kept == "full" and again.reason == prune_mod.NOTHING_TO_DROP
    assert S.SeqClient(out).validate().passed


@pytest.mark.usefixtures("sim")
def test_extract_prune_of_a_sequence(tmp_path, publish):
    """extract --sequence … --prune: no longer refused; the extract's summary says what the
    prune kept per reason, and the kernel entries travel with the pruned reproducer."""
    derived = linked_sequence(tmp_path / "derived")
    out = tmp_path / "work" / "seq"
    result, _ = publish(out, spec={"capture": str(derived / "capture")}, prune=True,
                        sequence=api.SequenceRequest("run", count=4))
    assert result.prune is not None and result.prune.kept == "pruned" and result.prune.validated, result.notes
    assert IDS["ballast"] not in {r.id for r in result.capture.regions}, "result.capture is the pruned capture"
    assert sorted(p.name for p in (out / "kernels").iterdir()) == ["0", "1", "2", "3"]
    text = api.format_extract(result)
    assert "prune       pruned 9 -> 8 regions" in text and "kept for arguments: 5 regions" in text
    assert sorted(p.name for p in out.parent.iterdir()) == ["seq"]
