"""`kerncap apply` over a stand-in driver (tests/fixtures/apply): the interposer in apply
mode substitutes the variant's kernel, mirrors the module's globals, refuses what it
cannot substitute (the app's own kernel runs then), selects launches with --dispatch, and
--check names the first launch whose outputs differ. Needs the native build
(KERNCAP_INJECT_LIB, docs/testing.md), but for the last test: run_check over the runs'
reports alone."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

FIX = Path(__file__).resolve().parent / "fixtures" / "apply"
KERNEL = "_Z4axpyPfPKfi"
CC = shutil.which("gcc") or shutil.which("cc")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    from kerncap.core.native import entry_library, inject_library
    from kerncap.errors import KerncapError

    try:
        entry, inject = entry_library(), inject_library()
    except KerncapError:
        entry = inject = None
    if entry is None or CC is None:
        pytest.skip("needs the native build (KERNCAP_INJECT_LIB) and a C compiler")
    d = tmp_path_factory.mktemp("apply")
    subprocess.run([CC, "-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", str(FIX / "fake_cuda_apply.c"),
                    "-o", str(d / "libcuda.so.1"), "-ldl"], check=True)
    subprocess.run([CC, "-O1", str(FIX / "apply_app.c"), "-o", str(d / "app"), "-ldl"], check=True)
    return {"dir": d, "entry": entry, "inject": inject, "app": d / "app"}


def _variant(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "variant.cubin"
    p.write_bytes(text.encode() + b"\0")
    return p


def _run(built, tmp_path: Path, launches: int = 5, **settings: str) -> tuple[dict, str, bytes]:
    out = tmp_path / "run"
    out.mkdir(exist_ok=True)
    for f in out.iterdir():
        f.unlink()
    env = {**os.environ, "LD_PRELOAD": str(built["entry"]), "LD_LIBRARY_PATH": str(built["dir"]),
           "KERNCAP_MODE": "apply", "KERNCAP_OUT": str(out), "KERNCAP_KERNEL": KERNEL, "KERNCAP_MATCH": "exact",
           "KERNCAP_APPLY_IDENTIFY": "name", "KERNCAP_APPLY_GLOBALS": "scale:4", **settings}
    y = tmp_path / "y.bin"
    p = subprocess.run([str(built["app"]), str(built["inject"]), str(launches), str(y)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    (report,) = out.glob("apply-*.json")
    return json.loads(report.read_text()), p.stdout, y.read_bytes()


def test_every_launch_runs_the_variant_with_the_apps_globals(built, tmp_path):
    """All 5 launches ran the variant's kernel (the stand-in counts them per module), with
    `scale` copied from the app's module: y is what the app's own kernel makes."""
    base, out0, y0 = _run(built, tmp_path)
    assert base["launches"] == 5 and base["substituted"] == 0 and "ran plain=5" in out0
    rep, out, y = _run(built, tmp_path, KERNCAP_APPLY_CUBIN=str(_variant(tmp_path, "FAKEMOD impl=fast")))
    assert rep["refusal"] is None and rep["errors"] == []
    assert rep["launches"] == 5 and rep["substituted"] == 5
    assert "ran fast=5" in out and "plain" not in out
    assert y == y0  # scale mirrored: without it the variant would scale by 0


def test_a_global_the_kernel_writes_is_copied_back_for_the_app_to_read(built, tmp_path):
    """The stand-in's axpy increments its module's __device__ `count`, which the app reads
    after its 5 launches. Copied in and back (KERNCAP_APPLY_GLOBALS_BACK) the app reads 5,
    as it does as is, also when only launches 1 and 3 run the variant; copied in only, the
    variant's increments stay in its own module and the app reads 0."""
    fast = str(_variant(tmp_path, "FAKEMOD impl=fast"))
    both = {"KERNCAP_APPLY_GLOBALS": "scale:4,count:4", "KERNCAP_APPLY_CUBIN": fast}
    assert "count=5" in _run(built, tmp_path, KERNCAP_APPLY_GLOBALS="scale:4,count:4")[1]
    rep, out, _ = _run(built, tmp_path, KERNCAP_APPLY_GLOBALS_BACK="count", **both)
    assert rep["substituted"] == 5 and rep["errors"] == [] and "count=5" in out, out
    rep, out, _ = _run(built, tmp_path, KERNCAP_APPLY_GLOBALS_BACK="count", KERNCAP_APPLY_DISPATCH="1,3", **both)
    assert rep["substituted"] == 2 and "count=5" in out, out
    assert "count=0" in _run(built, tmp_path, **both)[1]


def test_dispatch_selects_launches(built, tmp_path):
    rep, out, _ = _run(built, tmp_path, KERNCAP_APPLY_CUBIN=str(_variant(tmp_path, "FAKEMOD impl=fast")),
                       KERNCAP_APPLY_DISPATCH="1,3")
    assert rep["substituted"] == 2 and rep["not_selected"] == 3
    assert "ran plain=3" in out and "ran fast=2" in out


def test_bench_switch_holds_the_redirect_back_in_bench_processes_only(built, tmp_path):
    """bench/paired.py's apply row: kerncap_bench_passthrough(3) keeps the armed apply path
    (the launch identified and counted) but not the redirect; 0 substitutes again. Only a
    process started with KERNCAP_BENCH_PASSTHROUGH=1 has the switch."""
    variant = str(_variant(tmp_path, "FAKEMOD impl=fast"))
    rep, out, _ = _run(built, tmp_path, 6, KERNCAP_APPLY_CUBIN=variant, KERNCAP_BENCH_PASSTHROUGH="1",
                       KC_TEST_HOLD_ODD="1")
    assert "switch=0" in out
    assert rep["launches"] == 6 and rep["substituted"] == 3 and rep["not_selected"] == 3
    assert "ran plain=3" in out and "ran fast=3" in out
    rep, out, _ = _run(built, tmp_path, 6, KERNCAP_APPLY_CUBIN=variant, KC_TEST_HOLD_ODD="1")
    assert "switch=-1" in out  # refused: every launch substituted
    assert rep["substituted"] == 6 and "ran fast=6" in out


