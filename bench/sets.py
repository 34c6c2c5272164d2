"""Shape buckets (issue 13): what a set of 4 buckets costs against single captures.

The `buckets` test app runs bk_scale at 4 shapes (24/8/4/2 launches) with --ballast MiB
of filled device memory, so each snapshot moves what a real app's would. Per repeat,
interleaved: one `extract --buckets` run (4 members, stored once in the chunk store),
one single extract, and 4 separate single extracts (one per bucket's first dispatch).
Prints the ratio set / one extract (goal <= 1.5x) and set / 4 extracts.

  python3 bench/sets.py [--repeat 3] [--ballast 1024] [--build-dir D] [--json F]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from common import build_testapps, median, print_table, timed, verdict, write_json

FIRST_DISPATCHES = (0, 1, 2, 3)  # the first launch of each of the 4 shapes
GOAL = 1.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ballast", type=int, default=1024, help="MiB of filled device memory in the app")
    ap.add_argument("--build-dir", type=Path)
    ap.add_argument("--json")
    args = ap.parse_args()

    from kerncap.capture.extract import extract

    work = Path(tempfile.mkdtemp(prefix="kerncap-bench-sets-"))
    build = build_testapps(args.build_dir or work / "testapps")
    command = [str(build / "buckets"), "default", str(args.ballast)]
    quiet = dict(output_sink=lambda *_: None, timeout=300, force=True)

    def one(dispatch: int, name: str) -> float:
        return timed(lambda: extract("bk_scale", command, output=work / name, dispatch=dispatch, **quiet))[0]

    sets, ones, fours = [], [], []
    members = 0
    for r in range(args.repeat):
        wall, result = timed(lambda: extract("bk_scale", command, output=work / "set", buckets=True, **quiet))
        members = len(result.set.members)
        sets.append(wall)
        ones.append(one(0, "one"))
        fours.append(sum(one(d, f"one-{d}") for d in FIRST_DISPATCHES))
        for p in work.glob("one*"):
            shutil.rmtree(p)
        shutil.rmtree(work / "set")
        print(f"repeat {r + 1}: set {sets[-1]:.2f} s, one extract {ones[-1]:.2f} s, 4 extracts {fours[-1]:.2f} s")
    s, o, f = median(sets), median(ones), median(fours)
    print_table(["what", "median s", "ratio"], [
        [f"extract --buckets ({members} members, one run)", f"{s:.2f}", "1.00"],
        ["one extract", f"{o:.2f}", f"{s / o:.2f}x (set / one; goal <= {GOAL}x: {verdict(s / o <= GOAL)})"],
        ["4 separate extracts", f"{f:.2f}", f"{s / f:.2f}x (set / 4 extracts)"],
    ])
    write_json(args.json, {"set_s": s, "one_s": o, "four_s": f, "ratio_set_one": s / o, "ratio_set_four": s / f,
                           "members": members, "ballast_mib": args.ballast, "goal": GOAL,
                           "met": s / o <= GOAL, "runs": {"set": sets, "one": ones, "four": fours}})
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
