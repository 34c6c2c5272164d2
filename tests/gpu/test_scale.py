"""Issue 7, robustness at scale: 200k live allocations, launches from 8 threads on 4
streams during the capture, a million dispatches, and the MoE app of bench/scale.py in
a small size. Each case extracts its own app once (apps.py: MANY_ALLOCS, ...) and
prints the figures worth quoting (shown even without -s)."""

from __future__ import annotations

import bisect
import json
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from .apps import (
    LAUNCH_HEAVY_1M,
    MANY_ALLOCS,
    MILLION,
    MOE_SCALE_SMALL,
    MOE_SCALE_SMALL_SILU,
    MOE_SMALL_LAYERS,
    MS8_BUFFERS,
    MULTISTREAM8,
    AppSpec,
    app_env,
    looks_like_device_address,
    u64,
)

pytestmark = pytest.mark.gpu


@dataclass
class Extracted:
    spec: AppSpec
    workdir: Path
    result: object  # kerncap.capture.extract.ExtractResult
    capture: object  # kerncap.reproducer.format.Capture
    report: dict
    wall: float

    @property
    def reproducer(self) -> Path:
        return Path(self.result.reproducer_dir)

    @property
    def done(self) -> bool:
        """The app reached its normal end (keep_running captures only)."""
        return (self.workdir / "done").exists()


def extract_app(spec: AppSpec, build_dir: Path, workdir: Path) -> Extracted:
    from kerncap.capture.extract import extract
    from kerncap.reproducer.format import Capture

    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    result = extract(
        spec.kernel, spec.command(build_dir), output=workdir / "reproducer", dispatch=spec.dispatch,
        match=spec.match, keep_running=spec.keep_running, timeout=spec.timeout, env=app_env(spec, workdir),
    )
    wall = time.monotonic() - t0
    report_path = workdir / "report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return Extracted(spec, workdir, result, Capture.open(result.reproducer_dir), report, wall)


def say(capsys, line: str) -> None:
    with capsys.disabled():
        print(f"\n[scale] {line}", flush=True)


class RegionIndex:
    """Region lookup by address in O(log n): Capture.region_of scans, and 200k regions x
    4096 lookups would take minutes."""

    def __init__(self, cap):
        self.regions = cap.regions  # sorted by base, never overlapping (capture format)
        self.bases = [r.base for r in self.regions]

    def __call__(self, address: int):
        i = bisect.bisect_right(self.bases, address) - 1
        if i >= 0 and self.regions[i].contains(address):
            return self.regions[i]
        return None


def assert_pointer_params_in_regions(cap, find) -> None:
    for p in cap.params:
        if p.size == 8 and looks_like_device_address(u64(p.value)):
            region = find(u64(p.value))
            assert region is not None, f"param {p.index} = {u64(p.value):#x} points into no captured region"
            assert p.region == region.id, f"param {p.index} lacks its pointer annotation"


def assert_written_exactly(got: Extracted, find, keys: tuple[str, ...]) -> None:
    written = {r.id for r in got.capture.regions if r.written}
    expected = {find(got.report[k]).id for k in keys}
    assert written == expected, f"written regions {sorted(written)}, expected those of {keys}: {sorted(expected)}"


def validate(reproducer: Path) -> tuple[float, object]:
    from kerncap.replay.client import ReplayClient

    t0 = time.monotonic()
    with ReplayClient(reproducer) as rc:
        result = rc.validate()
    bad = [f"{r.name}: {r.mismatched_bytes} bytes" for r in result.regions if r.mismatched_bytes or r.unexpected_write]
    assert result.passed, f"replay differs from the captured post-state: {bad[:10]}"
    return time.monotonic() - t0, result