@pytest.mark.parametrize("image,kind,words", [
    ("FAKEMOD impl=fast nokernel", "variant_lacks_kernel", ["has no kernel", KERNEL, "CUDA_ERROR_NOT_FOUND"]),
    ("FAKEMOD impl=fast twoparams", "param_layout", ["[0+8, 8+8]", "[0+8, 8+8, 16+4]"]),
    ("FAKEMOD impl=fast bigscale", "global_size", ["global scale is 8 bytes", "4"]),
    ("FAKEMOD impl=fast arch", "variant_load", ["CUDA_ERROR_NO_BINARY_FOR_GPU", "another architecture"]),
])
def test_refusals_leave_the_app_running_its_own_kernel(built, tmp_path, image, kind, words):
    rep, out, _ = _run(built, tmp_path, KERNCAP_APPLY_CUBIN=str(_variant(tmp_path, image)))
    assert rep["refusal"]["kind"] == kind
    for w in words:
        assert w in rep["refusal"]["message"]
    assert rep["substituted"] == 0 and "ran plain=5" in out and "fast" not in out


def test_check_fingerprints_name_the_third_launch(built, tmp_path):
    """A variant that differs only from its third launch on: launches 0 and 1 fingerprint
    alike, launch 2 (the 3rd) first differs, in parameter 0 (y)."""
    base, _, _ = _run(built, tmp_path, KERNCAP_APPLY_CHECK="1", KERNCAP_APPLY_OUTPUTS="0")
    var, _, _ = _run(built, tmp_path, KERNCAP_APPLY_CHECK="1", KERNCAP_APPLY_OUTPUTS="0",
                     KERNCAP_APPLY_CUBIN=str(_variant(tmp_path, "FAKEMOD impl=late3")))
    a = [(f["launch"], f["param"], f["bytes"], f["hash"]) for f in base["fingerprints"]]
    b = [(f["launch"], f["param"], f["bytes"], f["hash"]) for f in var["fingerprints"]]
    assert [x[:3] for x in a] == [(i, 0, 4096) for i in range(5)] == [x[:3] for x in b]
    assert [x[3] == y[3] for x, y in zip(a, b)] == [True, True, False, False, False]


def test_engine_check_reports_launch_2_and_the_bytes(built, tmp_path, monkeypatch):
    """kerncap.capture.apply.run_check over the same app: the first differing launch, its
    parameter and how many bytes differ (from both runs' dumps of that launch)."""
    from kerncap.capture.apply import Apply, Target, run_check

    monkeypatch.setenv("LD_LIBRARY_PATH", str(built["dir"]))
    target = Target(kernel=KERNEL, demangled="axpy(float*, float const*, int)", sha256="0" * 64,
                    globals=[("scale", 4)], outputs=[0])
    y = tmp_path / "y.bin"
    cmd = [str(built["app"]), str(built["inject"]), "5", str(y)]
    bad = Apply(root=tmp_path, target=target, variant=_variant(tmp_path, "FAKEMOD impl=late3"), command=cmd,
                identify="name", quiet=True)
    r = run_check(bad, compare_output=[str(y)])
    assert r.mismatch is not None and (r.mismatch.launch, r.mismatch.param) == (2, 0)
    # y[0]: 1.0f as is, 2.0f with the variant: 2 of its 4 bytes differ
    assert r.mismatch.bytes_differing == 2 and r.mismatch.bytes_compared == 4096
    assert "FAIL at launch 2 (the 3rd)" in r.text() and r.output_files == [str(y)]
    good = Apply(root=tmp_path, target=target, variant=tmp_path / "fast.cubin", command=cmd, identify="name",
                 quiet=True)
    good.variant.write_bytes(b"FAKEMOD impl=fast\0")
    ok = run_check(good, compare_output=[str(y)])
    assert ok.passed and "all 5 launches matched byte for byte" in ok.text()


def test_outputs_reached_through_a_table_are_compared_not_the_tables_addresses(built, tmp_path):
    """A kernel whose first parameter is a device table holding y's address (the GPU suite's
    pointer_table): the table's bytes are an address, which moves from run to run, so
    --check names the output as 0@0 (the buffer the pointer at +0 of parameter 0's buffer
    names) and fingerprints y itself: launches 0 and 1 alike, the third differs, and the
    dump of launch 2 is y's 4096 bytes, named for the pointer."""
    table = {"KC_TEST_TABLE": "1", "KERNCAP_APPLY_CHECK": "1", "KERNCAP_APPLY_OUTPUTS": "0@0"}
    base, _, _ = _run(built, tmp_path, **table)
    var, _, _ = _run(built, tmp_path, **table, KERNCAP_APPLY_DUMP_AT="2",
                      KERNCAP_APPLY_CUBIN=str(_variant(tmp_path, "FAKEMOD impl=late3 table")))
    assert base["errors"] == [] and var["errors"] == [] and var["substituted"] == 5
    keys = [(f["launch"], f["param"], f["via"], f["bytes"]) for f in base["fingerprints"]]
    assert keys == [(i, 0, 0, 4096) for i in range(5)]
    assert keys == [(f["launch"], f["param"], f["via"], f["bytes"]) for f in var["fingerprints"]]
    assert [f["hash"] == g["hash"] for f, g in zip(base["fingerprints"], var["fingerprints"])] == \
        [True, True, False, False, False]
    assert var["dumps"] == ["dump-2-p0+0.bin"]
    dump = (tmp_path / "run" / "dump-2-p0+0.bin").read_bytes()
    # y after the 3rd launch: 1 + 3 x 2i, and late3's +1 on y[0]
    assert list(struct.unpack("1024f", dump)) == [2.0] + [1.0 + 6 * i for i in range(1, 1024)]


