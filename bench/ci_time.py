"""How long `.ci/run` takes on a fresh clone (issue 44: README.md and docs/testing.md
quote this script's line, with the load it ran under; the goal on 2 idle cores is
`python -m pytest` <= 6 minutes and `.ci/run` <= 12):

    python3 bench/ci_time.py                 # a clone of this checkout's HEAD
    python3 bench/ci_time.py --log FILE      # only read a saved .ci/run output (its uptime lines too)

It clones the checkout, runs `.ci/run` there (a new venv, `pip install '.[test]'`, the
suite, the mutation check), keeps the output beside the clone and prints one line: each
step's wall time as .ci/run and pytest report them, the whole run's wall and CPU time
(user + system of every process), the load average before and after (`uptime`; other
people's work on a shared machine lengthens the wall times, the CPU times less), and
the verdict. Exit status: .ci/run's."""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.split("load average:")[-1].strip()


def summarize(text: str) -> str:
    pip = re.findall(r"^ci: pip install .* took (\d+) s", text, re.M)
    tests = re.findall(r"^=+ (.* in ([0-9.]+)s.*?) =+$", text, re.M)
    muts = re.findall(r"^(\d+ of \d+ mutations caught.*|changed since \w+: \d+ of \d+ mutations apply)$", text, re.M)
    final = re.findall(r"^ci: (passed|FAILED) in (\d+) s", text, re.M)
    parts = [f"pip install {pip[-1]} s" if pip else "pip install: no line",
             f"pytest {float(tests[-1][1]):.0f} s ({tests[-1][0].split(' in ')[0]})" if tests else "pytest: no summary",
             f"mutations: {muts[-1]}" if muts else "mutations: no line",
             f".ci/run {final[-1][0]} in {final[-1][1]} s" if final else ".ci/run: no final line"]
    return "; ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", type=Path, help="summarize this saved output of .ci/run instead of running it")
    args = ap.parse_args()
    if args.log:
        print(summarize(args.log.read_text(errors="replace")))
        return 0
    work = Path(tempfile.mkdtemp(prefix="kerncap-ci-time-"))
    clone = work / "kerncap"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    before, t0 = load(), time.monotonic()
    log = work / "ci.log"
    with log.open("w") as out:
        rc = subprocess.run(["bash", str(clone / ".ci" / "run")], stdout=out, stderr=subprocess.STDOUT).returncode
    wall, after = time.monotonic() - t0, load()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"{head}: {summarize(log.read_text(errors='replace'))}; {wall:.0f} s wall, "
          f"{ru.ru_utime + ru.ru_stime:.0f} s CPU; load average {before} before, {after} after (output: {log})")
    return rc


if __name__ == "__main__":
    sys.exit(main())
