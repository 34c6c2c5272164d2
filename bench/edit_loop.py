"""The edit loop, save to validated result: the workbench against the engine doing the same
steps, and the warm Triton compile worker against a fresh process, in one run.

    PYTHONPATH=engine:. python3 bench/edit_loop.py [--repeat 3] [--only cuda,triton,big]
        [--build-dir DIR] [--json F]

cuda    smooth (testapps, with its sources): --repeat saves of the kernel's header in the
        real workbench (Textual's Pilot, the app's own watchdog observer), each a new
        source (the hoisted-check edit and the original in turn, plus a comment naming
        the save, so none is "unchanged"): write -> validated history row, the compile
        time the row records, and their difference, the loop's overhead (goal <= 1 s; it
        was tests/gpu/test_tui_loop.py's bound). Baseline, same run, same sources:
        kerncap.api recompile + replay (20 iterations) + validate on a warm replay
        server; ratio workbench / engine (the workbench also validates on perturbed
        inputs and times with an interval, so the ratio is above 1).
triton  triton_flash_attn's Q-hoisting edit: workbench save -> validated row once the
        compile worker is warm (goal <= 2 s: tests/gpu/test_tui_triton_loop.py's bound),
        and the compile alone: a fresh `kerncap recompile` process with a Triton cache of
        its own (baseline) against the warm worker (each edit new to Triton's cache).
big     qmatvec (96 instances in one TU): edit -> reduced recompile + replay + validate
        (goal <= 5 s: tests/gpu/test_recompile_big.py's bound) against the same loop with
        a full recompile of the file (goal: reduced >= 5x faster to compile).

Medians of --repeat, interleaved where two things are compared. Run on the GPU machine
with kerncap installed (bash tests/gpu/run.sh sets it up); it reuses the GPU suite's
helpers (tests/gpu), so run it from the repository root.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REPO, build_testapps, print_table, timed, verdict, write_json

sys.path.insert(0, str(REPO))  # tests.gpu: the suite's app table, extract helpers and workbench driver

CUDA_OVERHEAD_GOAL_S = 1.0
TRITON_GOAL_S = 2.0
BIG_LOOP_GOAL_S = 5.0
BIG_RATIO_GOAL = 5.0


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def engine_loop(repro: Path, rc, *, mode: str | None = None) -> tuple[float, float]:
    """recompile + replay + validate through the engine: (loop seconds, compile seconds)."""
    from kerncap import api

    def steps():
        r = api.recompile(repro, mode=mode or "auto")
        rc.replay(cubin=r.cubin, iterations=20)
        v = rc.validate(cubin=r.cubin)
        if not v.passed:
            sys.exit(f"{repro}: the engine's build of this source did not validate: {v.to_dict()}")
        return r.seconds
    seconds, compile_s = timed(steps)
    return seconds, compile_s


def workbench_saves(repro: Path, sources: list[str], path: Path) -> list[tuple[float, float]]:
    """(write -> row seconds, compile seconds) of each save of `sources` into `path` in
    the real workbench (tests/gpu/test_tui_loop.py's driver: it checks each row passes)."""
    from tests.gpu.test_tui_loop import run_workbench

    out = []

    async def steps(wb) -> None:
        # a Triton reproducer: edit once the session's compile worker is warm, as a user would
        warm = await asyncio.to_thread(wb.app.session.wait_warm)
        if warm is not None:
            if not warm.get("ok"):
                sys.exit(f"the Triton compile worker did not warm up: {warm}")
        for n, text in enumerate(sources):
            v = await wb.good_save(lambda: path.write_text(text), f"save {n + 1}")
            out.append((wb.last_elapsed, v.build_seconds))

    asyncio.run(run_workbench(repro, steps))
    return out


def unique(text: str, n: int, anchor: str, comment: str) -> str:
    """`text` with a comment naming save n after the first `anchor`: a new source every save."""
    if anchor not in text:
        sys.exit(f"the bench's anchor {anchor!r} is not in the source")
    return text.replace(anchor, f"{anchor}{comment} kerncap bench save {n}", 1)


def bench_cuda(args, build: Path, work: Path) -> dict:
    from kerncap.capture.extract import extract
    from kerncap.replay.client import ReplayClient

    from tests.gpu.apps import TESTAPPS
    from tests.gpu.smooth_edits import FAST_BODY, ORIGINAL_LOOP, SMOOTH_MANGLED, kernel_header

    res = extract(SMOOTH_MANGLED, [str(build / "smooth"), str(1 << 20)], output=work / "smooth", match="exact",
                  source_dir=TESTAPPS / "cuda", build_dir=build, timeout=120)
    repro = Path(res.reproducer_dir)
    header = kernel_header(repro)
    original = header.read_text()
    sources = [unique(original.replace(ORIGINAL_LOOP, FAST_BODY) if n % 2 == 0 else original, n, "acc;", " //")
               for n in range(2 * args.repeat)]
    engine_s = []
    with ReplayClient(repro) as rc:
        rc.validate()
        for text in sources:
            header.write_text(text)
            engine_s.append(engine_loop(repro, rc)[0])
    header.write_text(original)
    copy = work / "smooth-workbench"
    shutil.copytree(repro, copy)
    saves = workbench_saves(copy, sources, kernel_header(copy))
    rows = [s for s, _ in saves]
    overhead = [s - c for s, c in saves]
    fig = {"workbench_row_s": med(rows), "workbench_compile_s": med([c for _, c in saves]),
           "overhead_s": med(overhead), "engine_loop_s": med(engine_s), "saves": len(saves)}
    fig["ratio_workbench_over_engine"] = fig["workbench_row_s"] / fig["engine_loop_s"]
    fig["goal_met"] = fig["overhead_s"] <= CUDA_OVERHEAD_GOAL_S
    return fig


def bench_triton(args, build: Path, work: Path) -> dict:
    from kerncap.triton.worker import CompileWorker

    from tests.gpu.conftest import Captures
    from tests.gpu.test_triton_repro import FASTER_EDITS, triton_reproducer

    captures = Captures(build, work / "captures")
    repro = work / "flash"
    shutil.copytree(triton_reproducer(captures, "triton_flash_attn"), repro)
    kernel = repro / "source" / "kernel.py"
    original = kernel.read_text()
    edited = original
    for old, new in FASTER_EDITS["triton_flash_attn"]:
        edited = edited.replace(old, new)
    anchor = "tl.program_id(0)"  # a comment inside the kernel: a new key in Triton's cache each time
    env = dict(os.environ, TRITON_CACHE_DIR=str(work / "triton-cache"))
    os.environ["TRITON_CACHE_DIR"] = env["TRITON_CACHE_DIR"]
    cold, warm = [], []
    with CompileWorker(repro) as worker:
        if not worker.wait_ready().get("ok"):
            sys.exit(f"the Triton compile worker did not warm up: {worker.warmup}")
        for n in range(args.repeat):  # interleaved: a fresh process, then the warm worker, each on a new source
            kernel.write_text(unique(edited, 2 * n, anchor, "  #"))
            cache = work / f"cold-cache-{n}"
            t, proc = timed(lambda: subprocess.run([sys.executable, "-m", "kerncap", "recompile", str(repro)],
                                                   env={**env, "TRITON_CACHE_DIR": str(cache)},
                                                   capture_output=True, text=True))
            if proc.returncode != 0:
                sys.exit(f"kerncap recompile failed:\n{proc.stderr[-3000:]}")
            cold.append(t)
            kernel.write_text(unique(edited, 2 * n + 1, anchor, "  #"))
            warm.append(timed(worker.recompile)[0])
    kernel.write_text(original)
    saves = workbench_saves(repro, [unique(edited, 1000 + n, anchor, "  #") for n in range(args.repeat)], kernel)
    fig = {"workbench_row_s": med([s for s, _ in saves]), "workbench_compile_s": med([c for _, c in saves]),
           "cold_process_s": med(cold), "warm_worker_s": med(warm), "saves": len(saves)}
    fig["ratio_warm_over_cold"] = fig["warm_worker_s"] / fig["cold_process_s"]
    fig["goal_met"] = fig["workbench_row_s"] <= TRITON_GOAL_S
    return fig


def bench_big(args, build: Path, work: Path) -> dict:
    from kerncap.replay.client import ReplayClient

    from tests.gpu.apps import BIG_TU
    from tests.gpu.test_recompile_big import EDIT, extract_with_sources

    (work / "qmatvec").mkdir()
    repro = extract_with_sources(BIG_TU, build, work / "qmatvec")
    source = repro / "source" / "big_tu" / "qmatvec.cu"
    original = source.read_text()
    loops = {"reduced": [], "full": []}
    compiles = {"reduced": [], "full": []}
    with ReplayClient(repro) as rc:
        rc.validate()
        for n in range(args.repeat):  # interleaved, each on the edited file
            source.write_text(original.replace(*EDIT) if n % 2 == 0 else original)
            for mode in ("reduced", "full"):
                loop_s, compile_s = engine_loop(repro, rc, mode=mode)
                loops[mode].append(loop_s)
                compiles[mode].append(compile_s)
    source.write_text(original)
    fig = {"reduced_loop_s": med(loops["reduced"]), "full_loop_s": med(loops["full"]),
           "reduced_compile_s": med(compiles["reduced"]), "full_compile_s": med(compiles["full"])}
    fig["ratio_full_over_reduced_compile"] = fig["full_compile_s"] / fig["reduced_compile_s"]
    fig["goal_met"] = fig["reduced_loop_s"] <= BIG_LOOP_GOAL_S and fig["ratio_full_over_reduced_compile"] >= BIG_RATIO_GOAL
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="cuda,triton,big", help="comma-separated: cuda, triton, big")
    ap.add_argument("--build-dir", type=Path, help="build testapps/ here (reused when it exists)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    parts = [p for p in args.only.split(",") if p]
    unknown = set(parts) - {"cuda", "triton", "big"}
    if unknown or args.repeat < 1:
        ap.error(f"--only takes cuda, triton, big (not {sorted(unknown)}); --repeat >= 1")
    with tempfile.TemporaryDirectory(prefix="kerncap-bench-loop-") as tmp:
        work = Path(tmp)
        build = build_testapps(args.build_dir or work / "testapps")
        figures = {}
        rows = []
        if "cuda" in parts:
            f = figures["cuda"] = bench_cuda(args, build, work)
            rows += [["cuda smooth: save -> validated row (workbench)", f"{f['workbench_row_s']:.3f} s", ""],
                     ["  of which the compile", f"{f['workbench_compile_s']:.3f} s", ""],
                     ["  loop overhead (row - compile)", f"{f['overhead_s']:.3f} s",
                      f"<= {CUDA_OVERHEAD_GOAL_S:g} s {verdict(f['goal_met'])}"],
                     ["  baseline: engine recompile+replay+validate", f"{f['engine_loop_s']:.3f} s",
                      f"workbench/engine {f['ratio_workbench_over_engine']:.2f}x"]]
        if "triton" in parts:
            f = figures["triton"] = bench_triton(args, build, work)
            rows += [["triton flash: save -> validated row (warm worker)", f"{f['workbench_row_s']:.3f} s",
                      f"<= {TRITON_GOAL_S:g} s {verdict(f['goal_met'])}"],
                     ["  compile: fresh `kerncap recompile` process", f"{f['cold_process_s']:.3f} s", "baseline"],
                     ["  compile: warm worker", f"{f['warm_worker_s']:.3f} s",
                      f"warm/cold {f['ratio_warm_over_cold']:.2f}x"]]
        if "big" in parts:
            f = figures["big"] = bench_big(args, build, work)
            rows += [["qmatvec: edit -> validated, reduced recompile", f"{f['reduced_loop_s']:.3f} s",
                      f"<= {BIG_LOOP_GOAL_S:g} s"],
                     ["  the same loop, full recompile (baseline)", f"{f['full_loop_s']:.3f} s", ""],
                     ["  compile: full / reduced", f"{f['ratio_full_over_reduced_compile']:.1f}x",
                      f">= {BIG_RATIO_GOAL:g}x; both goals {verdict(f['goal_met'])}"]]
    print(f"edit loop, medians of {args.repeat}")
    print_table(["what", "median", "against"], rows)
    write_json(args.json, {"repeat": args.repeat, **figures})


if __name__ == "__main__":
    main()