def test_engine_check_names_a_tables_output_and_passes_a_faithful_variant(built, tmp_path, monkeypatch):
    """run_check with the output reached through the table: FAIL at launch 2 in the buffer
    the table names (2 of its 4096 bytes), and a variant that computes the same passes."""
    from kerncap.capture.apply import Apply, Target, run_check

    monkeypatch.setenv("LD_LIBRARY_PATH", str(built["dir"]))
    monkeypatch.setenv("KC_TEST_TABLE", "1")
    target = Target(kernel=KERNEL, demangled="axpy(float*, float const*, int)", sha256="0" * 64,
                    globals=[("scale", 4)], outputs=[], indirect=[(0, 0)])
    cmd = [str(built["app"]), str(built["inject"]), "5", str(tmp_path / "y.bin")]
    bad = Apply(root=tmp_path, target=target, variant=_variant(tmp_path, "FAKEMOD impl=late3 table"), command=cmd,
                identify="name", quiet=True)
    r = run_check(bad)
    m = r.mismatch
    assert m is not None and (m.launch, m.param, m.via) == (2, 0, 0), r
    assert (m.bytes_differing, m.bytes_compared) == (2, 4096)
    assert "FAIL at launch 2 (the 3rd): the buffer named at +0 of parameter 0's differs (2 of 4096 bytes" in r.text()
    good_cubin = tmp_path / "fast.cubin"
    good_cubin.write_bytes(b"FAKEMOD impl=fast table\0")
    target.indirect_left = 3  # pointers cut at MAX_INDIRECT: the pass says so
    ok = run_check(Apply(root=tmp_path, target=target, variant=good_cubin, command=cmd, identify="name", quiet=True))
    assert ok.passed and ok.compared == 5, ok.text()
    assert "3 more output pointer(s) found in tables were not compared (at most 64)" in ok.text()


def test_a_variant_that_points_the_table_elsewhere_is_compared_on_the_apps_buffer(built, tmp_path, monkeypatch):
    """A variant that computes the right values into a buffer of its own and points the
    table at it, leaving the app's y unchanged: the table is read before each launch, so
    the app's y is what is compared (FAIL at launch 0), and the changed pointer is named."""
    from kerncap.capture.apply import Apply, Target, run_check

    monkeypatch.setenv("LD_LIBRARY_PATH", str(built["dir"]))
    monkeypatch.setenv("KC_TEST_TABLE", "1")
    target = Target(kernel=KERNEL, demangled="axpy(float*, float const*, int)", sha256="0" * 64,
                    globals=[("scale", 4)], outputs=[], indirect=[(0, 0)])
    cmd = [str(built["app"]), str(built["inject"]), "5", str(tmp_path / "y.bin")]
    r = run_check(Apply(root=tmp_path, target=target, variant=_variant(tmp_path, "FAKEMOD impl=redirect table"),
                        command=cmd, identify="name", quiet=True))
    assert not r.passed and r.mismatch is not None and (r.mismatch.launch, r.mismatch.via) == (0, 0), r.text()
    assert any("was changed by the launch" in n for n in r.notes), r.notes


def test_a_capture_finds_the_outputs_its_parameters_tables_name(tmp_path, monkeypatch):
    """target_of: a pointer to a written region stored in an unwritten buffer a parameter
    points to is an output at (parameter, offset from the parameter's pointer); pointers to
    unwritten regions, and tables above MAX_TABLE bytes, are not."""
    from kerncap.capture import apply as apply_mod
    from kerncap.reproducer.format import Capture
    from test_prune import AXPY, derive, extra_base

    y = Capture.open(AXPY).regions[1]  # written: axpy's y, parameter 2
    root = derive(tmp_path, extra=2, written=(2,), pointers=[
        (0, 0x10, extra_base(2)),   # in x's buffer (parameter 1): region 2, written
        (0, 0x18, extra_base(3)),   # region 3, never written
        (0, 0x28, y.base + 64),     # inside y
    ])
    target = apply_mod.target_of(Capture.open(root))
    assert target.outputs == [2] and target.indirect == [(1, 0x10), (1, 0x28)] and target.indirect_left == 0
    # without --check nothing compares them: none looked for
    assert apply_mod.target_of(Capture.open(root), tables=False).indirect == []
    monkeypatch.setattr(apply_mod, "MAX_INDIRECT", 1)  # the cut is counted, for the check's note
    cut = apply_mod.target_of(Capture.open(root))
    assert cut.indirect == [(1, 0x10)] and cut.indirect_left == 1
    monkeypatch.undo()
    monkeypatch.setattr(apply_mod, "MAX_TABLE", 8 << 10)  # x's 16 KiB buffer is no table then
    assert apply_mod.target_of(Capture.open(root)).indirect == []
    monkeypatch.undo()
    # x's payload gone (apply without --check reads none): no output named through it, no error
    cap = Capture.open(root)
    cap.blob_path(cap.regions[0].pre[0]).unlink()
    assert apply_mod.target_of(cap).indirect == [] and apply_mod.target_of(cap).outputs == [2]


def test_only_the_globals_the_variants_build_recorded_are_copied(built, tmp_path, monkeypatch):
    """The variant's build records which module globals its kernel's PTX reaches
    (variants/<n>.reach.json); apply hands the interposer only those. Recorded with `scale`,
    the variant sees the app's scale (the app's own y); recorded without it, nothing is
    copied and the stand-in variant scales by its own, zero, `scale`."""
    from kerncap.capture.apply import Apply, Target, mirrored
    from kerncap.reproducer.variants import record_reach

    monkeypatch.setenv("LD_LIBRARY_PATH", str(built["dir"]))
    y = tmp_path / "y.bin"
    cmd = [str(built["app"]), str(built["inject"]), "5", str(y)]
    target = Target(kernel=KERNEL, demangled="axpy(float*, float const*, int)", sha256="0" * 64,
                    globals=[("scale", 4)], outputs=[0])
    variant = _variant(tmp_path, "FAKEMOD impl=fast")

    def y_with(reached: frozenset[str]) -> bytes:
        record_reach(variant, variant.read_bytes(), KERNEL, reached)
        job = Apply(root=tmp_path, target=mirrored(target, variant), variant=variant, command=cmd,
                    identify="name", quiet=True)
        assert job.run(substitute=True).substituted == 5
        return y.read_bytes()

    Apply(root=tmp_path, target=target, variant=variant, command=cmd, identify="name", quiet=True).run(substitute=False)
    as_is = y.read_bytes()
    assert y_with(frozenset({"scale"})) == as_is
    assert y_with(frozenset()) != as_is