def capture_figures(got: Extracted) -> str:
    prov = got.capture.provenance
    secs, size = prov["capture_seconds"], prov["bytes"]
    manifest = got.capture.root / "manifest.json"
    return (f"extract {got.wall:.1f} s, capture pre {secs['pre']:.2f} + post {secs['post']:.2f} = "
            f"{secs['total']:.2f} s, {len(got.capture.regions)} regions, "
            f"manifest {manifest.stat().st_size / 1e6:.1f} MB, "
            f"logical {size['logical'] / 1e6:.1f} MB, stored {size['stored'] / 1e6:.1f} MB")


# -- 200,000 live allocations --------------------------------------------------------------


def ma_pattern(np, entry: int, words: int):
    """testapps/cuda/many_allocs.cu: pattern(e, w) for w < words, as uint32."""
    w = np.arange(words, dtype=np.uint64)
    high = np.uint64(((entry + 1) * 2654435761) & 0xFFFFFFFF)
    return (high ^ ((w * np.uint64(40503) + np.uint64(0x9E3779B9)) & np.uint64(0xFFFFFFFF))).astype(np.uint32)


def test_200k_live_allocations(testapps_build, tmp_path, capsys):
    np = pytest.importorskip("numpy")
    got = extract_app(MANY_ALLOCS, testapps_build, tmp_path / "many_allocs")
    cap, report = got.capture, got.report
    t0 = time.monotonic()
    find = RegionIndex(cap)
    index_s = time.monotonic() - t0
    say(capsys, f"many_allocs: {report['allocs']} allocations made in {report['alloc_ns'] / 1e9:.2f} s by the app; "
                + capture_figures(got))

    assert report["allocs"] >= 200_000
    assert len(cap.regions) >= report["allocs"], f"only {len(cap.regions)} regions for {report['allocs']} allocations"
    for before, after in zip(cap.regions, cap.regions[1:]):
        assert before.end <= after.base, f"regions {before.id} and {after.id} overlap or are unsorted"
    for key in ("table", "words", "out", "first", "last"):
        assert find(report[key]) is not None, f"{key} = {report[key]:#x} was not captured"
    assert_pointer_params_in_regions(cap, find)
    assert_written_exactly(got, find, ("out",))

    # Every table entry is its own region, holding the pattern ma_fill wrote.
    entries = report["entries"]
    table, words_region = find(report["table"]), find(report["words"])
    t_off, w_off = report["table"] - table.base, report["words"] - words_region.base
    pointers = struct.unpack(f"<{entries}Q", cap.read_bytes(table.pre, table.size)[t_off : t_off + 8 * entries])
    raw_words = cap.read_bytes(words_region.pre, words_region.size)
    words = struct.unpack(f"<{entries}I", raw_words[w_off : w_off + 4 * entries])
    sums = []
    for e, (ptr, n) in enumerate(zip(pointers, words)):
        region = find(ptr)
        assert region is not None and region.base == ptr, f"table entry {e} = {ptr:#x} is not the base of a region"
        assert region.size == 4 * n, f"entry {e}: region {region.id} holds {region.size} bytes, not {4 * n}"
        assert not region.written
        expected = ma_pattern(np, e, n)
        pre = np.frombuffer(cap.read_bytes(region.pre, region.size), dtype=np.uint32)
        assert np.array_equal(pre, expected), f"entry {e}: region {region.id} does not hold the app's pattern"
        sums.append(int(expected.sum(dtype=np.uint64)) & 0xFFFFFFFF)
    out = find(report["out"])
    o_off = report["out"] - out.base
    post = struct.unpack(f"<{entries + 1}Q", cap.read_bytes(out.post, out.size)[o_off : o_off + 8 * (entries + 1)])
    assert list(post[:entries]) == sums, "the captured post-state of out is not the kernel's sums"
    assert post[entries] == sum(sums)

    seconds, _ = validate(got.reproducer)
    say(capsys, f"many_allocs: region index {index_s:.2f} s, replay validate (byte-exact) {seconds:.1f} s")


# -- 8 threads on 4 streams during the capture ----------------------------------------------


