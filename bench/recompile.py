"""Kernel-only recompile vs a full rebuild of the CMake fixture project.

    PYTHONPATH=engine python3 bench/recompile.py [--repeat 3]

Builds tests/fixtures/cmake_cuda_project in a temporary copy, attaches the sources of
one kernel to a reproducer, then times `cmake --build --clean-first` against
`kerncap.recompile.cuda.recompile` (median of --repeat runs each) and prints the ratio.
Runs on a CPU-only machine (nvcc and cmake needed, no GPU).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from kerncap.reproducer.format import Capture
from kerncap.recompile.cuda import recompile
from kerncap.sources import attach_sources

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "cmake_cuda_project"
KERNEL = "_Z13bounded_saxpyfPKfPfi"
LAYOUT = [(0, 4), (8, 8), (16, 8), (24, 4)]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kerncap-bench-") as tmp:
        tree, build, repro = Path(tmp) / "proj", Path(tmp) / "proj" / "build", Path(tmp) / "repro"
        shutil.copytree(FIXTURE, tree)
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        run(["cmake", "-S", str(tree), "-B", str(build), *generator])
        run(["cmake", "--build", str(build)])
        (repro / "capture").mkdir(parents=True)
        params = [{"index": i, "offset": o, "size": s, "value": "00" * s} for i, (o, s) in enumerate(LAYOUT)]
        (repro / "capture" / "manifest.json").write_text(json.dumps({
            "format": "kerncap-capture", "format_version": 1, "complete": True, "chunk_size": 4194304,
            "provenance": {"gpu": {"cc": [9, 0]}}, "kernel": {"name": KERNEL, "module": {"cubin": "cubins/x.cubin"}},
            "launch": {}, "params": params, "regions": [], "globals": [],
        }))
        attach_sources(repro, Capture.open(repro), tree, build)

        full = [timed(lambda: run(["cmake", "--build", str(build), "--clean-first", "-j", "2"])) for _ in range(args.repeat)]
        one = [recompile(repro).seconds for _ in range(args.repeat)]
    f, o = statistics.median(full), statistics.median(one)
    print(f"full rebuild (5 TUs, -j2)   median {f:6.2f} s  over {args.repeat}")
    print(f"kernel-only recompile       median {o:6.2f} s  over {args.repeat}")
    print(f"ratio full/kernel-only      {f / o:6.1f}x")


if __name__ == "__main__":
    main()
