"""How long `pip install .` takes from a fresh clone into a fresh virtual environment
(issue 44: 246 s on the 2-core machine; README.md and docs/testing.md quote this
script's line, measured, with the load it ran under):

    python3 bench/install_time.py                 # this checkout's HEAD
    python3 bench/install_time.py --worktree      # HEAD plus the working tree's changes to tracked files
    python3 bench/install_time.py --keep DIR      # keep the clone, venv and build tree in DIR

It clones the checkout (no build tree; pip caches no wheel built from a directory), makes a venv,
upgrades pip (not timed) and times `pip install .`: the wall time, the CPU time of every
process it ran (user + system: what the machine's load does not change much), the load
average before and after, and from the build tree's .ninja_log the native build's own
wall time, its CPU-heaviest jobs and the time after which only one job ran (a build that
ends on one long compile wastes the other cores). On a loaded machine compare the CPU
times, or runs taken back to back."""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kw)


def ninja_jobs(build: Path) -> list[tuple[int, int, str]]:
    """(start ms, end ms, output) of the last build in the tree's .ninja_log."""
    logs = list(build.glob("build/*/.ninja_log"))
    if not logs:
        return []
    jobs: dict[str, tuple[int, int]] = {}
    for line in logs[0].read_text().splitlines()[1:]:
        start, end, _, out, _ = line.split("\t")
        if not out.startswith("/"):
            jobs[out] = (int(start), int(end))
    return sorted((s, e, out) for out, (s, e) in jobs.items())


def alone_tail(jobs: list[tuple[int, int, str]]) -> tuple[float, str]:
    """Seconds at the end of the build during which one job ran alone, and that job."""
    if not jobs:
        return 0.0, ""
    end = max(e for _, e, _ in jobs)
    last = max(jobs, key=lambda j: j[1])
    others_end = max((e for s, e, o in jobs if o != last[2] and s < last[1]), default=last[0])
    return max(0.0, (end - max(others_end, last[0])) / 1000), last[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worktree", action="store_true", help="apply the working tree's changes to the clone")
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = ap.parse_args()

    work = args.keep or Path(tempfile.mkdtemp(prefix="kerncap-install-"))
    work.mkdir(parents=True, exist_ok=True)
    src, venv = work / "src", work / "venv"
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(venv, ignore_errors=True)
    try:
        sh(["git", "clone", "-q", str(ROOT), str(src)])
        if args.worktree:
            diff = subprocess.run(["git", "-C", str(ROOT), "diff", "HEAD", "--binary"], check=True,
                                  capture_output=True).stdout
            if diff:
                sh(["git", "-C", str(src), "apply", "--binary", "-"], input=diff)
            for rel in subprocess.run(["git", "-C", str(ROOT), "ls-files", "--others", "--exclude-standard"],
                                      check=True, capture_output=True, text=True).stdout.split():
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, src / rel)
        sh([sys.executable, "-m", "venv", str(venv)])
        pip = [str(venv / "bin" / "python"), "-m", "pip"]
        sh([*pip, "install", "-q", "--upgrade", "pip"], stdout=subprocess.DEVNULL)
        load_before = os.getloadavg()
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        sh([*pip, "install", "-q", "."], cwd=src)
        wall = time.monotonic() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        load_after = os.getloadavg()
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        jobs = ninja_jobs(src)
        build_s = max((e for _, e, _ in jobs), default=0) / 1000
        tail, last = alone_tail(jobs)
        print(f"pip install . (fresh clone, fresh venv, {os.cpu_count()} cores): {wall:.0f} s wall, "
              f"{cpu:.0f} s CPU (user+sys); load average {load_before[0]:.1f} before, {load_after[0]:.1f} after")
        if jobs:
            print(f"native build (ninja): {build_s:.0f} s wall, {len(jobs)} jobs; the last {tail:.0f} s "
                  f"{last} ran alone")
            print("longest jobs (wall s under this load): " + ", ".join(
                f"{Path(o).name} {(e - s) / 1000:.0f}" for s, e, o in sorted(jobs, key=lambda j: j[0] - j[1])[:6]))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
