"""Issue 25 on the GPU: every reproducer replays, or says at capture why it cannot.

- zero_copy_gather: a gather from a table in mapped pinned host memory (rewritten by the
  host between launches), indices in managed memory; a parameter pointing at pageable
  memory is named at capture. Host memory is restored at its address in the replay
  process; byte-exact after validate and an unmodified recompile.
- host_register_scale: a kernel updating a cudaHostRegister'ed malloc buffer in place;
  validate judges it on the host memory (a wrong variant fails there, and only there).
- sparse_arena: 2 GiB arena, 64 MiB of data: extract stores what is non-zero, replay
  backs only the data and maps the never-written zeros read-only; a variant writing
  there is named; dense replay (KERNCAP_SPARSE=0) agrees.
- jax_gemm: a GEMM fusion with JAX's default preallocation (75 % of the GPU).
- paged_attention: a Triton paged-attention decode over a KV cache at 90 % of free memory.
- bad input: a host address taken in the replay process, a damaged host payload.

Run on the GPU machine: bash tests/gpu/run.sh tests/gpu/test_hostmem_gpu.py
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from kerncap.errors import AddressUnavailable, CaptureFormatError, KerncapError

from .apps import (HOST_REGISTER_SCALE, JAX_GEMM, PAGED_ATTENTION, SPARSE_ARENA, TESTAPPS, ZERO_COPY_GATHER, AppSpec, Once,
                   app_env, pick_gemm)

pytestmark = pytest.mark.gpu
GiB, MiB = 1 << 30, 1 << 20


def failing(result) -> str:
    bad = [r for r in result.regions if not r.passed]
    return ", ".join(f"{r.kind} {r.id} {r.name}: {r.mismatched_bytes} bytes" for r in bad) or "(none)"


class Extracted:
    """One extract per app and module; a failure fails every test that needs it."""

    def __init__(self, build: Path, root: Path):
        self.build, self.root, self.once = build, root, Once()

    def get(self, spec: AppSpec, *, sources: bool = False, kernel: str | None = None, match: str | None = None):
        return self.once.get(spec.name, lambda: self._extract(spec, sources, kernel, match))

    def _extract(self, spec, sources, kernel, match):
        from kerncap.capture.extract import extract
        from kerncap.reproducer.format import Capture

        work = self.root / spec.name
        work.mkdir(parents=True)
        kw = dict(source_dir=TESTAPPS / "cuda", build_dir=self.build) if sources else {}
        res = extract(kernel or spec.kernel, spec.command(self.build), output=work / "reproducer",
                      dispatch=spec.dispatch, match=match or spec.match, keep_running=spec.keep_running,
                      timeout=spec.timeout, env=app_env(spec, work), **kw)
        report_path = work / "report.json"
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
        repro = Path(res.reproducer_dir)
        cap = Capture.open(repro)
        print(f"{spec.name}: {len(cap.regions)} regions, {len(cap.host_regions)} host regions, "
              f"bytes {cap.provenance.get('bytes')}, capture {cap.provenance.get('capture_seconds')}")
        for w in cap.warnings:
            print(f"  warning: {w}")
        return repro, cap, report, res


@pytest.fixture(scope="module")
def extracted(testapps_build, tmp_path_factory) -> Extracted:
    return Extracted(testapps_build, tmp_path_factory.mktemp("hostmem"))


def recompile_validates(repro: Path) -> None:
    from kerncap.recompile import recompile
    from kerncap.replay.client import ReplayClient

    built = recompile(repro)
    with ReplayClient(repro) as rc:
        v = rc.validate(cubin=built.cubin)
    assert v.passed, f"the unmodified recompile differs: {failing(v)}"


# -- mapped pinned host memory ---------------------------------------------------------------


def test_zero_copy_gather_replays_from_its_captured_host_table(extracted):
    np = pytest.importorskip("numpy")
    from kerncap.replay.client import ReplayClient

    repro, cap, report, _ = extracted.get(ZERO_COPY_GATHER, sources=True)
    table = cap.host_region_of(report["dtable"])
    assert table is not None and table.snapshotted, [vars(h) for h in cap.host_regions]
    assert table.base == report["table"] and table.device_pointer == report["dtable"]  # one address, UVA
    assert table.api == "cuMemHostAlloc" and not table.written
    t = report["t"]
    got = np.frombuffer(cap.read_bytes(table.pre, table.size), np.float32, count=t, offset=report["table"] - table.base)
    k = np.arange(t)
    assert np.array_equal(got, (((k * 7 + 13) % 1000) * 0.25 + 1).astype(np.float32)), "not dispatch 1's table"
    gather = next(p for p in cap.manifest["params"] if p["index"] == 0)
    assert gather.get("host_pointers") == [{"at": 0, "host_region": table.id, "offset": report["dtable"] - table.base}]
    assert cap.region_of(report["idx"]).kind == "managed"
    # The pageable pointer (parameter 4) is named at capture, with what it means.
    unresolved = cap.closure.get("unresolved") or []
    assert [u["param"] for u in unresolved] == [4], unresolved
    assert unresolved[0]["value"] == report["pageable"]
    assert any(w.startswith("parameter 4 holds") and "host memory kerncap does not capture" in w
               for w in cap.warnings), cap.warnings
    with ReplayClient(repro) as rc:
        v = rc.validate()
        assert [r["host_regions"] for r in rc.info["host_ranges"]] == [[table.id]]
    assert v.passed, failing(v)
    (host,) = [c for c in v.regions if c.kind == "host"]
    assert host.size == table.size and host.mismatched_bytes == 0
    recompile_validates(repro)


def test_registered_buffer_updated_in_place_is_judged_on_host_memory(extracted, variant_cubins):
    from kerncap.replay.client import ReplayClient

    repro, cap, report, _ = extracted.get(HOST_REGISTER_SCALE, sources=True)
    (buf,) = [h for h in cap.host_regions if h.base <= report["buf"] < h.end]
    assert buf.api == "cuMemHostRegister_v2" and buf.snapshotted and buf.written
    assert buf.base == report["buf"] and buf.size == report["n"] * 4 and buf.device_pointer == report["dbuf"]
    assert not any(r.written for r in cap.regions), "the kernel writes host memory only"
    with ReplayClient(repro) as rc:
        assert rc.validate().passed
        wrong = rc.validate(cubin=variant_cubins / "scale_host_wrong.cubin")
    bad = [c for c in wrong.regions if not c.passed]
    assert [(c.kind, c.id) for c in bad] == [("host", buf.id)], failing(wrong)
    assert bad[0].mismatched_bytes > 0 and not bad[0].unexpected_write
    recompile_validates(repro)


def test_a_host_address_taken_in_the_replay_process_is_named(extracted):
    from kerncap.replay.client import ReplayClient

    repro, cap, _, _ = extracted.get(ZERO_COPY_GATHER, sources=True)
    table = cap.snapshotted_host_regions[0]
    page = table.base - table.base % 4096
    block = {"op": "_debug_block_host", "base": page, "size": 4096}
    with pytest.raises(AddressUnavailable) as exc:
        with ReplayClient(repro, before_open=[block]) as rc:
            rc.validate()
    msg = exc.value.message
    print(msg)
    assert re.search(r"cannot map host range 0 \(host region \d+\) \[0x[0-9a-f]+", msg), msg
    assert "held by: " in msg and "---p" in msg and "tried 3 fresh replay servers" in msg


def test_a_damaged_host_payload_is_named_with_its_file(extracted, tmp_path):
    from kerncap.replay.client import ReplayClient
    from kerncap.reproducer.format import Capture

    repro, cap, _, _ = extracted.get(ZERO_COPY_GATHER, sources=True)
    copy = tmp_path / "r"
    shutil.copytree(repro, copy)
    table = Capture.open(copy).snapshotted_host_regions[0]
    h = next(x for x in table.pre if x)
    blob = copy / "capture" / "blobs" / f"{h}.bin"
    data = bytearray(blob.read_bytes())
    data[100] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(CaptureFormatError) as exc:
        with ReplayClient(copy) as rc:
            rc.validate()
    msg = exc.value.message
    assert str(blob) in msg and f"host region {table.id} pre-state chunk 0" in msg, msg


# -- sparse regions ----------------------------------------------------------------------------


def test_a_mostly_empty_arena_is_stored_and_replayed_sparsely(extracted, variant_cubins, monkeypatch):
    from kerncap.replay.client import ReplayClient

    repro, cap, report, _ = extracted.get(SPARSE_ARENA, sources=True)
    arena = cap.region_of(report["arena"])
    assert arena.size == report["arena_bytes"] and arena.written
    sizes = cap.provenance["bytes"]
    data = report["data_bytes"]
    # Stored: the data (pre = post) and the output chunk (post only); the pre-state's zeros
    # are known by fingerprint, never copied (the post-state's are "unchanged").
    assert data <= sizes["stored"] <= data + 8 * MiB, sizes
    assert sizes.get("zero", 0) >= arena.size - data - 8 * MiB, sizes
    with ReplayClient(repro) as rc:
        v = rc.validate()
        info = rc.info
        assert v.passed, failing(v)
        segments = info["sparse"][str(arena.id)]
        backed = sum(n for _, n in segments)
        assert data <= backed <= data + 16 * MiB, segments
        note = next(n for n in v.notes if n.startswith("sparse replay:"))
        print(note)
        read_only = "read-only" in note
        try:
            stray = rc.validate(cubin=variant_cubins / "arena_stray.cubin")
        except KerncapError as exc:
            assert read_only, f"faulted although the zero backing is writable: {exc}"
            msg = exc.message
            assert "ILLEGAL_ADDRESS" in msg and f"Region(s) {arena.id} replay sparsely" in msg, msg
            assert "the variant writes outside what the captured kernel wrote" in msg, msg
        else:  # the driver refused read-only access: the stray write shows in the compare
            assert not read_only, "a write into read-only zero backing did not fault"
            bad = [c for c in stray.regions if not c.passed]
            assert [c.id for c in bad] == [arena.id] and bad[0].unexpected_write is False, failing(stray)
        assert rc.validate().passed  # a fresh server after the fault
    recompile_validates(repro)
    monkeypatch.setenv("KERNCAP_SPARSE", "0")  # the same capture restored whole agrees
    with ReplayClient(repro) as rc:
        dense = rc.validate()
        assert dense.passed and not rc.info["sparse"], failing(dense)


def test_jax_gemm_fusion_with_default_preallocation(extracted, tmp_path):
    from kerncap import api
    from kerncap.replay.client import ReplayClient

    spec = JAX_GEMM
    prof = api.profile(spec.command(extracted.build), env=app_env(spec, tmp_path), timeout=spec.timeout)
    kernel = pick_gemm(prof)
    print(f"jax_gemm: kernels {[(k.name, k.calls) for k in prof.kernels[:6]]}; extracting {kernel}")
    repro, cap, report, _ = extracted.get(spec, kernel=kernel, match="exact")
    big = max(cap.regions, key=lambda r: r.size)
    assert big.size >= 50 * GiB, f"JAX's arena was not preallocated: largest region {big.size / GiB:.1f} GiB"
    assert cap.provenance["bytes"]["stored"] < 2 * GiB
    assert any("XLA" in w for w in cap.warnings), cap.warnings
    with ReplayClient(repro) as rc:
        v = rc.validate()
        assert str(big.id) in rc.info["sparse"], rc.info["sparse"]
    assert v.passed, failing(v)


def test_triton_paged_attention_over_a_kv_cache_at_90_percent(extracted):
    from kerncap.replay.client import ReplayClient
    from kerncap.triton import recompile

    repro, cap, report, _ = extracted.get(PAGED_ATTENTION)
    cache = cap.region_of(report["cache"])
    assert cache.size >= report["cache_bytes"] >= 50 * GiB, (cache.size, report["cache_bytes"])
    assert cap.provenance["bytes"]["stored"] < 4 * GiB
    assert not cache.written and cap.region_of(report["out"]).written
    with ReplayClient(repro) as rc:
        v = rc.validate()
        assert str(cache.id) in rc.info["sparse"]
        assert v.passed, failing(v)
        res = recompile(repro)
        assert rc.validate(cubin=res.cubin).passed, res.log
