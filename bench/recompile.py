"""Kernel-only recompile: against a full rebuild of a project, and reduced against full
on big translation units.

    PYTHONPATH=engine python3 bench/recompile.py [--repeat 3] [--only project|tu]

project: builds tests/fixtures/cmake_cuda_project in a temporary copy, attaches the
sources of one kernel to a reproducer, then times `cmake --build --clean-first` against
`kerncap.recompile.recompile` (median of --repeat runs each) and prints the ratio.

tu: reproducers of one kernel of testapps' big translation unit (96 instances of a
ggml-style mat-vec template) and of its thrust TU (tests/tu_reproducer.py); per TU,
interleaved runs of the reduced recompile (only what the captured kernel needs) and the
full one (the whole TU, as before issue 18), unmodified and after an edit of the kernel;
medians, their ratio and where the reduced compile's time went.

Runs on a CPU-only machine (nvcc and cmake needed, no GPU).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO as ROOT  # noqa: E402  (puts engine/ on sys.path when kerncap is not installed)

sys.path.insert(0, str(ROOT / "tests"))  # tu_reproducer

from kerncap.recompile import recompile  # noqa: E402
from kerncap.reproducer.format import Capture  # noqa: E402
from kerncap.sources import attach_sources  # noqa: E402

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
    ap.add_argument("--only", choices=["project", "tu"])
    ap.add_argument("--json", type=Path, help="write the big-TU figures here")
    args = ap.parse_args()
    if args.only != "tu":
        project(args)
    if args.only != "project":
        translation_units(args)


# The edit timed per TU: it changes the kernel's code (an unrolled loop no longer
# unrolled), not its results.
EDITS = {
    "big_tu/qmatvec.cu": ("#pragma unroll\n      for (int l = 0; l < nwarps - 1; ++l)",
                          "#pragma unroll 1\n      for (int l = 0; l < nwarps - 1; ++l)"),
    "functor_thrust/functor_thrust.cu": ("out[i] = 0.25f * left + 0.5f * in[i] + 0.25f * right;",
                                         "out[i] = 0.25f * left + 0.5f * in[i] + 0.25f * right;  // edited"),
}


def translation_units(args) -> None:
    from tu_reproducer import BIG_FILES, BIG_KERNEL, CUDA, FUNCTOR_FILES, FUNCTOR_KERNEL, make_reproducer

    results = {}
    with tempfile.TemporaryDirectory(prefix="kerncap-bench-tu-") as tmp:
        for label, files, kernel in (("big TU, 96 instances", BIG_FILES, BIG_KERNEL),
                                     ("thrust TU, functor kernel", FUNCTOR_FILES, FUNCTOR_KERNEL)):
            repro, _, captured_s = make_reproducer(Path(tmp) / label.split(",")[0].replace(" ", "-"), CUDA, files[0],
                                                   files, kernel)
            source = repro / "source" / files[0]
            original = source.read_text()
            old, new = EDITS[files[0]]
            assert original.count(old) == 1, f"{files[0]}: the bench's edit no longer applies"
            times: dict[str, list[float]] = {k: [] for k in ("reduced", "full", "reduced, edited", "full, edited")}
            phases = {}
            for _ in range(args.repeat):  # interleaved
                for edited in (False, True):
                    source.write_text(original.replace(old, new) if edited else original)
                    for mode in ("reduced", "full"):
                        r = recompile(repro, mode=mode)
                        times[mode + (", edited" if edited else "")].append(r.seconds)
                        if mode == "reduced":
                            phases = r.phases
            med = {k: statistics.median(v) for k, v in times.items()}
            ratio = med["full, edited"] / med["reduced, edited"]
            print(f"{label}: reduced {med['reduced']:.2f} s, full {med['full']:.2f} s; after an edit: reduced "
                  f"{med['reduced, edited']:.2f} s, full {med['full, edited']:.2f} s -> {ratio:.1f}x "
                  f"(medians of {args.repeat}, interleaved; nvcc -cubin of the original took {captured_s:.2f} s)")
            print("    reduced: " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()))
            results[label] = {"medians_s": med, "ratio_full_over_reduced_edited": ratio, "reduced_phases_s": phases,
                              "repeat": args.repeat}
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


def project(args) -> None:
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
            "provenance": {"synthetic": True, "gpu": {"cc": [9, 0]}}, "kernel": {"name": KERNEL, "module": {"cubin": "cubins/x.cubin"}},
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
