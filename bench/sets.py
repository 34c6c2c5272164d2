"""Shape buckets (issue 13): what a set of 4 buckets costs against single captures.

The `buckets` test app runs bk_scale at 4 shapes (24/8/4/2 launches) with --ballast MiB
of filled device memory, so each snapshot moves what a real app's would. Per repeat,
interleaved: one `extract --buckets` run (4 members, stored once in the chunk store),
one single extract, and 4 separate single extracts (one per bucket's first dispatch).
Prints the ratio set / one extract (goal <= 1.5x) and set / 4 extracts, with chunk
fingerprints (the default) and, interleaved in the same repeats, without them
(KERNCAP_FINGERPRINT=0: every snapshot copies every chunk).

  python3 bench/sets.py [--repeat 3] [--ballast 1024] [--build-dir D] [--json F]
"""

from __future__ import annotations

import argparse
import os
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

    modes = {"fingerprints": {}, "copy every chunk": {"KERNCAP_FINGERPRINT": "0"}}
    runs = {m: {"set": [], "one": [], "four": []} for m in modes}
    members = 0

    def extract_in(mode: str, name: str, **kw):
        env = {**os.environ, **modes[mode]}
        return extract("bk_scale", command, output=work / name, env=env, **quiet, **kw)

    for r in range(args.repeat):
        for mode in modes:  # interleaved: drift hits both alike
            wall, result = timed(lambda: extract_in(mode, "set", buckets=True))
            members = len(result.set.members)
            got = runs[mode]
            got["set"].append(wall)
            got["one"].append(timed(lambda: extract_in(mode, "one", dispatch=0))[0])
            got["four"].append(sum(timed(lambda: extract_in(mode, f"one-{d}", dispatch=d))[0] for d in FIRST_DISPATCHES))
            for p in work.glob("one*"):
                shutil.rmtree(p)
            shutil.rmtree(work / "set")
            print(f"repeat {r + 1} ({mode}): set {got['set'][-1]:.2f} s, one extract {got['one'][-1]:.2f} s, "
                  f"4 extracts {got['four'][-1]:.2f} s")
    summary = {}
    for mode, got in runs.items():
        s, o, f = median(got["set"]), median(got["one"]), median(got["four"])
        summary[mode] = {"set_s": s, "one_s": o, "four_s": f, "ratio_set_one": s / o, "ratio_set_four": s / f,
                         "runs": got}
        print(f"\n{mode}:")
        print_table(["what", "median s", "ratio"], [
            [f"extract --buckets ({members} members, one run)", f"{s:.2f}", "1.00"],
            ["one extract", f"{o:.2f}", f"{s / o:.2f}x (set / one; goal <= {GOAL}x: {verdict(s / o <= GOAL)})"],
            ["4 separate extracts", f"{f:.2f}", f"{s / f:.2f}x (set / 4 extracts)"],
        ])
    fp = summary["fingerprints"]
    write_json(args.json, {**{k: v for k, v in fp.items() if k != "runs"}, "members": members,
                           "ballast_mib": args.ballast, "goal": GOAL, "met": fp["ratio_set_one"] <= GOAL,
                           "modes": summary})
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
