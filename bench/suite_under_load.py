"""Does the CPU suite pass under the load of two others? (issue 44's goal: 5 runs under a
background load of two other full suites; docs/testing.md quotes this script's lines.)

    python3 bench/suite_under_load.py [--runs 5] [--loops 3] [--keep]

It clones this checkout's HEAD, installs it as CI does (a new venv, `pip install
'.[test]'`), then starts --loops copies of `python -m pytest` at once, each looping with its
own --basetemp, started as from a terminal (not as a script's background job, whose SIGINT
is ignored: docs/testing.md). A run counts when the other loops ran from its start to its
end; once --runs runs count, the loops still going are stopped (their runs do not count).
It prints one line per finished run (loop, seconds, pytest's summary, the load average at
its end) and a last line: how many of the counted runs passed. Exit status 0 when every
counted run passed."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load() -> str:
    return os.getloadavg().__repr__()


def install(clone: Path) -> Path:
    venv = clone / ".load-venv"
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    py = venv / "bin" / "python"
    for args in (["--upgrade", "pip"], [".[test]"]):
        p = subprocess.run([str(py), "-m", "pip", "install", "-q", *args], cwd=clone, capture_output=True, text=True)
        if p.returncode != 0:  # pip's warnings only when it failed
            raise SystemExit(f"pip install {' '.join(args)} failed:\n{p.stdout}{p.stderr}")
    return py


def start(py: Path, clone: Path, work: Path, loop: int, n: int) -> tuple[subprocess.Popen, Path]:
    log = work / f"loop{loop}-run{n}.log"
    proc = subprocess.Popen([str(py), "-m", "pytest", "-p", "no:cacheprovider", f"--basetemp={work}/bt{loop}"],
                            cwd=clone, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return proc, log


def summary(log: Path) -> str:
    lines = re.findall(r"^=+ (.* in [0-9.]+s.*?) =+$", log.read_text(errors="replace"), re.M)
    return lines[-1] if lines else "no summary"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="counted runs to wait for")
    ap.add_argument("--loops", type=int, default=3, help="suites at once (the counted one and its load)")
    ap.add_argument("--keep", action="store_true", help="keep the clone and the logs")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kerncap-load-"))
    clone = work / "kerncap"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    py = install(clone)
    print(f"{head}: {args.loops} suites at once on {os.cpu_count()} CPUs, load {load()} before", flush=True)
    t0 = time.monotonic()
    running = {i: (*start(py, clone, work, i, 1), time.monotonic(), 1) for i in range(args.loops)}
    counted: list[bool] = []
    try:
        while len(counted) < args.runs:
            time.sleep(2)
            for i, (proc, log, began, n) in list(running.items()):
                if proc.poll() is None:
                    continue
                # The others ran throughout: every loop starts at t0 and none has stopped yet.
                ok = proc.returncode == 0
                counted.append(ok)
                print(f"loop {i} run {n}: {time.monotonic() - began:.0f} s, {summary(log)}, exit {proc.returncode}, "
                      f"load {load()} (t={time.monotonic() - t0:.0f} s)", flush=True)
                if not ok:
                    print("\n".join(l for l in log.read_text(errors="replace").splitlines()
                                    if l.startswith(("FAILED", "ERROR"))), flush=True)
                if len(counted) >= args.runs:
                    break
                running[i] = (*start(py, clone, work, i, n + 1), time.monotonic(), n + 1)
    finally:
        for proc, *_ in running.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    passed = sum(counted)
    print(f"{head}: {passed} of {len(counted)} runs under {args.loops - 1} other suites passed "
          f"({time.monotonic() - t0:.0f} s in all; logs in {work if args.keep else 'removed'})")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if counted and passed == len(counted) else 1


if __name__ == "__main__":
    sys.exit(main())