def test_eight_threads_on_four_streams_keep_running(testapps_build, tmp_path, capsys):
    np = pytest.importorskip("numpy")
    got = extract_app(MULTISTREAM8, testapps_build, tmp_path / "multistream8")
    cap, report, outcome = got.capture, got.report, got.result.outcome
    find = RegionIndex(cap)
    counts = [report.get(f"lt{t}") for t in range(len(MS8_BUFFERS))]
    say(capsys, f"multistream8: {report.get('launches')} launches by {len(counts)} threads (per thread {counts}); "
                + capture_figures(got))

    # The app ran on after the capture and found every thread's count intact.
    assert outcome.returncode == 0, f"the app {outcome.describe_exit()}:\n" + "\n".join(outcome.stderr_tail)
    assert got.done, "the app did not reach its end after the capture"
    assert all(c is not None and c >= 100 for c in counts), f"threads launched too little: {counts}"
    assert cap.provenance["dispatch_index"] == MULTISTREAM8.dispatch
    assert cap.launch["stream"] in ("null", "legacy")

    assert_pointer_params_in_regions(cap, find)
    assert_written_exactly(got, find, MULTISTREAM8.writes)
    for t, key in enumerate(MS8_BUFFERS):
        region = find(report[key])
        assert region is not None, f"{key} was not captured"
        assert region.pre == region.post and not region.written, (
            f"thread {t}'s buffer changed between pre- and post-state: its launches ran during the capture")
        # In-flight work drained before the pre-state: no launch was half-way through.
        start = report[key] - region.base
        words = np.frombuffer(cap.read_bytes(region.pre, region.size)[start:], dtype=np.uint32)
        seen = np.unique(words)
        assert len(seen) == 1, f"thread {t}'s buffer was snapshotted mid-launch (values {seen[:5]}...)"
        assert 0 < int(seen[0]) <= counts[t]

    seconds, _ = validate(got.reproducer)
    say(capsys, f"multistream8: replay validate (byte-exact) {seconds:.1f} s")


# -- over a million dispatches --------------------------------------------------------------


def test_million_dispatches_profile_counts_and_extract_finds_the_last(testapps_build, tmp_path, capsys):
    from kerncap.capture.profile import run_profile

    spec = LAUNCH_HEAVY_1M
    command = spec.command(testapps_build)
    plain_dir, profile_dir = tmp_path / "plain", tmp_path / "profile"
    plain_dir.mkdir()
    profile_dir.mkdir()

    t0 = time.monotonic()
    proc = subprocess.run(command, env=app_env(spec, plain_dir), capture_output=True, text=True, timeout=spec.timeout)
    plain = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]

    t0 = time.monotonic()
    profile = run_profile(command, env=app_env(spec, profile_dir), timeout=spec.timeout)
    profiled = time.monotonic() - t0
    app_count = json.loads((profile_dir / "report.json").read_text())["launches"]
    tiny = [k for k in profile.kernels if "kc_tiny" in k.name]
    assert len(tiny) == 1, [k.name for k in profile.kernels]
    assert app_count == MILLION
    assert tiny[0].calls == app_count, f"profile counted {tiny[0].calls} kc_tiny calls, the app made {app_count}"
    assert profile.dropped_records == 0, profile.warnings

    got = extract_app(spec, testapps_build, tmp_path / "extract")
    cap = got.capture
    say(capsys, f"launch_heavy {MILLION}: plain {plain:.1f} s, profile {profiled:.1f} s "
                f"({tiny[0].calls} calls counted), dispatch {spec.dispatch}: " + capture_figures(got))
    assert cap.provenance["dispatch_index"] == spec.dispatch
    assert "kc_tiny" in cap.kernel["name"]
    counter = [p for p in cap.params if p.size == 8 and p.region is not None]
    assert len(counter) == 1, f"expected one pointer parameter (the counter), got {cap.params}"
    region = next(r for r in cap.regions if r.id == counter[0].region)
    off = counter[0].region_offset

    def value(chunks) -> int:
        return struct.unpack("<i", cap.read_bytes(chunks, region.size)[off : off + 4])[0]

    # The app zeroes the counter and every launch adds 1: dispatch N starts from N.
    assert value(region.pre) == spec.dispatch, f"captured the dispatch that saw {value(region.pre)}"
    assert value(region.post) == spec.dispatch + 1
    seconds, _ = validate(got.reproducer)
    say(capsys, f"launch_heavy: replay validate (byte-exact) {seconds:.1f} s")


