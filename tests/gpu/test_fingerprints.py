"""Chunk fingerprints (native/capture/chunk_fingerprint.*): a snapshot copies only the
chunks whose GPU fingerprint differs from the last snapshot's. The same set of captures
made with and without fingerprints must record the same chunk hashes, region for region,
while the fingerprinted run reads a fraction of the bytes; and a single capture's
post-state keeps the unchanged input without reading it."""

from __future__ import annotations

import json

import pytest

from .apps import TESTAPPS, app_env

pytestmark = pytest.mark.gpu

BALLAST_MIB = 256


def app_env_for(work, **extra):
    from .test_buckets import BUCKETS

    return app_env(BUCKETS, work, **extra)


def _member_manifests(result) -> list[dict]:
    out = []
    for m in sorted(result.set.members, key=lambda m: m.dispatch):
        out.append(json.loads((m.path / "capture" / "manifest.json").read_text()))
    return out


def _chunks(manifest: dict) -> list[tuple]:
    # Not the addresses: the two runs are two processes, placed apart.
    return [(r["size"], tuple(r["pre"]), tuple(r["post"]), r["written"]) for r in manifest["regions"]]


def test_fingerprinted_set_records_the_same_chunks(testapps_build, tmp_path):
    from kerncap.capture.extract import extract

    command = [str(testapps_build / "buckets"), "default", str(BALLAST_MIB)]
    runs = {}
    for label, value in (("fingerprint", "1"), ("copy", "0")):
        work = tmp_path / label
        work.mkdir()
        env = app_env_for(work, KERNCAP_FINGERPRINT=value)
        runs[label] = extract("bk_scale", command, output=work / "set", dispatch=[0, 1, 2, 3], timeout=240,
                              env=env, source_dir=TESTAPPS / "cuda", build_dir=testapps_build)
    fp, copy = (_member_manifests(runs[k]) for k in ("fingerprint", "copy"))
    assert len(fp) == len(copy) == 4
    for k, (a, b) in enumerate(zip(fp, copy)):
        assert _chunks(a) == _chunks(b), f"member {k}: fingerprinted chunks differ from copied ones"
    read = {k: [m["provenance"]["bytes"] for m in ms] for k, ms in (("fingerprint", fp), ("copy", copy))}
    print("\nbytes per member (fingerprint):", read["fingerprint"])
    print("bytes per member (copy):       ", read["copy"])
    assert all(b.get("unchanged", 0) == 0 for b in read["copy"])
    # the ballast is unchanged from snapshot to snapshot: after the first pre-state, only
    # what the app and the kernel wrote is read
    assert all(b["unchanged"] >= BALLAST_MIB << 20 for b in read["fingerprint"])
    total_fp = sum(b["snapshotted"] for b in read["fingerprint"])
    total_copy = sum(b["snapshotted"] for b in read["copy"])
    print(f"read from the GPU: {total_fp} bytes with fingerprints, {total_copy} without")
    assert total_fp < total_copy / 3


def test_single_capture_post_state_skips_unchanged_input(captures):
    """axpy_inplace: y += a*x; x is read, not written: its post-state chunks are known
    unchanged by fingerprint, and the capture validates byte-exact (the suite's others
    check that on every app)."""
    from kerncap.reproducer.format import Capture

    cap = Capture.open(captures.get("axpy_inplace").reproducer / "capture")
    b = cap.manifest["provenance"]["bytes"]
    print("\naxpy_inplace bytes:", b)
    x_bytes = min(r.size for r in cap.regions if r.size >= 1 << 20)
    assert b["unchanged"] >= x_bytes
    assert b["snapshotted"] + b["unchanged"] == 2 * b["logical"] + sum(g.size for g in cap.globals) * 2