def test_the_engine_copies_back_the_writable_globals_the_variant_reaches(built, tmp_path, monkeypatch):
    """Target.returned (a capture's `.nv.global*` globals) reaches the interposer: the app
    reads the count the variant wrote; a build's reach record without `count` copies it
    neither in nor back (the variant's code cannot write it)."""
    from kerncap.capture.apply import Apply, Target, mirrored
    from kerncap.reproducer.variants import record_reach

    monkeypatch.setenv("LD_LIBRARY_PATH", str(built["dir"]))
    cmd = [str(built["app"]), str(built["inject"]), "5", str(tmp_path / "y.bin")]
    target = Target(kernel=KERNEL, demangled="axpy(float*, float const*, int)", sha256="0" * 64,
                    globals=[("scale", 4), ("count", 4)], outputs=[0], returned=["count"])
    variant = _variant(tmp_path, "FAKEMOD impl=fast")

    def count_read(t: Target) -> str:
        out: list[str] = []
        Apply(root=tmp_path, target=t, variant=variant, command=cmd, identify="name",
              output=lambda stream, data: out.append(data.decode())
              ).run(substitute=True)
        return next(w for w in "".join(out).split() if w.startswith("count="))

    assert count_read(target) == "count=5"
    record_reach(variant, variant.read_bytes(), KERNEL, frozenset({"scale"}))
    only_scale = mirrored(target, variant)
    assert only_scale.returned == [] and only_scale.globals == [("scale", 4)]


def test_check_compares_the_globals_the_kernel_writes(built, tmp_path, monkeypatch):
    """--check fingerprints the app's `count` after each launch in both runs: a variant whose
    y is right but whose count is not FAILs at launch 0 on the global (1 of its 4 bytes);
    one that cannot reach `count` (its build's record), so the app's stays 0, too; the
    faithful variant passes with the global compared at every launch."""
    from kerncap.capture.apply import Apply, Target, mirrored, run_check
    from kerncap.reproducer.variants import record_reach

    monkeypatch.setenv("LD_LIBRARY_PATH", str(built["dir"]))
    cmd = [str(built["app"]), str(built["inject"]), "5", str(tmp_path / "y.bin")]
    target = Target(kernel=KERNEL, demangled="axpy(float*, float const*, int)", sha256="0" * 64,
                    globals=[("scale", 4), ("count", 4)], outputs=[0], returned=["count"], written_globals=["count"])

    def check(impl: str, reach: frozenset[str] | None = None):
        v = tmp_path / f"{impl}{'-reach' if reach is not None else ''}.cubin"
        v.write_bytes(f"FAKEMOD impl={impl}\0".encode())
        if reach is not None:
            record_reach(v, v.read_bytes(), KERNEL, reach)
        return run_check(Apply(root=tmp_path, target=mirrored(target, v), variant=v, command=cmd, identify="name",
                               quiet=True))

    bad = check("count2")
    m = bad.mismatch
    assert m is not None and (m.launch, m.global_name, m.bytes_differing, m.bytes_compared) == (0, "count", 1, 4)
    assert "FAIL at launch 0 (the 1st): module global count differs (1 of 4 bytes differ)" in bad.text()
    unreached = check("fast", frozenset({"scale"}))
    assert unreached.mismatch is not None and unreached.mismatch.global_name == "count", unreached.text()
    ok = check("fast")
    assert ok.passed and ok.compared == 5, ok.text()


def test_a_cancelled_apply_stops_the_app(built, tmp_path, monkeypatch):
    """MCP's cancel (Session.apply's `cancelled`): the app's process group is stopped
    within the poll, and the apply ends with one message instead of waiting for the app."""
    import time

    from kerncap.capture.apply import Apply, Target
    from kerncap.errors import KerncapError

    monkeypatch.setenv("LD_LIBRARY_PATH", str(built["dir"]))
    target = Target(kernel=KERNEL, demangled="axpy(float*, float const*, int)", sha256="0" * 64, globals=[],
                    outputs=[])
    started = time.monotonic()
    job = Apply(root=tmp_path, target=target, variant=_variant(tmp_path, "FAKEMOD impl=fast"),
                command=["sleep", "60"], quiet=True, timeout=120,
                cancelled=lambda: time.monotonic() - started > 0.5)
    with pytest.raises(KerncapError, match="cancelled"):
        job.run(substitute=True)
    assert time.monotonic() - started < 20


def test_engine_check_fails_when_the_variant_run_fingerprints_fewer_launches(tmp_path):
    """run_check over the interposer's reports (the app's runs stood in by their apply-*.json
    contents, no native build): a variant whose run stopped after 3 of the 5 launches matched
    on those 3 is not a pass; the first launch it lacks is the mismatch. The same 5 launches
    on both sides pass."""
    from kerncap.capture.apply import Apply, RunResult, Target, run_check

    def fingerprints(n: int) -> list[dict]:
        return [{"launch": i, "param": 0, "bytes": 4096, "hash": f"{i:016x}"} for i in range(n)]

    class Reported(Apply):
        def __init__(self, launches: int):
            super().__init__(root=tmp_path, target=Target("_Z4axpyPfPKfi", "axpy(float*, float const*, int)",
                                                          "0" * 64, [], [0]),
                             variant=tmp_path / "v.cubin", command=["app"], quiet=True)
            self.variant_launches = launches

        def run(self, *, substitute, check=False, dump_at=None, profile=False):
            n = self.variant_launches if substitute else 5
            run_dir = Path(tempfile.mkdtemp(dir=tmp_path))
            if dump_at is not None and dump_at < n:
                (run_dir / f"dump-{dump_at}-p0.bin").write_bytes(bytes(4096))
            report = {"launches": n, "substituted": n if substitute else 0, "fingerprints": fingerprints(n)}
            return RunResult(seconds=0.0, returncode=0, reports=[report], profiles=[], procs=[], run_dir=run_dir)

    short = run_check(Reported(3))
    assert not short.passed and (short.mismatch.launch, short.mismatch.param) == (3, 0)
    assert "FAIL at launch 3 (the 4th)" in short.text() and "ran 5 times as is but 3 times" in short.text()
    whole = run_check(Reported(5))
    assert whole.passed and whole.compared == 5


