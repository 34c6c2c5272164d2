"""Pruned closures (`kerncap prune`, `extract --prune`) on the real H200 captures of
tests/fixtures/captures/ and the workbench demo, and on captures derived from a copy of
axpy_small in tmp_path: extra regions appended after the real ones, pointer values
planted in pre-state chunks (re-hashed, manifest updated). The fixtures themselves are
never modified. Replay needs the GPU, so validation is replaced by a stub here except
where the point is that it cannot run (tests/gpu/test_prune_gpu.py replays for real)."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
import xxhash
from kerncap import api
from kerncap.cli import main
from kerncap.errors import GpuUnavailable, KerncapError
from kerncap.prune import pruner as prune_mod
from kerncap.prune.closure import compute_closure
from kerncap.prune.pruner import (
    NOTHING_TO_DROP,
    PruneReport,
    prune_reproducer,
    write_pruned,
)
from kerncap.replay.results import RegionCheck, ValidationResult
from kerncap.reproducer.format import Capture
from test_extract_success import publish  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parent.parent
AXPY = ROOT / "tests" / "fixtures" / "captures" / "axpy_small"
DEMO = ROOT / "kerncap_tui" / "demo" / "reproducer"
REAL = [AXPY, DEMO]

# Derived regions: 1 MiB apart from the second 64 MiB boundary after axpy_small's last
# region (addresses move with every capture: read them from its manifest).
_LAST_END = max(r["base"] + r["size"] for r in json.loads((AXPY / "capture" / "manifest.json").read_text())["regions"])
EXTRA_BASE = ((_LAST_END >> 26) + 2) << 26
EXTRA_STRIDE = 1 << 20
EXTRA_SIZE = 64 << 10


def extra_base(rid: int, stride: int = EXTRA_STRIDE) -> int:
    return EXTRA_BASE + (rid - 2) * stride


def _put(cap_dir: Path, data: bytes) -> str | None:
    if data == bytes(len(data)):
        return None
    h = xxhash.xxh64_hexdigest(data)
    (cap_dir / "blobs" / f"{h}.bin").write_bytes(data)
    return h


def derive(tmp_path: Path, *, extra: int = 0, pointers=(), written=(), stride: int = EXTRA_STRIDE,
           name: str = "repro", manifest_edit=None) -> Path:
    """A copy of axpy_small with `extra` regions (ids 2, 3, …, filled with 0x01 bytes)
    and `pointers` = [(region id, byte offset, u64 value)] written into pre-states.
    Regions in `written` get a post-state that differs from their pre-state."""
    root = tmp_path / name
    shutil.copytree(AXPY, root)
    cap_dir = root / "capture"
    original = Capture.open(root)
    m = json.loads((cap_dir / "manifest.json").read_text())
    for i in range(extra):
        rid = len(m["regions"])
        m["regions"].append({"id": rid, "base": extra_base(rid, stride), "size": EXTRA_SIZE, "api": "cuMemAlloc_v2",
                             "kind": "device", "written": False, "zero_fraction": 0.0, "pre": [None], "post": [None]})
    content = {}
    for r in m["regions"]:
        if r["id"] < 2:
            content[r["id"]] = bytearray(original.read_bytes(r["pre"], r["size"]))
        else:
            content[r["id"]] = bytearray(b"\x01" * r["size"])
    for rid, offset, value in pointers:
        content[rid][offset:offset + 8] = value.to_bytes(8, "little")
    for r in m["regions"]:
        rid = r["id"]
        if rid < 2 and not any(p[0] == rid for p in pointers):
            continue
        pre = _put(cap_dir, bytes(content[rid]))
        was_written = r["pre"] != r["post"]
        r["pre"] = [pre]
        if rid in written:
            r["post"], r["written"] = [_put(cap_dir, bytes(b ^ 0xFF for b in content[rid]))], True
        elif not was_written:
            r["post"] = [pre]
    if manifest_edit:
        manifest_edit(m, cap_dir)
    (cap_dir / "manifest.json").write_text(json.dumps(m, indent=1))
    return root


def tree(root: Path) -> dict[str, bytes | str]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        out[rel] = "dir" if p.is_dir() else p.read_bytes()
    return out


def siblings(root: Path) -> list[str]:
    return sorted(p.name for p in root.parent.iterdir())


@pytest.fixture
def validated(monkeypatch):
    """Replaces the GPU validation; records the directories it was asked to validate."""
    calls: list[Path] = []

    def fake(path, *, device, timeout):
        calls.append(Path(path))
        cap = Capture.open(path)
        cap.verify()  # what replay's open does: every chunk present and intact
        return ValidationResult(passed=True, mode="exact", regions=[])

    monkeypatch.setattr(prune_mod, "_validate", fake)
    return calls


@pytest.fixture
def no_validation(monkeypatch):
    def fail(*a, **k):
        pytest.fail("validation must not run here")

    monkeypatch.setattr(prune_mod, "_validate", fail)


# -- the closure -----------------------------------------------------------------------------


@pytest.mark.parametrize("src", REAL, ids=["axpy_small", "demo"])
def test_closure_of_real_capture_is_its_arguments(src):
    cap = Capture.open(src)
    c = compute_closure(cap)
    annotated = {p.region: f"argument {p.index}" for p in cap.params if p.region is not None}
    assert c.kept == sorted(annotated) == [r.id for r in cap.regions]
    assert c.reasons == annotated
    assert (c.logical_full, c.logical_pruned) == (cap.logical_bytes, cap.logical_bytes)
    assert c.stored_full == c.stored_pruned == cap.stored_bytes
    assert c.refusal == "" and c.dropped == 0


def test_unreferenced_regions_are_dropped(tmp_path):
    cap = Capture.open(derive(tmp_path, extra=3))
    c = compute_closure(cap)
    assert c.kept == [0, 1] and c.dropped == 3 and c.regions_full == 5
    assert c.reasons == {0: "argument 1", 1: "argument 2"}
    assert c.logical_full == 2 * 16384 + 3 * EXTRA_SIZE and c.logical_pruned == 2 * 16384
    # The three extra regions share one blob (all 0x01), stored once.
    assert c.stored_full == Capture.open(AXPY).stored_bytes + EXTRA_SIZE
    assert c.stored_pruned == Capture.open(AXPY).stored_bytes


def test_pointers_are_followed_transitively(tmp_path):
    root = derive(tmp_path, extra=4, pointers=[
        (0, 0x10, extra_base(2)),            # x -> region 2
        (2, 0x20, extra_base(3) + 100),      # region 2 -> inside region 3
        (3, EXTRA_SIZE - 8, extra_base(4)),  # region 3's last word -> region 4
    ])
    c = compute_closure(Capture.open(root))
    assert c.kept == [0, 1, 2, 3, 4]
    assert c.reasons[2] == "pointer at region 0+0x10"
    assert c.reasons[3] == "pointer at region 2+0x20"
    assert c.reasons[4] == f"pointer at region 3+{EXTRA_SIZE - 8:#x}"
    assert 5 not in c.kept


def test_one_past_the_end_counts_and_just_beyond_does_not(tmp_path):
    root = derive(tmp_path, extra=3, pointers=[
        (0, 0x8, extra_base(2) + EXTRA_SIZE),      # one past region 2's end
        (0, 0x18, extra_base(3) + EXTRA_SIZE + 8),  # past region 3's end: no region
    ])
    c = compute_closure(Capture.open(root))
    assert c.kept == [0, 1, 2]


def test_one_past_the_end_of_the_highest_region_keeps_it(tmp_path):
    """The highest captured region (region 4: the extra regions lie above axpy's) is kept by
    a pointer one past its end, as any other region is, and not by one 8 bytes beyond."""
    root = derive(tmp_path, extra=3, pointers=[(0, 0x8, extra_base(4) + EXTRA_SIZE)])
    cap = Capture.open(root)
    assert max(r.end for r in cap.regions) == extra_base(4) + EXTRA_SIZE
    c = compute_closure(cap)
    assert c.kept == [0, 1, 4] and c.reasons[4] == "pointer at region 0+0x8"
    beyond = derive(tmp_path, extra=3, pointers=[(0, 0x8, extra_base(4) + EXTRA_SIZE + 8)], name="beyond")
    assert compute_closure(Capture.open(beyond)).kept == [0, 1]


def test_end_of_one_region_that_is_the_base_of_the_next_keeps_only_the_next(tmp_path):
    # Adjacent regions (stride == size), as a caching allocator lays them out: the value
    # is region 3's base; counting it as region 2's one-past pointer too would keep every
    # neighbour of every pointed-to allocation.
    root = derive(tmp_path, extra=3, stride=EXTRA_SIZE, pointers=[(0, 0x8, extra_base(2, EXTRA_SIZE) + EXTRA_SIZE)])
    c = compute_closure(Capture.open(root))
    assert c.kept == [0, 1, 3] and c.reasons[3] == "pointer at region 0+0x8"


def test_unaligned_values_and_dropped_regions_pointers_are_ignored(tmp_path):
    root = derive(tmp_path, extra=3, pointers=[
        (0, 0x4, extra_base(2)),   # not 8-byte aligned
        (3, 0x0, extra_base(4)),   # region 3 is not reached, so its pointer does not count
    ])
    c = compute_closure(Capture.open(root))
    assert c.kept == [0, 1]


def test_unannotated_pointer_in_a_struct_parameter_is_a_root(tmp_path):
    target = extra_base(2)

    def add_struct_param(m, cap_dir):
        struct = (7).to_bytes(8, "little") + target.to_bytes(8, "little")  # {int64 n; float* p;}
        buffer = bytes.fromhex(m["param_buffer"])
        buffer += bytes(32 - len(buffer)) + struct
        m["params"].append({"index": 4, "offset": 32, "size": 16, "value": struct.hex()})  # no annotation
        m["param_buffer"] = buffer.hex()

    c = compute_closure(Capture.open(derive(tmp_path, extra=2, manifest_edit=add_struct_param)))
    assert c.kept == [0, 1, 2] and c.reasons[2] == "argument 4+0x8"


def test_pointer_in_a_module_global_is_a_root(tmp_path):
    def add_global(m, cap_dir):
        h = _put(cap_dir, bytes(8) + extra_base(3).to_bytes(8, "little"))
        m["globals"].append({"name": "table", "section": ".nv.global", "size": 16, "address": 0, "written": False,
                             "pre": [h], "post": [h]})

    c = compute_closure(Capture.open(derive(tmp_path, extra=2, manifest_edit=add_global)))
    assert c.kept == [0, 1, 3] and c.reasons[3] == "global table+0x8"


def test_dense_pointer_table_over_several_chunks(tmp_path):
    """A 12 MiB region (3 chunks) of nothing but pointers into one region: one reason, at
    the first word; the repeated chunk is read once."""
    size = 12 << 20
    target = extra_base(3)

    def add_table(m, cap_dir):
        chunk = target.to_bytes(8, "little") * ((4 << 20) // 8)
        h = _put(cap_dir, chunk)
        m["regions"].append({"id": 4, "base": EXTRA_BASE + (64 << 20), "size": size, "api": "cuMemAlloc_v2",
                             "kind": "device", "written": False, "zero_fraction": 0.0, "pre": [h] * 3, "post": [h] * 3})

    root = derive(tmp_path, extra=2, pointers=[(0, 0, EXTRA_BASE + (64 << 20) + 4096)], manifest_edit=add_table)
    c = compute_closure(Capture.open(root))
    assert c.kept == [0, 1, 3, 4]
    assert c.reasons[4] == "pointer at region 0+0x0" and c.reasons[3] == "pointer at region 4+0x0"


def test_a_pointer_in_a_later_chunk_is_named_at_its_offset_in_the_region(tmp_path):
    """A 12 MiB region (3 chunks) whose first two chunks are zero and whose last holds one
    pointer at 0x40: the reason names the pointer's offset in the region (8 MiB + 0x40),
    not its offset in the chunk that holds it."""
    size = 12 << 20
    table = EXTRA_BASE + (64 << 20)

    def add_table(m, cap_dir):
        h = _put(cap_dir, bytes(0x40) + extra_base(3).to_bytes(8, "little") + bytes((4 << 20) - 0x48))
        m["regions"].append({"id": 4, "base": table, "size": size, "api": "cuMemAlloc_v2", "kind": "device",
                             "written": False, "zero_fraction": 0.0, "pre": [None, None, h], "post": [None, None, h]})

    c = compute_closure(Capture.open(derive(tmp_path, extra=2, pointers=[(0, 0, table)], manifest_edit=add_table)))
    assert c.kept == [0, 1, 3, 4]
    assert c.reasons[3] == f"pointer at region 4+{(8 << 20) + 0x40:#x}" == "pointer at region 4+0x800040"


def test_a_single_launchs_closure_does_not_follow_a_pointer_it_wrote(tmp_path):
    """One launch reads only pre-states: a pointer the kernel stored in its output (the
    post-state) is nothing it followed, so the region it names is dropped (twenty-first
    audit: `post or region.post != region.pre` scanned a written region's post-state)."""
    def store_pointer(m, cap_dir):
        r = next(r for r in m["regions"] if r["id"] == 1)
        out = bytearray(b"\x02" * r["size"])
        out[0x10:0x18] = extra_base(2).to_bytes(8, "little")
        r["post"], r["written"] = [_put(cap_dir, bytes(out))], True

    c = compute_closure(Capture.open(derive(tmp_path, extra=2, manifest_edit=store_pointer)))
    assert c.kept == [0, 1] and c.reasons == {0: "argument 1", 1: "argument 2"}
    assert c.unreached_written == [] and c.refusal == ""


def test_written_region_outside_the_closure_is_refused(tmp_path, no_validation):
    root = derive(tmp_path, extra=2, written=(3,))
    c = compute_closure(Capture.open(root))
    assert [r.id for r in c.unreached_written] == [3]
    assert "region 3" in c.refusal and "wrote" in c.refusal
    before = tree(root)
    report = prune_reproducer(root)
    assert report.kept == "full" and report.reason == c.refusal and not report.validated
    after = tree(root)
    record = json.loads(after.pop("reproducer.json"))["prune"]
    before.pop("reproducer.json")
    assert after == before, "only reproducer.json may change when the full reproducer is kept"
    assert record["kept"] == "full" and "region 3" in record["reason"]
    assert siblings(root) == ["repro"]


def test_corrupt_chunk_of_a_kept_region_is_an_error(tmp_path):
    root = derive(tmp_path, extra=1, pointers=[(0, 0, extra_base(2))])
    cap = Capture.open(root)
    blob = cap.blob_path(cap.regions[2].pre[0])
    blob.write_bytes(b"\x02" * EXTRA_SIZE)
    with pytest.raises(KerncapError, match="does not match its hash"):
        compute_closure(Capture.open(root))


# -- writing ---------------------------------------------------------------------------------


def test_write_pruned_is_a_complete_reproducer_sharing_blobs(tmp_path):
    root = derive(tmp_path, extra=3, pointers=[(0, 0x10, extra_base(2))], written=(2,))
    (root / "source").mkdir()
    (root / "source" / "k.cu").write_text("// kernel\n")
    os.symlink("k.cu", root / "source" / "link.cu")
    before = tree(root)
    cap = Capture.open(root)
    c = compute_closure(cap)
    out = write_pruned(root, c, tmp_path / "pruned")
    assert tree(root) == before, "the original must not change"
    assert siblings(root) == ["pruned", "repro"], "no partial directory left"

    pruned = Capture.open(out)
    pruned.verify()
    assert [r.id for r in pruned.regions] == [0, 1, 2]
    assert [p.region for p in pruned.params] == [p.region for p in cap.params]
    kept = [r for r in cap.regions if r.id in c.kept]
    assert {p.name for p in (out / "capture" / "blobs").iterdir()} == {
        f"{h}.bin" for r in kept for h in (*r.pre, *r.post) if h is not None}
    for h in pruned.iter_blobs():
        assert pruned.blob_path(h).stat().st_ino == cap.blob_path(h).stat().st_ino, "blobs must be hard links"
    m = pruned.manifest
    assert m["provenance"]["bytes"]["logical"] == c.logical_pruned == pruned.logical_bytes
    assert m["provenance"]["bytes"]["stored"] == c.stored_pruned == pruned.stored_bytes
    assert m["provenance"]["bytes"]["snapshotted"] == cap.provenance["bytes"]["snapshotted"]
    rec = m["pruned"]
    assert rec["from"] == str(root) and rec["regions_full"] == 5 and rec["regions_dropped"] == 2
    assert (rec["logical_full"], rec["stored_full"]) == (c.logical_full, c.stored_full)
    assert rec["reasons"] == {"0": "argument 1", "1": "argument 2", "2": "pointer at region 0+0x10"}
    for rel in ("reproducer.json", "capture/interposer.log", f"capture/{cap.kernel['module']['cubin']}", "source/k.cu"):
        assert (out / rel).read_bytes() == (root / rel).read_bytes()
        assert (out / rel).stat().st_ino != (root / rel).stat().st_ino, f"{rel} must be a copy, not a link"
    assert os.readlink(out / "source" / "link.cu") == "k.cu"
    # Without its manifest's dropped regions, the same reader accepts the gaps in the ids.
    assert compute_closure(pruned).kept == [0, 1, 2]


def test_write_pruned_copies_where_hard_links_are_impossible(tmp_path, monkeypatch):
    root = derive(tmp_path, extra=2)
    c = compute_closure(Capture.open(root))

    def no_link(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link", str(src))

    monkeypatch.setattr(os, "link", no_link)
    out = write_pruned(root, c, tmp_path / "pruned")
    pruned = Capture.open(out)
    pruned.verify()
    for h in pruned.iter_blobs():
        assert pruned.blob_path(h).stat().st_ino != Capture.open(root).blob_path(h).stat().st_ino


def test_write_pruned_leaves_nothing_on_failure(tmp_path, monkeypatch):
    root = derive(tmp_path, extra=2)
    c = compute_closure(Capture.open(root))
    with pytest.raises(KerncapError, match="already exists"):
        write_pruned(root, c, root)
    with pytest.raises(KerncapError, match="inside the reproducer"):
        write_pruned(root, c, root / "sub")

    def full_disk(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(os, "link", full_disk)
    with pytest.raises(KerncapError, match="No space left") as exc:
        write_pruned(root, c, tmp_path / "pruned")
    assert "original is unchanged" in exc.value.hint
    assert siblings(root) == ["repro"]


# -- prune_reproducer -------------------------------------------------------------------------


@pytest.mark.parametrize("src", REAL, ids=["axpy_small", "demo"])
def test_real_capture_has_nothing_to_drop(tmp_path, src, no_validation):
    root = tmp_path / "repro"
    shutil.copytree(src, root, symlinks=True)
    manifest = (root / "capture" / "manifest.json").read_bytes()
    report = prune_reproducer(root)
    assert report.kept == "full" and report.reason == NOTHING_TO_DROP and report.ratio == 1.0
    assert report.regions_full == report.regions_pruned == len(Capture.open(src).regions)
    assert (root / "capture" / "manifest.json").read_bytes() == manifest
    assert json.loads((root / "reproducer.json").read_text())["prune"]["reason"] == NOTHING_TO_DROP
    assert "kept the full reproducer" in report.summary() and NOTHING_TO_DROP in report.summary()


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_validated_prune_replaces_the_reproducer(tmp_path, validated, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(prune_mod, "_exchange", lambda a, b: False)
    root = derive(tmp_path, extra=3, pointers=[(0, 0x10, extra_base(2))])
    report = prune_reproducer(root)
    assert report.kept == "pruned" and report.validated and report.reason == ""
    assert validated == [tmp_path / f"repro.prune-{os.getpid()}"], "validated before the swap, next to it"
    assert siblings(root) == ["repro"], "no staged or full copy left behind"
    pruned = Capture.open(root)
    pruned.verify()
    assert [r.id for r in pruned.regions] == [0, 1, 2] and pruned.manifest["pruned"]["regions_dropped"] == 2
    assert (report.regions_full, report.regions_pruned) == (5, 3)
    assert report.stored_pruned == pruned.stored_bytes and report.logical_pruned == pruned.logical_bytes
    record = json.loads((root / "reproducer.json").read_text())
    assert record["prune"]["kept"] == "pruned" and record["prune"]["validated"] is True
    assert record["kerncap_version"]  # the rest of reproducer.json is kept
    assert set(report.seconds) == {"closure", "write", "validate"}
    assert report.summary().startswith("pruned 5 -> 3 regions") and "validated byte-exact" in report.summary()
    # Once pruned, nothing more to drop, and the record of the prune stays.
    again = prune_reproducer(root)
    assert again.kept == "full" and again.reason == NOTHING_TO_DROP
    assert json.loads((root / "reproducer.json").read_text())["prune"]["kept"] == "pruned"



@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_a_reproducer_named_through_a_link_is_pruned_where_the_link_leads(tmp_path, validated, monkeypatch,
                                                                         exchange):
    """`kerncap prune LINK`: the directory the link leads to is replaced by its pruned form
    (staged and validated beside it), and the link stays a link to it."""
    if not exchange:
        monkeypatch.setattr(prune_mod, "_exchange", lambda a, b: False)
    root = derive(tmp_path, extra=3, pointers=[(0, 0x10, extra_base(2))])
    link = tmp_path / "link"
    link.symlink_to("repro", target_is_directory=True)
    report = prune_reproducer(link)
    assert report.kept == "pruned" and report.validated and report.path == root and report.output == root
    assert validated == [tmp_path / f"repro.prune-{os.getpid()}"]
    assert link.is_symlink() and os.readlink(link) == "repro"
    assert siblings(root) == ["link", "repro"], "no staged, full or moved link left behind"
    assert [r.id for r in Capture.open(root).regions] == [0, 1, 2]
    assert json.loads((root / "reproducer.json").read_text())["prune"]["kept"] == "pruned"


def test_replay_error_keeps_the_full_reproducer(tmp_path, monkeypatch):
    root = derive(tmp_path, extra=2)
    before = tree(root)

    def faults(*a, **k):
        raise KerncapError("cuStreamSynchronize on kernel _Z12axpy_inplacefPKfPfi failed: "
                           "CUDA_ERROR_ILLEGAL_ADDRESS (700) (sticky: this replay process is finished)")

    monkeypatch.setattr(prune_mod, "_validate", faults)
    report = prune_reproducer(root)
    assert report.kept == "full" and "CUDA_ERROR_ILLEGAL_ADDRESS" in report.reason and "dropped" in report.reason
    after = tree(root)
    assert json.loads(after.pop("reproducer.json"))["prune"]["reason"] == report.reason
    before.pop("reproducer.json")
    assert after == before and siblings(root) == ["repro"]


def test_mismatch_keeps_the_full_reproducer(tmp_path, monkeypatch):
    root = derive(tmp_path, extra=2)
    check = RegionCheck(kind="region", id=1, name="region 1", base=0, size=16384, dtype=None, mismatched_bytes=12,
                        mismatched_elements=None, max_abs_err=None, max_rel_err=None, first_mismatches=[],
                        unexpected_write=False)
    monkeypatch.setattr(prune_mod, "_validate",
                        lambda *a, **k: ValidationResult(passed=False, mode="exact", regions=[check]))
    report = prune_reproducer(root)
    assert report.kept == "full" and "region 1: 12 bytes differ" in report.reason
    assert len(Capture.open(root).regions) == 4 and siblings(root) == ["repro"]


def test_no_gpu_is_an_error_that_changes_nothing(tmp_path, monkeypatch):
    root = derive(tmp_path, extra=2)
    before = tree(root)

    def no_gpu(*a, **k):
        raise GpuUnavailable("no CUDA GPU available: cuInit failed: CUDA_ERROR_NO_DEVICE (100)")

    monkeypatch.setattr(prune_mod, "_validate", no_gpu)
    with pytest.raises(KerncapError) as exc:
        prune_reproducer(root)
    assert "cannot validate the pruned reproducer" in exc.value.message and "NO_DEVICE" in exc.value.message
    assert "--no-validate" in exc.value.hint and "GPU" in exc.value.hint
    assert tree(root) == before and siblings(root) == ["repro"]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine would really validate")
def test_without_gpu_or_replay_core_validation_says_so(tmp_path):
    root = derive(tmp_path, extra=2)
    before = tree(root)
    with pytest.raises(KerncapError) as exc:
        prune_reproducer(root, timeout=120)
    assert "--no-validate" in exc.value.hint
    assert tree(root) == before and siblings(root) == ["repro"]


def test_interrupted_validation_leaves_the_original(tmp_path, monkeypatch):
    root = derive(tmp_path, extra=2)
    before = tree(root)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(prune_mod, "_validate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prune_reproducer(root)
    assert tree(root) == before and siblings(root) == ["repro"]


def test_failed_swap_leaves_the_original(tmp_path, validated, monkeypatch):
    root = derive(tmp_path, extra=2)
    before = tree(root)

    def denied(a, b):
        raise OSError(errno.EACCES, "Permission denied", str(b))

    monkeypatch.setattr(prune_mod, "_exchange", denied)
    with pytest.raises(KerncapError, match="could not be replaced") as exc:
        prune_reproducer(root)
    assert "unchanged" in exc.value.hint
    assert tree(root) == before and siblings(root) == ["repro"]


def test_no_validate_writes_a_sibling_and_leaves_the_original(tmp_path, no_validation):
    root = derive(tmp_path, extra=2)
    before = tree(root)
    report = prune_reproducer(root, validate=False)
    out = tmp_path / "repro-pruned"
    assert report.kept == "pruned" and not report.validated and report.output == out
    assert "NOT validated" in report.summary() and f"kerncap validate {out}" in report.summary()
    assert tree(root) == before
    assert [r.id for r in Capture.open(out).regions] == [0, 1]
    assert json.loads((out / "reproducer.json").read_text())["prune"]["validated"] is False
    with pytest.raises(KerncapError, match="already exists"):
        prune_reproducer(root, validate=False)
    custom = prune_reproducer(root, validate=False, output=tmp_path / "elsewhere")
    assert custom.output == tmp_path / "elsewhere" and Capture.open(custom.output).regions


def test_report_json_round_trip_and_ratio():
    r = PruneReport(path=Path("/r"), kept="pruned", reason="", regions_full=412, regions_pruned=3,
                    logical_full=80 << 30, logical_pruned=2 << 30, stored_full=20 << 30, stored_pruned=(20 << 30) // 16,
                    seconds={"closure": 0.5, "write": 0.1, "validate": 2.1}, validated=True, output=Path("/r"))
    assert r.ratio == 16.0
    assert r.summary() == ("pruned 412 -> 3 regions (80.0 GiB -> 2.0 GiB logical), 20.0 GiB -> 1.2 GiB stored "
                           "(16.0x smaller), validated byte-exact in 2.1 s")
    d = json.loads(json.dumps(r.to_json()))
    assert PruneReport.from_json(d, "/r").summary() == r.summary()
    r.validated, r.output = False, Path("/r-pruned")  # not validated: the summary names where it is
    back = PruneReport.from_json(json.loads(json.dumps(r.to_json())), "/r")
    assert back.output == Path("/r-pruned") and back.summary() == r.summary()
    assert "into /r-pruned; NOT validated: run `kerncap validate /r-pruned`" in back.summary()
    r.stored_pruned = 0
    assert r.ratio == float("inf") and r.to_json()["ratio"] == "inf" and "nothing left to store" in r.summary()


# -- CLI and extract ---------------------------------------------------------------------------


def test_cli_prune_no_validate_and_info(tmp_path, capsys, no_validation):
    root = derive(tmp_path, extra=2, pointers=[(0, 0x10, extra_base(3))])
    assert main(["prune", str(root), "--no-validate"]) == 0
    out = capsys.readouterr().out
    assert "pruned 4 -> 3 regions" in out and "NOT validated" in out and "pointer at region 0+0x10" in out
    pruned = tmp_path / "repro-pruned"
    assert main(["prune", str(root), "--no-validate"]) == 3
    err = capsys.readouterr().err
    assert "kerncap prune: error:" in err and "already exists" in err and "hint:" in err

    assert main(["info", str(pruned)]) == 0
    info = capsys.readouterr().out
    assert f"pruned      from {root}: held 4 regions (" in info and "); 1 dropped" in info
    assert "kept because" in info and "pointer at region 0+0x10" in info
    assert "prune       pruned 4 -> 3 regions" in info and "NOT validated" in info
    # the record read back names the reproducer to validate, as the prune itself said
    assert f"into {pruned}; NOT validated: run `kerncap validate {pruned}`" in info
    assert main(["info", str(pruned), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pruned"]["regions_dropped"] == 1

    assert main(["prune", str(root), "--no-validate", "-o", str(tmp_path / "j"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["regions_pruned"] == 3
    assert main(["prune", str(root), "-o", str(tmp_path / "k")]) == 2
    assert "--output needs --no-validate" in capsys.readouterr().err


def test_cli_prune_real_capture_keeps_it(tmp_path, capsys, no_validation):
    root = tmp_path / "axpy"
    shutil.copytree(AXPY, root)
    assert main(["prune", str(root)]) == 0
    assert "kept the full reproducer (2 regions" in capsys.readouterr().out
    assert main(["info", str(root)]) == 0
    assert "prune       kept the full reproducer" in capsys.readouterr().out


def test_extract_prune(publish, tmp_path, validated):

    derived = derive(tmp_path, extra=2, name="derived")
    out = tmp_path / "work" / "repro"
    result, _ = publish(out, spec={"capture": str(derived / "capture")}, prune=True)
    assert result.prune is not None and result.prune.kept == "pruned" and result.prune.validated
    assert [r.id for r in result.capture.regions] == [0, 1], "result.capture is the pruned capture"
    assert sorted(p.name for p in out.parent.iterdir()) == ["repro"]
    assert "prune       pruned 4 -> 2 regions" in api.format_extract(result)


def test_extract_prune_failure_is_a_note(publish, tmp_path, monkeypatch):
    def no_gpu(*a, **k):
        raise GpuUnavailable("no CUDA GPU available: cuInit failed")

    monkeypatch.setattr(prune_mod, "_validate", no_gpu)
    derived = derive(tmp_path, extra=2, name="derived")
    out = tmp_path / "repro"
    result, _ = publish(out, spec={"capture": str(derived / "capture")}, prune=True)
    assert result.prune is None and any(n.startswith("not pruned: cannot validate") for n in result.notes)
    assert len(result.capture.regions) == 4 and (out / "capture" / "manifest.json").is_file()
