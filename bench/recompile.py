"""Kernel-only recompile: against a full rebuild of a project, and reduced against full
on big translation units.

    PYTHONPATH=engine python3 bench/recompile.py [--repeat 3] [--only project|tu|apps]

project: builds tests/fixtures/cmake_cuda_project in a temporary copy, attaches the
sources of one kernel to a reproducer, then times `cmake --build --clean-first` against
`kerncap.recompile.recompile` (median of --repeat runs each) and prints the ratio.

tu: reproducers of one kernel of testapps' big translation unit (96 instances of a
ggml-style mat-vec template) and of its thrust TU (tests/tu_reproducer.py); per TU,
interleaved runs of the reduced recompile (only what the captured kernel needs) and the
full one (the whole TU, as before issue 18), unmodified and after an edit of the kernel;
medians, their ratio and where the reduced compile's time went.

apps: every kernel of every CUDA C++ app of the GPU suite (testapps/cuda/**/*.cu but the
replay variants, testapps/CMakeLists.txt) recompiled from a reproducer of its TU in the
default mode; lists per kernel whether it compiled reduced or fell back, and why (issue 43:
none should fall back), and whether the kernel's code (its .text) is the captured
(whole-TU) compile's. Exits 1 when one falls back or differs.

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
    ap.add_argument("--only", choices=["project", "tu", "apps"])
    ap.add_argument("--json", type=Path, help="write the big-TU figures here")
    args = ap.parse_args()
    if args.only in (None, "project"):
        project(args)
    if args.only in (None, "tu"):
        translation_units(args)
    if args.only in (None, "apps") and not apps():
        sys.exit(1)


# Flags an app's TU needs beyond testapps/CMakeLists.txt's common ones (its target_compile_options).
APP_FLAGS = {"graph_device.cu": ["-rdc=true"], "ptsz_stream.cu": ["--default-stream=per-thread"]}


PER_TU = 4  # kernels recompiled per app TU


def apps() -> bool:
    """Each kernel of each GPU-suite app, recompiled in the default mode: reduced, or the
    fallback and its reason. True when none fell back."""
    from tu_reproducer import CUDA, kernel_text, make_reproducer

    from kerncap.errors import KerncapError
    from kerncap.sources import cubin as cubinfo
    from kerncap.sources.includes import trace_includes

    tus = sorted(p for p in CUDA.rglob("*.cu") if "variants" not in p.relative_to(CUDA).parts)
    reduced = fell_back = 0
    with tempfile.TemporaryDirectory(prefix="kerncap-bench-apps-") as tmp:
        for tu in tus:
            rel = str(tu.relative_to(CUDA))
            files = [rel] + [str(h.relative_to(CUDA)) for h in trace_includes(tu, CUDA, [CUDA])]
            try:
                subprocess.run(["nvcc", f"-I{CUDA}", "-std=c++17", "-arch=sm_90", *APP_FLAGS.get(tu.name, []), "-cubin",
                                "-o", f"{tmp}/probe.cubin", str(tu)], check=True, capture_output=True, text=True)
            except subprocess.CalledProcessError as exc:
                print(f"{rel}: its cubin does not build alone ({exc.stderr.strip().splitlines()[-1][:120]})")
                continue
            kernels = sorted(cubinfo.kernel_names(cubinfo.open_elf(Path(f"{tmp}/probe.cubin").read_bytes(), rel)))
            if len(kernels) > PER_TU:  # spread over the TU's kernels (the big TU has 97)
                kernels = [kernels[round(j * (len(kernels) - 1) / (PER_TU - 1))] for j in range(PER_TU)]
            for i, kernel in enumerate(kernels):
                root = Path(tmp) / f"{tu.stem}-{i}"
                repro, captured, _ = make_reproducer(root, CUDA, rel, files, kernel, APP_FLAGS.get(tu.name, []))
                try:
                    r = recompile(repro)
                    verdict = r.mode + (f": {'; '.join(r.notes)}" if r.notes else "")
                    ok = r.mode == "reduced" and not r.notes
                    code = kernel_text(r.cubin.read_bytes(), kernel)
                    if code != kernel_text(captured, kernel):  # -rdc: the whole TU's recompile differs too
                        same = kernel_text(recompile(repro, mode="full").cubin.read_bytes(), kernel) == code
                        verdict += (", not the captured kernel's code, as the whole TU's recompile is not" if same
                                    else ", but not the whole TU's kernel code")
                        ok = ok and same
                except KerncapError as exc:
                    verdict, ok = f"failed: {exc.message.splitlines()[0][:160]}", False
                reduced += ok
                fell_back += not ok
                print(f"{'ok  ' if ok else 'FELL'} {rel} {kernel}: {verdict}", flush=True)
                shutil.rmtree(root, ignore_errors=True)
    print(f"{reduced} kernels of {len(tus)} app TUs compiled reduced, {fell_back} did not")
    return fell_back == 0


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
