"""What CUPTI itself costs a launch-heavy app, as the floor under bench/overhead.py.

Runs launch_heavy under a minimal injection library (bench/cupti_floor/floor.cpp)
and under kerncap, each --repeat times (median), and prints loop-time and wall
ratios against the plain app:
  plain        no injection
  subscribe    cuptiSubscribe, nothing enabled
  launch       the kernel-launch callback ids enabled, empty callback
  armed-never  kerncap extract of a kernel that never launches
  armed-loop   kerncap extract of the loop's own kernel at a dispatch past the end
               (every launch is a matching one: the worst case for the interposer)
With --trace it also prints, once, how many times the app called each driver API
function (the `trace` mode of floor.cpp).

  python3 bench/cupti_floor.py [--app python|cuda] [--launches N] [--repeat 3] [--trace] [--json F]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common import PYAPPS, REPO, build_testapps, median, print_table, timed, write_json

LOOP_KERNEL = {"python": "elementwise_kernel", "cuda": "kc_tiny"}


def cuda_root() -> Path:
    nvcc = shutil.which("nvcc")
    if not nvcc:
        sys.exit("nvcc not found: the floor library is built with the CUDA toolkit")
    return Path(nvcc).resolve().parents[1]


def build_floor(out: Path) -> Path:
    root = cuda_root()
    heads = glob.glob(str(root / "**" / "cupti.h"), recursive=True)
    libs = glob.glob(str(root / "**" / "libcupti.so"), recursive=True)
    if not heads or not libs:
        sys.exit(f"CUPTI headers or library not found under {root}")
    lib = out / "libkc_floor.so"
    libdir = str(Path(libs[0]).parent)
    cmd = ["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-o", str(lib),
           str(REPO / "bench" / "cupti_floor" / "floor.cpp"), f"-I{Path(heads[0]).parent}",
           f"-I{root / 'include'}", f"-L{libdir}", f"-Wl,-rpath,{libdir}", "-lcupti"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"building the floor library failed:\n{proc.stderr}")
    return lib


def app_command(args, build_dir: Path | None) -> list[str]:
    if args.app == "python":
        return [sys.executable, str(PYAPPS / "launch_heavy.py"), "--launches", str(args.launches)]
    return [str(build_dir / "launch_heavy"), str(args.launches)]


def run_once(mode: str, command: list[str], floor: Path, workdir: Path, args) -> tuple[float, float, str]:
    from kerncap.errors import KerncapError
    from kerncap.capture.extract import extract

    report = workdir / "report.json"
    report.unlink(missing_ok=True)
    env = {**os.environ, "KC_TESTAPP_REPORT": str(report)}
    stderr = ""
    if mode.startswith("armed"):
        kernel = "kc_never" if mode == "armed-never" else LOOP_KERNEL[args.app]
        dispatch = 0 if mode == "armed-never" else 10 * args.launches

        def armed():
            try:
                extract(kernel, command, output=workdir / "cap", dispatch=dispatch, keep_running=True, env=env,
                        output_sink=lambda *_: None, force=True)
            except KerncapError as exc:
                if "never ran" not in exc.message and "ran only" not in exc.message:
                    raise
            else:
                sys.exit(f"{mode}: {kernel} was captured?")

        wall, _ = timed(armed)
    else:
        if mode != "plain":
            env.update(CUDA_INJECTION64_PATH=str(floor), KC_FLOOR=mode)
        wall, proc = timed(lambda: subprocess.run(command, env=env, stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.PIPE, text=True))
        if proc.returncode != 0:
            sys.exit(f"{mode}: the app exited with status {proc.returncode}:\n{proc.stderr[-2000:]}")
        stderr = proc.stderr
    if not report.exists():
        sys.exit(f"{mode}: the app wrote no report ({report})")
    return wall, json.loads(report.read_text())["loop_ns"] / 1e9, stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app", choices=["python", "cuda"], default="python")
    parser.add_argument("--launches", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--build-dir", type=Path, default=Path(tempfile.gettempdir()) / "kerncap-testapps")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()

    build_dir = build_testapps(args.build_dir) if args.app == "cuda" else None
    command = app_command(args, build_dir)
    modes = ("plain", "subscribe", "launch", "armed-never", "armed-loop")
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="kerncap-floor-") as tmp:
        floor = build_floor(Path(tmp))
        if args.trace:
            _, _, err = run_once("trace", command, floor, Path(tmp), args)
            print("driver API calls made by the app (trace):")
            for line in err.splitlines():
                if line.startswith("kc_floor_trace"):
                    print("  " + line.split(None, 1)[1])
        for _ in range(args.repeat):  # interleaved, so drift hits every mode alike
            for mode in modes:
                wall, loop, _ = run_once(mode, command, floor, Path(tmp), args)
                r = results.setdefault(mode, {"wall_s": [], "loop_s": []})
                r["wall_s"].append(wall)
                r["loop_s"].append(loop)
    base = results["plain"]
    rows = []
    for mode, r in results.items():
        r["wall_ratio"] = median(r["wall_s"]) / median(base["wall_s"])
        r["loop_ratio"] = median(r["loop_s"]) / median(base["loop_s"])
        r["loop_ns_per_launch_over_plain"] = (median(r["loop_s"]) - median(base["loop_s"])) / args.launches * 1e9
        rows.append([mode, f"{median(r['wall_s']):.3f}", f"{r['wall_ratio']:.3f}", f"{median(r['loop_s']):.3f}",
                     f"{r['loop_ratio']:.3f}", f"{r['loop_ns_per_launch_over_plain']:+.0f}"])
    print(f"launch_heavy ({args.app}, {args.launches} launches), median of {args.repeat}")
    print_table(["mode", "wall s", "ratio", "loop s", "loop ratio", "ns/launch"], rows)
    write_json(args.json, {"bench": "cupti_floor", "app": args.app, "launches": args.launches, "results": results})


if __name__ == "__main__":
    main()