def test_the_bytes_differing_count_the_part_only_one_runs_dump_holds(tmp_path):
    """The check's byte count at the first differing launch: the buffer the variant's run
    dumps there is 48 bytes where the app's own holds 64, alike on the 48 both hold. The 16
    only one run holds differ: "16 of 64 bytes differ", not 0 (which would read as no
    difference at a launch called FAIL). Mutation caught: the length difference not counted."""
    from kerncap.capture.apply import Apply, RunResult, Target, run_check

    class Shorter(Apply):
        def run(self, *, substitute, check=False, dump_at=None, profile=False):
            size = 48 if substitute else 64
            prints = [{"launch": i, "param": 0, "bytes": size if i == 2 and substitute else 64,
                       "hash": f"{i}" + ("-short" if i == 2 and substitute else "")} for i in range(4)]
            run_dir = Path(tempfile.mkdtemp(dir=tmp_path))
            if dump_at is not None:
                (run_dir / f"dump-{dump_at}-p0.bin").write_bytes(bytes(size))
            report = {"launches": 4, "substituted": 4 if substitute else 0, "fingerprints": prints}
            return RunResult(seconds=0.0, returncode=0, reports=[report], profiles=[], procs=[], run_dir=run_dir)

    job = Shorter(root=tmp_path, target=Target("_Z4axpyPfPKfi", "axpy(float*, float const*, int)", "0" * 64, [], [0]),
                  variant=tmp_path / "v.cubin", command=["app"], quiet=True)
    r = run_check(job)
    assert r.verdict == "fail" and r.mismatch.launch == 2
    assert (r.mismatch.bytes_differing, r.mismatch.bytes_compared) == (16, 64)
    assert "FAIL at launch 2 (the 3rd): parameter 0's buffer differs (16 of 64 bytes differ)" in r.text()


def test_check_gives_no_verdict_where_the_apps_own_runs_differ(tmp_path):
    """An app that gives its kernel other inputs each run (ggml's test-backend-ops seeds its
    tensors from std::random_device: on the H200 --check called a byte-exact variant "FAIL at
    launch 0", 32.5 MB of 33.1 MB differing). The second run as is, which the mismatch
    report makes anyway, says so: no verdict (exit 3), the launches before the app's own
    first difference counted as compared. A variant that differs where the app repeats itself
    still fails (exit 1)."""
    from kerncap.capture.apply import Apply, ApplyResult, RunResult, Target, run_check

    class Runs(Apply):
        def __init__(self, app_unsteady_from: int, variant_differs_at: int | None):
            super().__init__(root=tmp_path, target=Target("_Z4axpyPfPKfi", "axpy(float*, float const*, int)",
                                                          "0" * 64, [], [0]),
                             variant=tmp_path / "v.cubin", command=["app"], quiet=True)
            self.unsteady_from, self.differs_at, self.as_is_runs = app_unsteady_from, variant_differs_at, 0

        def run(self, *, substitute, check=False, dump_at=None, profile=False):
            run = 0 if substitute else self.as_is_runs
            self.as_is_runs += not substitute
            prints = []
            for i in range(6):  # from `unsteady_from` on, every run of the app holds other data
                own = f"{i}" if i < self.unsteady_from else f"{i}-run{run}-{substitute}"
                wrong = substitute and self.differs_at is not None and i >= self.differs_at
                prints.append({"launch": i, "param": 0, "bytes": 64, "hash": own + ("-wrong" if wrong else "")})
            run_dir = Path(tempfile.mkdtemp(dir=tmp_path))
            if dump_at is not None:
                (run_dir / f"dump-{dump_at}-p0.bin").write_bytes(bytes([run, substitute]) * 32)
            report = {"launches": 6, "substituted": 6 if substitute else 0, "fingerprints": prints}
            return RunResult(seconds=0.0, returncode=0, reports=[report], profiles=[], procs=[], run_dir=run_dir)

    def applied(check):
        return ApplyResult(variant=tmp_path / "v.cubin", launches=6, substituted=6, check=check, timing=None,
                           skipped_globals=[])

    random_inputs = run_check(Runs(app_unsteady_from=0, variant_differs_at=None))
    assert random_inputs.inconclusive and not random_inputs.passed and random_inputs.verdict == "unsteady"
    assert random_inputs.compared == 0 and random_inputs.unsteady.launch == 0
    assert "NO VERDICT: two runs of the app as is differ at launch 0" in random_inputs.text()
    assert applied(random_inputs).exit_status == 3
    assert applied(random_inputs).to_dict()["check"]["verdict"] == "unsteady"
    assert applied(random_inputs).in_app(["app"])["check"] == "unsteady"

    later = run_check(Runs(app_unsteady_from=4, variant_differs_at=None))
    assert later.inconclusive and later.compared == 4 and later.unsteady.launch == 4

    real = run_check(Runs(app_unsteady_from=4, variant_differs_at=2))
    assert not real.inconclusive and real.verdict == "fail" and real.mismatch.launch == 2
    assert applied(real).exit_status == 1 and "FAIL at launch 2" in real.text()

    steady = run_check(Runs(app_unsteady_from=99, variant_differs_at=None))
    assert steady.passed and steady.compared == 6 and applied(steady).exit_status == 0


