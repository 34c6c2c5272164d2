"""Pruned closures replayed for real: the closure of captures whose kernels reach memory
only through pointer tables in device memory, validated byte-exact on the GPU before
the pruned reproducer replaces the full one. Each test prunes a COPY of the session's
capture, so the other GPU tests keep the full reproducers."""

from __future__ import annotations

import json
import shutil

import pytest

from .apps import APPS, MOE_WEIGHTS, app_env

pytestmark = pytest.mark.gpu

POINTER_TABLE_TABLES = ("in_table", "out_table")
POINTER_TABLE_BUFFERS = tuple(f"{kind}{b}" for kind in ("in", "out") for b in range(4))


def copy_of(captures, app: str, tmp_path):
    got = captures.get(app)
    root = tmp_path / app
    shutil.copytree(got.reproducer, root, symlinks=True)
    return got, root


def revalidate(root) -> None:
    """The reproducer now at `root` (pruned and swapped in) replays byte-exact."""
    from kerncap.replay.client import ReplayClient

    with ReplayClient(root) as rc:
        result = rc.validate()
    bad = [f"{c.name}: {c.mismatched_bytes} bytes" for c in result.failures]
    assert result.passed, f"{root} does not validate after pruning: {bad}"


def test_pointer_table_closure_reaches_buffers_through_the_tables(captures, tmp_path):
    from kerncap.prune.pruner import NOTHING_TO_DROP, compute_closure, prune_reproducer
    from kerncap.reproducer.format import Capture

    got, root = copy_of(captures, "pointer_table", tmp_path)
    closure = compute_closure(Capture.open(root))
    tables = {got.region_of(k).id for k in POINTER_TABLE_TABLES}
    buffers = {got.region_of(k).id for k in POINTER_TABLE_BUFFERS}
    assert tables | buffers <= set(closure.kept), f"closure {closure.kept} misses some of {sorted(tables | buffers)}"
    for rid in tables:
        assert closure.reasons[rid].startswith("argument "), closure.reasons
    for rid in buffers:  # reached only through the tables
        assert any(closure.reasons[rid].startswith(f"pointer at region {t}+") for t in tables), closure.reasons

    # The app allocates the 8 buffers and the 2 tables and nothing else: every region is
    # reachable, so there is nothing to drop and the full reproducer stays as it is.
    assert len(closure.kept) == closure.regions_full == len(tables | buffers) == 10, closure.reasons
    report = prune_reproducer(root)
    print(f"pointer_table: {report.summary()}")
    assert report.kept == "full" and report.reason == NOTHING_TO_DROP, report.reason
    assert report.regions_pruned == report.regions_full == 10


def test_pointer_table_prune_drops_an_unreachable_region_and_validates(captures, tmp_path):
    """The same capture plus one region nothing points to (a copy of in0's bytes far above
    every real region): the pruned reproducer drops it, replays byte-exact, and replaces
    the directory."""
    from kerncap.prune.pruner import prune_reproducer
    from kerncap.reproducer.format import Capture

    got, root = copy_of(captures, "pointer_table", tmp_path)
    manifest_path = root / "capture" / "manifest.json"
    m = json.loads(manifest_path.read_text())
    in0 = next(r for r in m["regions"] if r["id"] == got.region_of("in0").id)
    top = max(r["base"] + r["size"] for r in m["regions"])
    decoy = {**in0, "id": max(r["id"] for r in m["regions"]) + 1, "base": (top + (1 << 30)) & ~((1 << 30) - 1),
             "written": False}
    decoy["post"] = list(decoy["pre"])
    m["regions"].append(decoy)
    manifest_path.write_text(json.dumps(m, indent=1))
    full = Capture.open(root)

    report = prune_reproducer(root)
    print(f"pointer_table + decoy: {report.summary()}")
    assert report.kept == "pruned", report.reason
    assert report.validated and report.regions_pruned == report.regions_full - 1
    pruned = Capture.open(root)
    assert decoy["id"] not in {r.id for r in pruned.regions}
    assert {r.id for r in pruned.regions} == {r.id for r in full.regions} - {decoy["id"]}
    assert json.loads((root / "reproducer.json").read_text())["prune"]["kept"] == "pruned"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pointer_table"], "no staged copy left"
    revalidate(root)


