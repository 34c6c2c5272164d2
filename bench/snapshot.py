"""Snapshot throughput of a capture that holds >= 8 GB of device memory.

Extracts kc_touch from testapps/python/big_alloc.py twice: with the 8 GB filled with
zeros (chunks elided: goal >= 10 GB/s) and with random bytes (every chunk stored: bound
by the disk). Rates are logical bytes moved, pre- plus post-state (provenance.bytes.snapshotted), over the capture time
the interposer recorded (provenance.capture_seconds.total). The disk's own write speed
is measured in the same run (2 GB, buffered and with fsync) on the output's file system.

  python3 bench/snapshot.py [--gb 8] [--dir DIR] [--json F]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from common import PYAPPS, print_table, timed, verdict, write_json

GB = 1e9
ZEROS_GOAL_GBPS = 10.0


def disk_write_speed(directory: Path, total: int = 2 << 30, block: int = 64 << 20) -> dict:
    """GB/s writing `total` random bytes: buffered (close, no fsync) and fsync'd."""
    data = os.urandom(block)
    speeds = {}
    for label, sync in (("buffered", False), ("fsync", True)):
        path = directory / f"disk-probe-{label}.bin"
        t0 = time.perf_counter()
        with open(path, "wb", buffering=0) as f:
            for _ in range(total // block):
                f.write(data)
            if sync:
                os.fsync(f.fileno())
        speeds[label] = total / (time.perf_counter() - t0) / GB
        path.unlink()
    return speeds


def capture_big_alloc(fill: str, gb: int, directory: Path) -> dict:
    from kerncap.reproducer.format import Capture
    from kerncap.capture.extract import extract

    output = directory / f"big-{fill}"
    command = [sys.executable, str(PYAPPS / "big_alloc.py"), "--gb", str(gb), "--fill", fill]
    wall, result = timed(lambda: extract("kc_touch", command, output=output, timeout=600, output_sink=lambda *_: None))
    prov = Capture.open(result.reproducer_dir).provenance
    seconds = prov["capture_seconds"]
    size = prov["bytes"]
    shutil.rmtree(output, ignore_errors=True)
    return {
        "fill": fill, "extract_wall_s": wall, "capture_seconds": seconds, "bytes": size,
        "logical_gbps": size["snapshotted"] / seconds["total"] / GB,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=int, default=8, help="GiB the app allocates (default 8)")
    parser.add_argument("--dir", type=Path, default=None, help="where captures are written (default: a temp dir)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="kerncap-snapshot-", dir=args.dir))
    try:
        disk = disk_write_speed(base)
        runs = [capture_big_alloc(fill, args.gb, base) for fill in ("zeros", "random")]
    finally:
        shutil.rmtree(base, ignore_errors=True)

    rows = []
    for r in runs:
        s = r["capture_seconds"]
        if r["fill"] == "zeros":
            r["goal"] = f">= {ZEROS_GOAL_GBPS:g} GB/s"
            r["met"] = r["logical_gbps"] >= ZEROS_GOAL_GBPS
        else:
            r["ratio_to_disk"] = r["logical_gbps"] / disk["buffered"]
            r["goal"] = f"~ disk ({disk['buffered']:.2f} GB/s buffered)"
            r["met"] = r["ratio_to_disk"] >= 0.9
        rows.append([r["fill"], f"{r['bytes']['logical'] / GB:.2f}", f"{r['bytes']['stored'] / GB:.2f}",
                     f"{s['pre']:.2f}", f"{s['post']:.2f}", f"{s['total']:.2f}", f"{r['extract_wall_s']:.1f}",
                     f"{r['logical_gbps']:.2f}", r["goal"], verdict(r["met"])])
    print(f"disk write ({base.parent}): {disk['buffered']:.2f} GB/s buffered, {disk['fsync']:.2f} GB/s with fsync")
    print_table(["fill", "logical GB", "stored GB", "pre s", "post s", "total s", "extract s", "GB/s", "goal", ""],
                rows)
    write_json(args.json, {"bench": "snapshot", "gb": args.gb, "disk_gbps": disk, "runs": runs})


if __name__ == "__main__":
    main()