def test_a_kernel_launched_with_programmatic_dependent_launch_gets_no_kernel_speedup_when_globals_are_copied(tmp_path):
    """ggml launches its mat-vec with programmatic dependent launch: as is, the kernel starts
    early and waits in the GPU for the kernel before it (CUPTI counts the wait), while the
    variant's launch follows kerncap's copies of the module's globals and never overlaps. On
    the H200 the same code measured "6.29x" in the app. Such a timing gives no kernel
    speedup, says why, and keeps the app's wall-time comparison; without globals to copy
    (the launch keeps its overlap) or without the attribute, the speedup stands."""
    from kerncap.capture.apply import Apply, RunResult, Target, programmatic, run_timing

    pdl = {"id": 6, "value": "01000000" + "00" * 60}
    assert programmatic([{"id": 1, "value": "01" + "00" * 63}, pdl])
    assert not programmatic([{"id": 6, "value": "00" * 64}]) and not programmatic([])
    assert not programmatic([{"id": 6, "value": "zz"}])

    class Timed(Apply):
        def run(self, *, substitute, check=False, dump_at=None, profile=False):
            ns = 150e6 if substitute else 950e6
            prof = {"kernels": [{"name": "_Z1kv", "demangled": "k()", "total_ns": ns, "calls": 4}]}
            return RunResult(seconds=2.0, returncode=0, reports=[{"launches": 4, "substituted": 4 * substitute}],
                             profiles=[prof], procs=[], run_dir=Path(tempfile.mkdtemp(dir=tmp_path)))

    def timing(pdl: bool, globals_: list):
        job = Timed(root=tmp_path, target=Target("_Z1kv", "k()", "0" * 64, globals_, [0], pdl=pdl),
                    variant=tmp_path / "v.cubin", command=["app"], quiet=True)
        return run_timing(job, 6)

    overlapped = timing(True, [("table", 64)])
    assert overlapped.kernel_interval is None and overlapped.app_interval is not None
    assert "programmatic dependent launch" in overlapped.text("kernel") and "not comparable" in overlapped.notes[0]
    assert timing(True, []).kernel_interval is not None and timing(True, []).notes == []
    assert timing(False, [("table", 64)]).kernel_interval.speedup > 6


def test_an_app_that_runs_for_a_set_time_is_compared_per_execution(tmp_path):
    """test-backend-ops runs its graph until a second has passed: on the H200, as is the
    kernel's GPU time was 950 ms a run, with a variant whose launches cost more CPU (module
    globals copied before each) 150 ms, a "6.3x" that was the app running the kernel four
    times less often. The kernel speedup compares the GPU time per execution (the activity
    records count every execution, a graph's replays too), shows both counts and says why
    the totals and the wall time are not the same work."""
    from kerncap.capture.apply import Apply, RunResult, Target, run_timing

    class Timed(Apply):
        def run(self, *, substitute, check=False, dump_at=None, profile=False):
            ns, calls = (150e6, 15_337) if substitute else (950e6, 63_000)
            prof = {"kernels": [{"name": "_Z1kv", "demangled": "k()", "total_ns": ns, "calls": calls},
                                {"name": "_Z5otherv", "demangled": "other()", "total_ns": 50e6, "calls": 10}]}
            return RunResult(seconds=1.1, returncode=0, reports=[{"launches": calls, "substituted": calls * substitute}],
                             profiles=[prof], procs=[], run_dir=Path(tempfile.mkdtemp(dir=tmp_path)))

    job = Timed(root=tmp_path, target=Target("_Z1kv", "k()", "0" * 64, [], [0]), variant=tmp_path / "v.cubin",
                command=["app"], quiet=True)
    t = run_timing(job, 6)
    assert t.kernel_calls == ([63_000] * 6, [15_337] * 6)
    assert abs(t.kernel_interval.speedup - (950e6 / 63_000) / (150e6 / 15_337)) < 1e-6  # 1.54x, not 6.3x
    assert "63000 times as is and 15337 times with the variant" in t.notes[0]
    text = t.text("kernel")
    assert "(63000 / 15337 executions, 15.08 / 9.78 us each)" in text and "speedup per execution 1.54" in text


def test_a_check_that_compared_nothing_gives_no_verdict(tmp_path):
    """A kernel whose launches could not be fingerprinted (no pointer parameter, parameters
    the interposer could not read: only notes) was "all 0 launches matched byte for byte",
    a pass with exit 0 and `check: "pass"` on the History row. Nothing compared is no
    verdict (exit 3, "nothing"); an output file both runs wrote alike is something compared."""
    from kerncap.capture.apply import Apply, ApplyResult, RunResult, Target, run_check

    class Blind(Apply):
        def run(self, *, substitute, check=False, dump_at=None, profile=False):
            (tmp_path / "out.txt").write_text("same")
            report = {"launches": 5, "substituted": 5 if substitute else 0, "fingerprints": [],
                      "errors": ["launch 0: the parameters of _Z1kv could not be read"]}
            return RunResult(seconds=0.0, returncode=0, reports=[report], profiles=[], procs=[],
                             run_dir=Path(tempfile.mkdtemp(dir=tmp_path)))

    job = Blind(root=tmp_path, target=Target("_Z1kv", "k()", "0" * 64, [], []), variant=tmp_path / "v.cubin",
                command=["app"], quiet=True, cwd=str(tmp_path))
    blind = run_check(job)
    result = ApplyResult(variant=tmp_path / "v.cubin", launches=5, substituted=5, check=blind, timing=None,
                         skipped_globals=[])
    assert not blind.passed and blind.inconclusive and blind.verdict == "nothing" and blind.compared == 0
    assert blind.text().startswith("check: NO VERDICT: nothing was compared: the kernel ran 5 time(s)")
    assert "could not be read" in blind.text()
    assert result.exit_status == 3 and result.in_app(["app"])["check"] == "nothing"
    assert run_check(job, ["missing.txt"]).verdict == "nothing"  # a file neither run wrote compares nothing
    files = run_check(job, ["out.txt"])
    assert files.passed and files.files_compared == 1 and files.verdict == "pass"