def test_triton_moe_prune_keeps_the_weights_behind_the_table(captures, tmp_path):
    from kerncap.core.units import human_bytes
    from kerncap.prune.pruner import compute_closure, prune_reproducer
    from kerncap.reproducer.format import Capture

    got, root = copy_of(captures, "triton_moe", tmp_path)
    closure = compute_closure(Capture.open(root))
    needed = {k: got.region_of(k).id for k in ("x", "table", "routing", "out", *MOE_WEIGHTS)}
    missing = {k: rid for k, rid in needed.items() if rid not in closure.kept}
    assert not missing, f"the closure misses {missing}; reasons: {closure.reasons}"

    report = prune_reproducer(root)
    logical_ratio = report.logical_full / max(report.logical_pruned, 1)
    print(f"triton_moe: {report.summary()}")
    print(f"triton_moe: logical {human_bytes(report.logical_full)} -> {human_bytes(report.logical_pruned)} "
          f"({logical_ratio:.1f}x), stored {human_bytes(report.stored_full)} -> {human_bytes(report.stored_pruned)} "
          f"({report.ratio:.1f}x); closure {report.seconds['closure']:.2f} s, write {report.seconds['write']:.2f} s, "
          f"validate {report.seconds['validate']:.2f} s")
    for rid, why in sorted(report.reasons.items()):
        print(f"  region {rid}: {why}")
    assert report.kept == "pruned", report.reason
    assert report.validated and report.regions_pruned <= report.regions_full
    revalidate(root)


def test_extract_with_prune(testapps_build, tmp_path):
    """`extract(..., prune=True)` end to end on the pointer_table app."""
    from kerncap.capture.extract import extract
    from kerncap.prune.pruner import NOTHING_TO_DROP

    spec = APPS["pointer_table"]
    result = extract(spec.kernel, spec.command(testapps_build), output=tmp_path / "repro", match=spec.match,
                     timeout=spec.timeout, env=app_env(spec, tmp_path), prune=True)
    assert result.prune is not None, result.notes
    print(f"extract --prune pointer_table: {result.prune.summary()}")
    # Every region of this app is reachable (the test above): pruning keeps the full capture.
    assert result.prune.kept == "full" and result.prune.reason == NOTHING_TO_DROP, result.prune.reason
    assert len(result.capture.regions) == result.prune.regions_pruned == 10


def test_kernel_writing_through_an_invisible_pointer_is_refused(testapps_build, tmp_path):
    """testapps/cuda/hidden_write.cu: the kernel finds its output through a pointer
    XOR-masked with a key, a value no scan of the arguments or of memory can recognise.
    The written region is outside the closure, so prune refuses and keeps the full
    reproducer, which still replays byte-exact."""
    from kerncap.capture.extract import extract
    from kerncap.prune.pruner import compute_closure, prune_reproducer
    from kerncap.reproducer.format import Capture

    from .apps import HIDDEN_WRITE

    spec = HIDDEN_WRITE
    result = extract(spec.kernel, spec.command(testapps_build), output=tmp_path / "repro", match=spec.match,
                     timeout=spec.timeout, env=app_env(spec, tmp_path))
    report_keys = json.loads((tmp_path / "report.json").read_text())
    cap = Capture.open(result.reproducer_dir)
    out = cap.region_of(report_keys["out"])
    assert out is not None and out.written, "the hidden output was not captured as written"
    closure = compute_closure(cap)
    assert out.id not in closure.kept and closure.refusal, closure.reasons
    report = prune_reproducer(result.reproducer_dir)
    print(f"hidden_write: {report.summary()}")
    assert report.kept == "full" and "found that memory some other way" in report.reason, report.reason
    assert json.loads((result.reproducer_dir / "reproducer.json").read_text())["prune"]["kept"] == "full"
    revalidate(result.reproducer_dir)


def test_many_allocs_extract_prune_drops_the_unreached_allocations(testapps_build, tmp_path):
    """`extract(..., prune=True)` at scale: 200k live allocations, of which the kernel reaches
    4096 through a device pointer table; the rest is dropped and the pruned reproducer
    validates byte-exact."""
    from kerncap.capture.extract import extract

    from . import apps

    spec = getattr(apps, "MANY_ALLOCS", None)
    if spec is None:
        pytest.skip("apps.MANY_ALLOCS (testapps/cuda/many_allocs.cu) is not in this checkout")
    result = extract(spec.kernel, spec.command(testapps_build), output=tmp_path / "repro", match=spec.match,
                     timeout=spec.timeout, env=app_env(spec, tmp_path), prune=True)
    report = result.prune
    assert report is not None, result.notes
    print(f"many_allocs: {report.summary()}; closure {report.seconds['closure']:.2f} s, "
          f"write {report.seconds['write']:.2f} s, validate {report.seconds['validate']:.2f} s")
    assert report.kept == "pruned", report.reason
    assert report.validated and report.regions_full >= 200_000
    entries = 4096
    assert entries < report.regions_pruned <= entries + 16, sorted(report.reasons.items())[:20]
    capture = result.capture
    for key in ("table", "words", "out"):
        region = capture.region_of(json.loads((tmp_path / "report.json").read_text())[key])
        assert region is not None and region.id in report.reasons, key
    revalidate(result.reproducer_dir)