# -- the MoE app of bench/scale.py, small -----------------------------------------------------


def tensor_bytes(cap, find, address: int, size: int, chunks: str) -> bytes:
    region = find(address)
    assert region is not None and address + size <= region.end, f"{address:#x} (+{size}) not inside one region"
    start = address - region.base
    return cap.read_bytes(getattr(region, chunks), region.size)[start : start + size]


def test_moe_scale_small_counts_captures_and_replays(tmp_path, capsys):
    """What bench/scale.py relies on, in a small size: dispatch counts per layer (2 of
    moe_scale_expert_ffn, 1 of the "silu" pattern), the app's own torch check passes
    under the capture, both kernels capture and replay byte-exact."""
    from kerncap.capture.profile import run_profile

    spec, layers = MOE_SCALE_SMALL, MOE_SMALL_LAYERS
    (tmp_path / "profile").mkdir()
    profile = run_profile(spec.command(Path()), env=app_env(spec, tmp_path / "profile"), timeout=spec.timeout)
    ffn = [k for k in profile.kernels if spec.kernel in k.name]
    pattern = MOE_SCALE_SMALL_SILU.kernel
    silu = [k for k in profile.kernels if pattern in k.name or pattern in k.demangled]
    assert [k.calls for k in ffn] == [2 * layers], [(k.name, k.calls) for k in ffn]
    assert [k.calls for k in silu] == [layers], [(k.display_name, k.calls) for k in silu]

    got = extract_app(spec, Path(), tmp_path / "target")
    cap, report = got.capture, got.report
    find = RegionIndex(cap)
    say(capsys, "moe_scale small, target: " + capture_figures(got))
    assert got.result.outcome.returncode == 0 and got.done, "\n".join(got.result.outcome.stderr_tail)
    assert "max_err_up" in report, "the app did not check its last layer against torch"
    assert report["target_dispatch"] == spec.dispatch and report["second_dispatch"] == MOE_SCALE_SMALL_SILU.dispatch
    assert report["target_kernel"] == spec.kernel and report["second_kernel"] == MOE_SCALE_SMALL_SILU.kernel
    assert cap.kernel["name"] == spec.kernel and cap.provenance["dispatch_index"] == spec.dispatch
    assert_pointer_params_in_regions(cap, find)
    w_bytes = report["experts"] * report["d_model"] * report["d_ff"] * 2
    w_pre = tensor_bytes(cap, find, report["w_up_last"], w_bytes, "pre")
    assert any(w_pre) and w_pre == tensor_bytes(cap, find, report["w_up_last"], w_bytes, "post")
    up_bytes = report["tokens"] * report["d_ff"] * 2
    assert tensor_bytes(cap, find, report["up_last"], up_bytes, "pre") != tensor_bytes(
        cap, find, report["up_last"], up_bytes, "post"), "the up projection's output did not change"
    validate(got.reproducer)

    second = extract_app(MOE_SCALE_SMALL_SILU, Path(), tmp_path / "second")
    say(capsys, "moe_scale small, silu: " + capture_figures(second))
    assert "silu" in (second.capture.kernel.get("demangled") or second.capture.kernel["name"])
    assert second.capture.provenance["dispatch_index"] == MOE_SCALE_SMALL_SILU.dispatch
    validate(second.reproducer)