def test_an_output_file_that_differs_fails_the_check_when_every_launch_matched(tmp_path):
    """--compare-output names the app's own result: a variant whose launches all fingerprint
    alike but whose run writes another file (a later kernel, the host, reads its output
    differently) fails the check (exit 1, "fail" on the History row); the same file both
    ways passes."""
    from kerncap.capture.apply import Apply, ApplyResult, RunResult, Target, run_check

    class Writes(Apply):
        differs = True  # the variant's run writes another result

        def run(self, *, substitute, check=False, dump_at=None, profile=False):
            (tmp_path / "out.txt").write_text("2.0" if substitute and self.differs else "1.0")
            prints = [{"launch": i, "param": 0, "bytes": 64, "hash": f"{i:016x}"} for i in range(3)]
            report = {"launches": 3, "substituted": 3 if substitute else 0, "fingerprints": prints}
            return RunResult(seconds=0.0, returncode=0, reports=[report], profiles=[], procs=[],
                             run_dir=Path(tempfile.mkdtemp(dir=tmp_path)))

    def job(differs: bool) -> Writes:
        j = Writes(root=tmp_path, target=Target("_Z1kv", "k()", "0" * 64, [], [0]), variant=tmp_path / "v.cubin",
                   command=["app"], quiet=True, cwd=str(tmp_path))
        j.differs = differs
        return j

    r = run_check(job(True), ["out.txt"])
    assert r.mismatch is None and r.compared == 3 and r.output_files == ["out.txt"]
    assert not r.passed and not r.inconclusive and r.verdict == "fail"
    assert "check: output file out.txt differs" in r.text()
    result = ApplyResult(variant=tmp_path / "v.cubin", launches=3, substituted=3, check=r, timing=None,
                         skipped_globals=[])
    assert result.exit_status == 1 and result.in_app(["app"])["check"] == "fail"
    same = run_check(job(False), ["out.txt"])
    assert same.passed and same.verdict == "pass" and same.output_files == []


def test_the_timing_alternates_the_runs_and_counts_the_variants_substitutions(tmp_path):
    """run_timing runs the app as is and with the variant in ABBA order (drift falls on both
    sides alike) and reports the launches substituted in a run with the variant, whichever
    side ran last in the final round (an even number of rounds ends on an as-is run)."""
    from kerncap.capture.apply import Apply, RunResult, Target, run_timing

    class Timed(Apply):
        def run(self, *, substitute, check=False, dump_at=None, profile=False):
            self.order.append(substitute)
            prof = {"kernels": [{"name": "_Z1kv", "demangled": "k()", "total_ns": 2e6 if substitute else 3e6,
                                 "calls": 4}]}
            return RunResult(seconds=1.0, returncode=0, reports=[{"launches": 4, "substituted": 4 * substitute}],
                             profiles=[prof], procs=[], run_dir=Path(tempfile.mkdtemp(dir=tmp_path)))

    for runs in (5, 6):
        job = Timed(root=tmp_path, target=Target("_Z1kv", "k()", "0" * 64, [], [0]), variant=tmp_path / "v.cubin",
                    command=["app"], quiet=True)
        job.order = []
        t = run_timing(job, runs)
        assert job.order == [False, True, True, False, False, True, True, False, False, True, True, False][:2 * runs]
        assert t.substituted == 4 and "(as is / with the variant; 4 launch(es) substituted per run)" in t.text("k")
        assert len(t.app_s[0]) == len(t.app_s[1]) == runs and abs(t.kernel_interval.speedup - 1.5) < 1e-9


def test_the_compilers_own_constants_are_not_mirrored_into_the_variant():
    """A module's `$str…` and `__unnamed_N` are numbered per build: a reduced variant's
    `$str$1` can be another string (ggml's mmq TU: 100 bytes against the captured 61), so
    apply mirrors only the module's named globals."""
    from types import SimpleNamespace as NS

    from kerncap.capture.apply import target_of

    cap = NS(kernel={"name": "_Z1kv", "demangled": "k()", "module": {"sha256": "0" * 64}}, regions=[], params=[],
             globals=[NS(name=n, size=s, section=".nv.global.init", written=False) for n, s in (
                 ("$str", 113), ("$str$1", 61), ("__unnamed_3", 10), ("iq2xs_grid", 4096))]
             + [NS(name="scale", size=4, section=".nv.constant3", written=False),
                NS(name="flag", size=4, section=".nv.global", written=True),
                NS(name="../up", size=4, section=".nv.global", written=True)],  # a hostile capture's
             launch={})
    t = target_of(cap)
    assert t.globals == [("iq2xs_grid", 4096), ("scale", 4), ("flag", 4), ("../up", 4)]
    # of those mirrored, only the writable (`__device__`) ones are copied back after a launch
    assert t.returned == ["iq2xs_grid", "flag", "../up"] and t.written_globals == ["flag", "../up"]
    # --check compares what the kernel wrote and what the variant may write; no name that
    # would lead a dump file out of its directory
    assert t.checked_globals == ["flag", "iq2xs_grid"]


def test_a_history_rows_cubin_that_leads_out_of_the_reproducer_is_not_applied(tmp_path):
    """`apply --variant N` takes row N's cubin from history.json, a file an edit (or a
    copied reproducer) can point anywhere: a cubin outside the reproducer is refused by name
    before the app runs; a row inside it resolves to its file. Mutation caught: the
    containment check skipped (the outside file applied)."""
    from kerncap.capture.apply import ApplyRequest, apply_request, resolve_variant
    from kerncap.errors import KerncapError
    from kerncap_tui import demo

    if not demo.available():
        pytest.skip("no demo reproducer")
    repro = tmp_path / "repro"
    shutil.copytree(demo.demo_path(), repro, ignore=shutil.ignore_patterns("dot-git"))
    (tmp_path / "outside.cubin").write_bytes(b"\x7fELF not the reproducer's")
    hist = json.loads((repro / "history.json").read_text())
    [row] = [v for v in hist["variants"] if v["id"] == 2]
    row["cubin"] = "../outside.cubin"
    (repro / "history.json").write_text(json.dumps(hist))
    assert resolve_variant(repro, None, 1) == (repro / "variants" / "1.cubin").resolve()
    with pytest.raises(KerncapError, match="variant 2's cubin ../outside.cubin leads out of the reproducer"):
        resolve_variant(repro, None, 2)
    request = ApplyRequest(command=("true",), variant=2, runs=0).checked()
    with pytest.raises(KerncapError, match="leads out of the reproducer"):
        apply_request(repro, request)


