"""What the capture library costs an app that is not being captured.

Runs the launch_heavy app (>= 100k small launches), or with --app decode token
generation at batch 1 (testapps/python/decode_loop.py: ~20 tiny kernels per layer and
token), four ways, each --repeat times, interleaved (median taken):
  plain      the app alone
  armed      under `extract` for a kernel that never launches (kc_never, keep_running):
             every launch goes through kerncap's dispatcher, reached through interposed
             driver entry points without a CUPTI subscriber (the default path,
             docs/interposer.md)
  armed-cupti  the same through CUPTI callbacks (KERNCAP_INTERCEPT=cupti)
  profiling  under `run_profile`
and prints ratios of medians against plain, each with a 90 % bootstrap interval, for
the process wall, the launch loop alone (the app reports its loop time) and the app's
CPU time (user + sys of the child processes). The H200 machine's CPU switches between
speed states ~30 % apart within seconds (docs/facts.md §28), which no number of runs
averages away cheaply, so the Python apps also time a fixed pure-Python loop just
before and after their timed loop (kc_testapp.cpu_speed_ns: no CUDA call, kerncap
cannot change it), and a second table gives every time divided by its run's
calibration; runs whose before/after calibrations differ by more than 10 % (the state
changed during the loop) are counted and left out of that table.
Goals (issue 18): armed <= 1.02, profiling <= 1.05 (process wall); decode: armed within
3 % of plain's tokens per second (loop <= 1/0.97); met only when the whole interval is
under the goal, judged on the raw and on the calibrated table.

  python3 bench/overhead.py [--app python|cuda|decode] [--launches N] [--tokens N]
                            [--repeat 3] [--modes plain,armed,...] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from common import PYAPPS, build_testapps, median, print_table, ratio_interval, timed, verdict, write_json

GOALS = {"armed": 1.02, "profiling": 1.05}
# --app decode (token generation at batch 1): the goal is on throughput, i.e. the loop:
# armed within 3 % of plain's tokens per second.
DECODE_GOALS = {"armed": 1 / 0.97}


def app_command(args, build_dir: Path | None) -> list[str]:
    if args.app == "python":
        return [sys.executable, str(PYAPPS / "launch_heavy.py"), "--launches", str(args.launches)]
    if args.app == "decode":
        return [sys.executable, str(PYAPPS / "decode_loop.py"), "--tokens", str(args.tokens)]
    return [str(build_dir / "launch_heavy"), str(args.launches)]


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(mode: str, command: list[str], workdir: Path) -> dict[str, float]:
    """wall (process), loop, cpu (the app's) seconds of one run in `mode`, and cal (its
    CPU-speed calibration, mean of before and after; 0 if the app reports none) and
    cal_change (after / before)."""
    cpu0 = children_cpu_s()
    from kerncap.errors import KerncapError
    from kerncap.capture.extract import extract
    from kerncap.capture.profile import run_profile

    report = workdir / "report.json"
    report.unlink(missing_ok=True)
    env = {**os.environ, "KC_TESTAPP_REPORT": str(report)}
    if mode == "plain":
        wall, proc = timed(lambda: subprocess.run(command, env=env, stdout=subprocess.DEVNULL))
        if proc.returncode != 0:
            sys.exit(f"{command[-1]} exited with status {proc.returncode}")
    elif mode in ("armed", "armed-cupti"):
        output = workdir / "never"
        env["KERNCAP_INTERCEPT"] = "cupti" if mode == "armed-cupti" else "entry"

        def armed():
            try:
                extract("kc_never", command, output=output, keep_running=True, env=env, output_sink=lambda *_: None)
            except KerncapError as exc:
                if "never ran" not in exc.message:
                    raise
            else:
                sys.exit("kc_never was captured?")

        wall, _ = timed(armed)
    else:
        wall, _ = timed(lambda: run_profile(command, env=env, output=lambda *_: None))
    if not report.exists():
        sys.exit(f"{mode}: the app wrote no report ({report}); did it finish?")
    got = json.loads(report.read_text())
    before, after = got.get("cal_before_ns", 0), got.get("cal_after_ns", 0)
    return {"wall": wall, "loop": got["loop_ns"] / 1e9, "cpu": children_cpu_s() - cpu0,
            "cal": (before + after) / 2e9, "cal_change": after / before if before else 1.0}


KEYS = ("wall", "loop", "cpu")
CAL_CHANGE_LIMIT = 0.10  # a run whose calibration moved more than this changed speed state mid-loop


def ratio_cells(r: dict, base: dict, suffix: str) -> list[str]:
    """Median and ratio [interval] cells of `r` against `base` for each of KEYS, stored
    back into `r` under `<key><suffix>_median_s`, `_ratio`, `_interval`."""
    cells = []
    for key in KEYS:
        values, ref = r[f"{key}{suffix}_s"], base[f"{key}{suffix}_s"]
        if not values or not ref:
            cells += ["-", "-"]
            continue
        r[f"{key}{suffix}_median_s"] = median(values)
        r[f"{key}{suffix}_ratio"] = median(values) / median(ref)
        r[f"{key}{suffix}_interval"] = ratio_interval(values, ref)
        lo, hi = r[f"{key}{suffix}_interval"]
        cells += [f"{median(values):.3f}", f"{r[f'{key}{suffix}_ratio']:.3f} [{lo:.3f}-{hi:.3f}]"]
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app", choices=["python", "cuda", "decode"], default="python")
    parser.add_argument("--tokens", type=int, default=2000, help="--app decode: tokens generated per run")
    parser.add_argument("--launches", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--build-dir", type=Path, default=Path(tempfile.gettempdir()) / "kerncap-testapps")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--modes", default="plain,armed,armed-cupti,profiling",
                        help="comma-separated, plain always included (the baseline)")
    args = parser.parse_args()
    modes = ["plain"] + [m for m in args.modes.split(",") if m and m != "plain"]
    unknown = set(modes) - {"plain", "armed", "armed-cupti", "profiling"}
    if unknown:
        parser.error(f"unknown mode(s): {', '.join(sorted(unknown))}")

    build_dir = build_testapps(args.build_dir) if args.app == "cuda" else None
    command = app_command(args, build_dir)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="kerncap-bench-") as tmp:
        # Interleaved (plain, armed, profiling, plain, ...): drift must hit every mode alike.
        for _ in range(args.repeat):
            for mode in modes:
                run = run_once(mode, command, Path(tmp))
                r = results.setdefault(mode, {f"{k}{x}_s": [] for k in KEYS for x in ("", "_cal")}
                                       | {"cal_s": [], "cal_change": [], "switched": 0})
                for key in KEYS:
                    r[f"{key}_s"].append(run[key])
                r["cal_s"].append(run["cal"])
                r["cal_change"].append(run["cal_change"])
                if run["cal"] and abs(run["cal_change"] - 1) <= CAL_CHANGE_LIMIT:
                    for key in KEYS:  # in units of the run's calibration loop
                        r[f"{key}_cal_s"].append(run[key] / run["cal"])
                elif run["cal"]:
                    r["switched"] += 1

    base = results["plain"]
    calibrated = any(r["cal_s"][0] for r in results.values())
    raw_rows, cal_rows = [], []
    for mode, r in results.items():
        # Launch-bound loops are judged on process wall; token generation on throughput.
        goal, judged = (DECODE_GOALS.get(mode), "loop") if args.app == "decode" else (GOALS.get(mode), "wall")
        r["goal"], r["judged_on"] = goal, judged
        cells = ratio_cells(r, base, "")
        r["met"] = goal is None or r[f"{judged}_interval"][1] <= goal
        raw_rows.append([mode] + cells + [f"<= {goal:.2f}" if goal else "", verdict(r["met"]) if goal else ""])
        if calibrated:
            cells = ratio_cells(r, base, "_cal")
            ok = f"{judged}_cal_interval" in r and (goal is None or r[f"{judged}_cal_interval"][1] <= goal)
            r["met_calibrated"] = ok
            cal_rows.append([mode, f"{len(r[f'{judged}_cal_s'])} ({r['switched']} left out)"] + cells
                            + [f"<= {goal:.2f}" if goal else "", verdict(ok) if goal else ""])
    what = (f"decode_loop ({args.tokens} tokens; goal on the loop, i.e. tokens/s)" if args.app == "decode"
            else f"launch_heavy ({args.app}, {args.launches} launches)")
    print(f"{what}, median of {args.repeat} interleaved runs [90 % bootstrap interval of the ratio]")
    print_table(["mode", "wall s", "ratio", "loop s", "ratio", "app cpu s", "ratio", "goal", ""], raw_rows)
    if calibrated:
        print("each run's times divided by its CPU-speed calibration (runs whose speed state changed mid-loop left out)")
        print_table(["mode", "runs", "wall", "ratio", "loop", "ratio", "app cpu", "ratio", "goal", ""], cal_rows)
    write_json(args.json, {"bench": "overhead", "app": args.app, "launches": args.launches,
                           "repeat": args.repeat, "results": results})


if __name__ == "__main__":
    main()
