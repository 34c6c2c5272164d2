"""Unpacking a legitimate large reproducer: issue 26's checks (streamed payloads, plain
files through O_NOFOLLOW descriptors, limits, the manifest's chunks) against the code
before them, interleaved.

    PYTHONPATH=engine python3 bench/unpack.py [--gb 20] [--dir /fast/disk] [--repeat 3]
                                              [--baseline 21b6496] [--json F]

1. A synthetic reproducer shaped like a real capture: the real axpy_small capture's kernel,
   launch and cubin, with regions of 4 MiB chunks that are incompressible (random bytes,
   each chunk distinct) plus all-zero chunks (null in the manifest, as the interposer
   writes them: 1 in 8 here), --gb of stored chunks in all; labelled synthetic.
2. Packed with kerncap's own `pack` (this checkout), then the directory is removed: the
   disk holds the pack (~--gb) and one unpacked copy at a time (peak ~2 x --gb).
3. `kerncap unpack` of that pack, each run a fresh process, alternating this checkout and
   the baseline revision (a `git worktree` of --baseline, removed at the end), the order
   swapped every round; `sync` between runs (not timed). Prints each run, the medians, the
   ratio new/old with a 90 % bootstrap interval (goal <= 1.2x: met when the whole interval
   is under it) and each side's peak memory.

CPU-only (no GPU). Needs about 2.1 x --gb free on --dir and refuses to start otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, median, print_table, ratio_interval, verdict, write_json

sys.path.insert(0, str(REPO / "engine"))

import xxhash  # noqa: E402

from kerncap import api  # noqa: E402

AXPY = REPO / "tests" / "fixtures" / "captures" / "axpy_small"
CHUNK = 4 << 20
REGION_CHUNKS = 256  # 1 GiB regions
ZERO_EVERY = 8


def make_reproducer(dst: Path, gb: float) -> tuple[int, int]:
    """(stored chunks, zero chunks) of a synthetic reproducer of `gb` GB of stored chunks."""
    shutil.copytree(AXPY, dst)
    cap = dst / "capture"
    for blob in (cap / "blobs").iterdir():
        blob.unlink()
    m = json.loads((cap / "manifest.json").read_text())
    template = m["regions"][0]
    pool = os.urandom(64 << 20)
    rng = random.Random(26)
    want = int(gb * 1e9) // CHUNK
    regions, stored, zeros, base = [], 0, 0, template["base"]
    while stored < want:
        chunks = []
        for _ in range(REGION_CHUNKS):
            if stored >= want:
                break
            if len(chunks) % ZERO_EVERY == ZERO_EVERY - 1:
                chunks.append(None)
                zeros += 1
                continue
            at = rng.randrange(len(pool) - CHUNK)
            data = stored.to_bytes(8, "little") + pool[at + 8: at + CHUNK]  # distinct, incompressible
            h = xxhash.xxh64_hexdigest(data)
            (cap / "blobs" / f"{h}.bin").write_bytes(data)
            chunks.append(h)
            stored += 1
        size = len(chunks) * CHUNK
        regions.append({**template, "id": len(regions), "base": base, "size": size, "pre": chunks,
                        "post": list(chunks), "zero_fraction": chunks.count(None) / len(chunks), "written": False})
        base += (size + (64 << 20)) // (32 << 20) * (32 << 20)
    m["regions"] = regions
    m["chunk_size"] = CHUNK
    m["provenance"]["synthetic"] = "bench/unpack.py: generated regions (random and zero chunks)"
    (cap / "manifest.json").write_text(json.dumps(m))
    return stored, zeros


def run_unpack(engine: Path, pack: Path, out: Path) -> tuple[float, float, int]:
    """(seconds, CPU seconds, peak RSS bytes) of `kerncap unpack` run from `engine` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(engine)}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "kerncap", "unpack", str(pack), "-o", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"unpack with {engine} failed ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=20.0, help="stored chunks of the reproducer (default 20)")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--repeat", type=int, default=3, help="runs of each side (default 3)")
    ap.add_argument("--baseline", default="21b6496", help="git revision of the old code (default 21b6496)")
    ap.add_argument("--json", help="write the numbers here")
    args = ap.parse_args()

    need = 2.1 * args.gb * 1e9
    free = shutil.disk_usage(args.dir).free
    if free < need:
        sys.exit(f"{args.dir} has {free / 1e9:.1f} GB free; this bench needs {need / 1e9:.1f} GB")
    work = Path(tempfile.mkdtemp(prefix="kerncap-bench-unpack-", dir=args.dir))
    baseline = work / "baseline"
    peak = 0
    try:
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(baseline), args.baseline],
                       check=True)
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        t0 = time.perf_counter()
        stored, zeros = make_reproducer(work / "src", args.gb)
        print(f"reproducer: {stored} chunks of 4 MiB stored ({stored * CHUNK / 1e9:.1f} GB), {zeros} zero chunks "
              f"elided, in {time.perf_counter() - t0:.0f} s")
        t0 = time.perf_counter()
        packed = api.pack(work / "src", work / "src.kcap")
        print(f"packed with this checkout ({rev}): {packed.packed / 1e9:.1f} GB in {time.perf_counter() - t0:.0f} s")
        peak = max(peak, packed.packed + packed.stored)
        shutil.rmtree(work / "src")
        runs: dict[str, list[float]] = {"new": [], "old": []}
        cpu: dict[str, list[float]] = {"new": [], "old": []}
        memory: dict[str, list[int]] = {"new": [], "old": []}
        engines = {"new": REPO / "engine", "old": baseline / "engine"}
        rows = []
        for r in range(args.repeat):
            for side in (("new", "old") if r % 2 == 0 else ("old", "new")):
                os.sync()
                seconds, cpu_s, rss = run_unpack(engines[side], packed.path, work / "out")
                peak = max(peak, packed.packed + sum(p.stat().st_size for p in (work / "out").rglob("*")
                                                     if p.is_file()))
                shutil.rmtree(work / "out")
                os.sync()
                runs[side].append(seconds)
                cpu[side].append(cpu_s)
                memory[side].append(rss)
                rows.append([str(r + 1), side, f"{seconds:.1f}", f"{cpu_s:.1f}", f"{packed.stored / seconds / 1e9:.2f}",
                             f"{rss / 2**20:.0f}"])
                print(f"  round {r + 1} {side}: {seconds:.1f} s ({cpu_s:.1f} s CPU), peak RSS {rss / 2**20:.0f} MiB",
                      flush=True)
        print()
        print_table(["round", "code", "seconds", "CPU s", "GB/s", "peak RSS MiB"], rows)
        ratio = median(runs["new"]) / median(runs["old"])
        lo, hi = ratio_interval(runs["new"], runs["old"])
        print()
        print(f"unpack of {packed.stored / 1e9:.1f} GB: new ({rev}) median {median(runs['new']):.1f} s, "
              f"old ({args.baseline}) median {median(runs['old']):.1f} s")
        print(f"ratio new/old {ratio:.3f} [90% interval {lo:.3f}-{hi:.3f}]; goal <= 1.2: {verdict(hi <= 1.2)}")
        cpu_ratio = median(cpu["new"]) / median(cpu["old"])
        clo, chi = ratio_interval(cpu["new"], cpu["old"])
        print(f"CPU time new/old {cpu_ratio:.3f} [90% interval {clo:.3f}-{chi:.3f}]")
        print(f"peak memory new {max(memory['new']) / 2**20:.0f} MiB, old {max(memory['old']) / 2**20:.0f} MiB; "
              f"disk peak {peak / 1e9:.1f} GB")
        write_json(args.json, {"gb": packed.stored / 1e9, "new": runs["new"], "old": runs["old"],
                               "ratio": ratio, "interval": [lo, hi], "cpu_new": cpu["new"], "cpu_old": cpu["old"],
                               "cpu_ratio": cpu_ratio, "cpu_interval": [clo, chi], "rss_new": memory["new"],
                               "rss_old": memory["old"], "revision": rev, "baseline": args.baseline,
                               "disk_peak_bytes": peak})
    finally:
        shutil.rmtree(work / "out", ignore_errors=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(baseline)],
                       capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