def test_launches_recorded_into_graphs_are_named_when_the_app_also_launches_directly(tmp_path):
    """An app that launches the kernel directly and from CUDA graphs: only the direct
    launches run the variant, and the result says so (the graph replays are neither checked
    nor substituted, and they dilute the kernel's speedup); none, no note."""
    from kerncap.capture.apply import ApplyResult

    mixed = ApplyResult(variant=tmp_path / "v.cubin", launches=5, substituted=5, check=None, timing=None,
                        skipped_globals=[], graph_launches=3)
    assert mixed.to_dict()["graph_launches"] == 3
    assert "note: 3 launch(es) recorded into CUDA graphs ran the app's own kernel" in mixed.text()
    plain = ApplyResult(variant=tmp_path / "v.cubin", launches=5, substituted=5, check=None, timing=None,
                        skipped_globals=[])
    assert plain.to_dict()["graph_launches"] == 0 and "CUDA graphs" not in plain.text()


def test_dispatch_counts_launches_from_0():
    """--dispatch numbers launches from 0, as extract does: launch 0 (the first) is a launch
    to substitute, alone or in a list, through the CLI's text and MCP's list alike; -1 is
    refused naming the bound. Mutation caught: launch 0 refused as a negative number."""
    from kerncap.capture.apply import ApplyRequest, dispatch_list
    from kerncap.errors import UsageError

    assert dispatch_list("0") == (0,) and dispatch_list("3,0, 3") == (0, 3)
    assert ApplyRequest(command=("app",), cubin="v.cubin", dispatch="0").checked().dispatch == (0,)
    assert ApplyRequest(command=("app",), cubin="v.cubin", dispatch=[2, 0]).checked().dispatch == (0, 2)
    with pytest.raises(ValueError, match="negative launch number"):
        dispatch_list("0,-1")
    with pytest.raises(UsageError, match="negative launch number"):
        ApplyRequest(command=("app",), cubin="v.cubin", dispatch="-1").checked()


@pytest.mark.parametrize("replay_iv,meets", [((1.127, 1.125, 1.129), False), ((1.137, 1.135, 1.139), True),
                                             ((1.14, 1.1405, 1.145), True), (None, None)])
def test_an_in_app_interval_apart_from_the_reproducers_is_explained(tmp_path, replay_iv, meets):
    """In-app and reproducer kernel intervals that do not meet (facts §47–48: the smooth
    edit's 1.138× in the app against 1.127× replayed) get a note naming the L2 state as the
    likely difference and the replay flags that bracket it; intervals that touch (a shared
    end included), or a missing one, get none. `replay_meets` says the same in the JSON."""
    from kerncap.capture.apply import ApplyResult, Timing
    from kerncap.replay.significance import Interval

    timing = Timing(runs=8, app_s=([1.0] * 8, [1.0] * 8), kernel_ms=([0.43] * 8, [0.38] * 8), share=(0.975, 0.97),
                    app_interval=None, kernel_interval=Interval(1.138, 1.136, 1.1405, 0.99), substituted=5)
    replay = None if replay_iv is None else dict(zip(("speedup", "low", "high"), replay_iv))
    result = ApplyResult(variant=tmp_path / "v.cubin", launches=5, substituted=5, check=None, timing=timing,
                         skipped_globals=[], row=1, replay=replay)
    assert result.replay_meets is meets and result.to_dict()["replay_meets"] is meets
    assert ("the two intervals do not meet" in result.text()) is (meets is False)
    if meets is False:
        assert "--warm-l2" in result.text() and "--flush-l2" in result.text()
        assert "`kerncap build --timer kernel` times the reproducer on the app's clock" in result.text()
        kernel = replace(result, replay={**replay, "timer": "kernel"})
        assert "do not meet on the same clock" in kernel.text() and "CUPTI's kernel records as here" in kernel.text()
        assert "another cadence" in kernel.text() and "facts §52" in kernel.text()


@pytest.mark.parametrize("bound,within", [(13.6, True), (12.3, False), (None, False)])
def test_an_in_app_speedup_the_events_hid_in_the_replay_is_said_to_lie_within_its_bound(tmp_path, bound, within):
    """Triton's smooth at 1 Mi floats (facts §49): about 12.2× replayed between events,
    13.5× [13.43–13.53] in the app. The History row's bound (both medians less the launch
    floor) reaching the app's interval is said so, with the bound in the reproducer's line;
    a bound short of it, or none, keeps the plain "do not meet" note."""
    from kerncap.capture.apply import ApplyResult, Timing
    from kerncap.replay.significance import Interval

    timing = Timing(runs=5, app_s=([7.0] * 5, [7.0] * 5), kernel_ms=([1.6] * 5, [0.12] * 5), share=(0.76, 0.19),
                    app_interval=None, kernel_interval=Interval(13.52, 13.43, 13.53, 0.99), substituted=5)
    replay = {"speedup": 12.12, "low": 12.0, "high": 12.2, "bound": bound}
    result = ApplyResult(variant=tmp_path / "v.cubin", launches=5, substituted=5, check=None, timing=timing,
                         skipped_globals=[], row=1, replay=replay)
    text = result.text()
    assert result.replay_meets is False and result.within_bound is within
    assert result.to_dict()["within_bound"] is within
    assert ("reaches the reproducer's speedup without the events" in text) is within
    assert ("--warm-l2" in text) is not within
    assert ("× without the events around each timed launch" in text) is (bound is not None)
    assert bound is None or f"up to {bound:.3f}×" in text
