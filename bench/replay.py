"""Replay server latencies: cold start on a big capture, hot variant reloads, strict validation.

Three measurements in one run, each against its goal:

1. cold   Capture kc_touch from testapps/python/big_alloc.py with --gb N (default 12)
          GiB of random bytes live (every chunk is real data), then time from starting a
          ReplayClient (server process start: reserve, map, read + upload the whole
          state, load the cubin) to the first byte-exact `validate()` that passed.
          Reported as seconds and GB/s of logical bytes (Capture.logical_bytes). No fixed
          goal; shown against the pinned H2D bound of DESIGN fact 9 (55 GB/s). The blobs
          were just written, so they are likely still in the page cache.
2. hot    Capture axpy_inplace (testapps, n = 1<<24) and, on one resident server, keep
          switching the cubin between the captured one, testapps' variants/axpy_fast.cubin
          and (when the server accepts it) a copy of axpy_fast.cubin with one NUL byte
          appended: consecutive requests always name different bytes (the server compares
          sha256), so every request reloads the module. Wall clock of
          `validate(cubin=X)` (load + restore + launch + compare + round trip) and of
          `replay(cubin=X, iterations=1, warmup=0)`, minus the kernel's own median time
          (a separate `replay(cubin=X, iterations=20)`) = overhead. Goal: median
          overhead <= 100 ms. A validate that reloads nothing is shown for reference.
3. strict Byte-exact `validate()` of the big capture on its resident server (restore +
          launch + GPU compare), --repeat times. Goal: median <= 3 s.
4. accuracy  The replayed duration against the kernel's own average in the app, both
          measured in this run: `kerncap profile` of axpy_inplace and torch_matmul (nvjet
          GEMM), then the median of 50 replays of each one's capture; and, where `ncu` is
          on PATH, Nsight Compute's duration of one replayed launch against that median.
          Goal: each ratio within 1 +- 0.10 (what test_replay_apps.py, test_graphs.py and
          test_inspect_gpu.py asserted before their timing moved here).

  PYTHONPATH=engine:bench python3 bench/replay.py [--gb 12] [--n 16777216] [--rounds 6]
      [--repeat 5] [--steps hot,big,accuracy] [--dir DIR] [--build-dir DIR] [--json F]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import PYAPPS, TESTAPPS, print_table, timed, verdict, write_json

GB = 1e9
HOT_GOAL_MS = 100.0
STRICT_GOAL_S = 3.0
H2D_GBPS = 55.0  # DESIGN fact 9: pinned ring, two streams
ACCURACY_TOLERANCE = 0.10


def quiet(*_):
    pass


def build_axpy(build_dir: Path) -> Path:
    """Configures testapps/ and builds only axpy_inplace and the cubin variants."""
    for step in (
        ["cmake", "-S", str(TESTAPPS), "-B", str(build_dir), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"],
        ["ninja", "-C", str(build_dir), "axpy_inplace", "variants"],
    ):
        proc = subprocess.run(step, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"building the test apps failed: {' '.join(step)}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return build_dir


def check_passed(v, what: str) -> None:
    if not v.passed:
        bad = ", ".join(f"{r.name}: {r.mismatched_bytes} bytes" for r in v.failures[:5])
        sys.exit(f"{what}: validation failed ({bad})")


def stats_ms(values: list[float]) -> dict:
    s = sorted(values)
    return {"median": statistics.median(s), "min": s[0], "max": s[-1], "all": values}


# -- 2. hot variant reloads --------------------------------------------------------------------
def hot_variants(args, base: Path, build_dir: Path) -> dict:
    from kerncap.reproducer.format import Capture
    from kerncap.errors import KerncapError
    from kerncap.capture.extract import extract
    from kerncap.replay.client import ReplayClient

    fast = build_dir / "variants" / "axpy_fast.cubin"
    if not fast.is_file():
        sys.exit(f"{fast} was not built")
    command = [str(build_dir / "axpy_inplace"), str(args.n)]
    extract_s, res = timed(lambda: extract("axpy_inplace", command, output=base / "axpy", timeout=120,
                                           output_sink=quiet))
    cap = Capture.open(res.reproducer_dir)
    padded = base / "axpy_fast_pad.cubin"
    padded.write_bytes(fast.read_bytes() + b"\0")

    out = {"n": args.n, "extract_s": extract_s, "captured_cubin": str(cap.cubin_path),
           "logical_bytes": cap.logical_bytes}
    with ReplayClient(res.reproducer_dir, timeout=120) as rc:
        check_passed(rc.validate(), "axpy captured cubin")
        cycle: list[tuple[str, Path | None]] = [("axpy_fast", fast), ("captured", None)]
        try:
            rc.load_variant(padded)
            check_passed(rc.validate(cubin=padded), "axpy_fast + NUL")
            cycle.append(("axpy_fast+NUL", padded))
            out["padded_variant"] = "loaded"
        except (KerncapError, SystemExit) as exc:
            out["padded_variant"] = f"rejected, alternating two cubins: {exc}"
            print(f"note: axpy_fast.cubin + 1 NUL byte not usable ({exc}); alternating two cubins")
            check_passed(rc.validate(), "axpy captured cubin after the padded variant")  # server alive again

        kernel_ms = {}
        for label, cubin in cycle:
            kernel_ms[label] = rc.replay(cubin=cubin, iterations=20, warmup=3).median_ms
        out["kernel_ms"] = kernel_ms
        starts = rc.starts

        def sweep(call) -> tuple[list[float], list[float]]:
            walls, overheads = [], []
            for _ in range(args.rounds):
                for label, cubin in cycle:  # consecutive entries differ: each call reloads
                    wall, _ = timed(lambda: call(cubin, label))
                    walls.append(wall * 1e3)
                    overheads.append(wall * 1e3 - kernel_ms[label])
            return walls, overheads

        def do_validate(cubin, label):
            check_passed(rc.validate(cubin=cubin), f"axpy {label}")

        def do_replay(cubin, _label):
            rc.replay(cubin=cubin, iterations=1, warmup=0)

        v_wall, v_over = sweep(do_validate)
        r_wall, r_over = sweep(do_replay)
        # Reference: the same cubin twice in a row, the second request reloads nothing.
        same = []
        for _ in range(args.rounds):
            rc.validate()
            wall, v = timed(lambda: rc.validate())
            check_passed(v, "axpy captured cubin (no reload)")
            same.append(wall * 1e3 - kernel_ms["captured"])
        if rc.starts != starts:
            sys.exit("the replay server restarted during the hot measurements; the figures are not hot")
    out.update({
        "cycle": [label for label, _ in cycle],
        "validate_wall_ms": stats_ms(v_wall), "validate_overhead_ms": stats_ms(v_over),
        "replay_wall_ms": stats_ms(r_wall), "replay_overhead_ms": stats_ms(r_over),
        "validate_no_reload_overhead_ms": stats_ms(same),
    })
    shutil.rmtree(base / "axpy", ignore_errors=True)
    return out


# -- 1. cold start and 3. strict validation on the big capture ----------------------------------
def big_capture(args, base: Path) -> dict:
    from kerncap.reproducer.format import Capture
    from kerncap.capture.extract import extract
    from kerncap.replay.client import ReplayClient

    command = [sys.executable, str(PYAPPS / "big_alloc.py"), "--gb", str(args.gb), "--fill", "random"]
    extract_s, res = timed(lambda: extract("kc_touch", command, output=base / "big", timeout=600,
                                           output_sink=quiet))
    cap = Capture.open(res.reproducer_dir)
    logical = cap.logical_bytes
    out = {"gb": args.gb, "extract_s": extract_s, "logical_bytes": logical, "stored_bytes": cap.stored_bytes}
    if logical < 8 * GB:
        print(f"note: the capture holds only {logical / GB:.2f} GB (< 8 GB)")

    t0 = time.perf_counter()
    rc = ReplayClient(res.reproducer_dir, timeout=600)
    try:
        info = rc.start()
        t_open = time.perf_counter()
        v = rc.validate()
        t_first = time.perf_counter()
        check_passed(v, "big capture, first validate")
        out["cold"] = {
            "seconds": t_first - t0, "open_request_s": t_open - t0, "server_open_s": info.get("open_seconds"),
            "first_validate_s": t_first - t_open, "logical_gbps": logical / (t_first - t0) / GB,
        }
        strict = []
        for _ in range(args.repeat):
            wall, v = timed(lambda: rc.validate())
            check_passed(v, "big capture, strict validate")
            strict.append(wall)
        out["strict_validate_s"] = {"median": statistics.median(strict), "min": min(strict), "max": max(strict),
                                    "all": strict}
    finally:
        rc.close()
    shutil.rmtree(base / "big", ignore_errors=True)
    return out


# -- 4. replay time against the app's own -----------------------------------------------------
def accuracy(args, base: Path, build_dir: Path) -> dict:
    from kerncap.capture.extract import extract
    from kerncap.capture.profile import run_profile
    from kerncap.replay import ncu
    from kerncap.replay.client import ReplayClient

    cases = [("axpy_inplace", [str(build_dir / "axpy_inplace"), str(args.n)], "axpy_inplace"),
             ("torch_matmul", [sys.executable, str(PYAPPS / "torch_matmul.py")], "nvjet")]
    out = {}
    for name, command, kernel in cases:
        profile = run_profile(command, timeout=300)
        hits = [k for k in profile.kernels if kernel in k.name or kernel in (k.demangled or "")]
        if not hits:
            sys.exit(f"{name}: the profile lists no kernel matching {kernel!r}")
        stat = max(hits, key=lambda k: k.total_ns)
        res = extract(kernel, command, output=base / f"acc-{name}", timeout=300, output_sink=quiet)
        with ReplayClient(res.reproducer_dir, timeout=300) as rc:
            median_ms = rc.replay(iterations=50, warmup=5).median_ms
        row = {"kernel": stat.name, "app_avg_ns": stat.avg_ns, "app_calls": stat.calls,
               "replay_median_ns": median_ms * 1e6, "ratio_replay_over_app": median_ms * 1e6 / stat.avg_ns}
        if shutil.which("ncu"):
            r = ncu.profile(res.reproducer_dir, timeout=300)
            row["ncu_duration_ns"] = r.metrics.get("duration_ns")
            if row["ncu_duration_ns"]:
                row["ratio_ncu_over_replay"] = row["ncu_duration_ns"] / (median_ms * 1e6)
        out[name] = row
        shutil.rmtree(base / f"acc-{name}", ignore_errors=True)
    return out


def within(ratio: float | None) -> bool:
    return ratio is not None and abs(ratio - 1) <= ACCURACY_TOLERANCE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=int, default=12, help="GiB big_alloc.py holds, random-filled (default 12)")
    parser.add_argument("--n", type=int, default=1 << 24, help="axpy_inplace elements (default 1<<24)")
    parser.add_argument("--rounds", type=int, default=6, help="passes over the cubin cycle (default 6)")
    parser.add_argument("--repeat", type=int, default=5, help="strict validations of the big capture (default 5)")
    parser.add_argument("--dir", type=Path, default=None, help="where captures are written (default: a temp dir)")
    parser.add_argument("--build-dir", type=Path, default=None,
                        help="testapps build directory, kept and reused (default: inside the temp dir)")
    parser.add_argument("--steps", default="hot,big,accuracy", help="which of hot, big (cold + strict), accuracy")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    steps = set(args.steps.split(","))
    if steps - {"hot", "big", "accuracy"}:
        parser.error(f"--steps takes hot, big, accuracy (not {sorted(steps - {'hot', 'big', 'accuracy'})})")

    base = Path(tempfile.mkdtemp(prefix="kerncap-replay-bench-", dir=args.dir))
    try:
        build_dir = build_axpy(args.build_dir or base / "testapps")
        acc = accuracy(args, base, build_dir) if "accuracy" in steps else None
        hot = hot_variants(args, base, build_dir) if "hot" in steps else None
        big = big_capture(args, base) if "big" in steps else None
    finally:
        shutil.rmtree(base, ignore_errors=True)

    if acc is not None:
        print_table(["app", "kernel", "app avg", "replay median", "replay/app", "ncu/replay", "goal"], [
            [name, r["kernel"][:40], f"{r['app_avg_ns'] / 1e3:.2f} us", f"{r['replay_median_ns'] / 1e3:.2f} us",
             f"{r['ratio_replay_over_app']:.3f}",
             f"{r['ratio_ncu_over_replay']:.3f}" if "ratio_ncu_over_replay" in r else "no ncu",
             f"1 +- {ACCURACY_TOLERANCE:g}: " + verdict(within(r["ratio_replay_over_app"])
                                                      and within(r.get("ratio_ncu_over_replay", 1.0)))]
            for name, r in acc.items()])
    if hot is None or big is None:
        write_json(args.json, {"bench": "replay", "args": {k: str(v) for k, v in vars(args).items()},
                               "accuracy": acc, "hot": hot, "big": big})
        return

    cold, strict = big["cold"], big["strict_validate_s"]
    lgb = big["logical_bytes"] / GB
    vo, ro, nr = hot["validate_overhead_ms"], hot["replay_overhead_ms"], hot["validate_no_reload_overhead_ms"]
    kernel = ", ".join(f"{k} {v:.3f}" for k, v in hot["kernel_ms"].items())
    results = {
        "cold_met": None,
        "hot_validate_met": vo["median"] <= HOT_GOAL_MS,
        "hot_replay_met": ro["median"] <= HOT_GOAL_MS,
        "strict_met": strict["median"] <= STRICT_GOAL_S,
    }
    h2d_s = big["logical_bytes"] / (H2D_GBPS * GB)
    print(f"big capture: {lgb:.2f} GB logical, {big['stored_bytes'] / GB:.2f} GB stored, extract {big['extract_s']:.1f} s")
    print(f"cold: server open {cold['server_open_s']:.2f} s (open request {cold['open_request_s']:.2f} s), "
          f"first validate {cold['first_validate_s']:.2f} s")
    print(f"axpy (n={hot['n']}): kernel median ms: {kernel}; cubin cycle {' -> '.join(hot['cycle'])}; "
          f"padded variant: {hot['padded_variant']}")
    print_table(["metric", "value", "goal", ""], [
        ["cold start -> first validated (s)", f"{cold['seconds']:.2f} ({cold['logical_gbps']:.2f} GB/s)",
         f"report; H2D bound {h2d_s:.2f} s (x{cold['seconds'] / h2d_s:.1f})", "-"],
        ["hot variant validate overhead (ms)",
         f"{vo['median']:.1f} med, {vo['max']:.1f} max", f"<= {HOT_GOAL_MS:g} (x{vo['median'] / HOT_GOAL_MS:.2f})",
         verdict(results["hot_validate_met"])],
        ["hot variant replay(1) overhead (ms)",
         f"{ro['median']:.1f} med, {ro['max']:.1f} max", f"<= {HOT_GOAL_MS:g} (x{ro['median'] / HOT_GOAL_MS:.2f})",
         verdict(results["hot_replay_met"])],
        ["validate, no reload, overhead (ms)", f"{nr['median']:.1f} med, {nr['max']:.1f} max", "reference", "-"],
        [f"strict validate {lgb:.1f} GB (s)", f"{strict['median']:.2f} med, {strict['max']:.2f} max",
         f"<= {STRICT_GOAL_S:g} (x{strict['median'] / STRICT_GOAL_S:.2f})", verdict(results["strict_met"])],
    ])
    write_json(args.json, {"bench": "replay", "args": {k: str(v) for k, v in vars(args).items()},
                           "big": big, "hot": hot, "accuracy": acc,
                           "goals": {"hot_overhead_ms": HOT_GOAL_MS, "strict_validate_s": STRICT_GOAL_S,
                                     "accuracy_tolerance": ACCURACY_TOLERANCE},
                           "met": results})


if __name__ == "__main__":
    main()
