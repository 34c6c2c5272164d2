"""What the sampled profile's held event pairs add to each timed launch (issue 31): the
same app profiled sampled and --exact, interleaved, per kernel the average time per launch
both ways and their difference (ns per launch: the residual bias after the empty pair's
time, `sampling.bracket_ns`, was subtracted), each kernel's share both ways, and the
process walls against the app alone. Default app: testapps/python/kernel_sizes.py (a
~2 us add, a ~60 us add, a ~30 us GEMM). KERNCAP_PROFILE_BRACKET=none in the environment
shows the raw pairs.

  python3 bench/profile_bias.py [--repeat 3] [--iters 3000] [--json F] [-- CMD...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from common import PYAPPS, median, print_table, timed, write_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--iters", type=int, default=3000)
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("command", nargs="*", help="another app (after --)")
    args = parser.parse_args()
    from kerncap.capture.profile import run_profile

    command = args.command or [sys.executable, str(PYAPPS / "kernel_sizes.py"), "--iters", str(args.iters)]
    walls: dict[str, list[float]] = {"plain": [], "sampled": [], "exact": []}
    avg: dict[str, dict[str, list[float]]] = {"sampled": {}, "exact": {}}
    share: dict[str, dict[str, list[float]]] = {"sampled": {}, "exact": {}}
    names: dict[str, str] = {}
    bracket = []
    for _ in range(args.repeat):  # interleaved
        wall, _ = timed(lambda: subprocess.run(command, stdout=subprocess.DEVNULL, check=True))
        walls["plain"].append(wall)
        for mode in ("sampled", "exact"):
            wall, result = timed(lambda: run_profile(command, sampled=mode == "sampled", output=lambda *_: None))
            walls[mode].append(wall)
            for k in result.kernels[:10]:
                names[k.name] = k.display_name
                avg[mode].setdefault(k.name, []).append(k.avg_ns)
                share[mode].setdefault(k.name, []).append(k.percent)
            if mode == "sampled":
                bracket.append(result.warnings)
    rows = []
    for name in avg["exact"]:
        e, s = median(avg["exact"][name]), median(avg["sampled"].get(name, [0.0]))
        rows.append([names[name][:60], f"{e / 1e3:.2f}", f"{s / 1e3:.2f}", f"{s - e:+.0f}",
                     f"{median(share['exact'][name]):.2f}", f"{median(share['sampled'].get(name, [0.0])):.2f}"])
    print(f"{' '.join(Path(c).name for c in command[:2])}: medians of {args.repeat} interleaved runs")
    print_table(["kernel", "exact µs", "sampled µs", "bias ns", "exact %", "sampled %"], rows)
    base = median(walls["plain"])
    print("process wall: " + ", ".join(f"{m} {median(v):.2f} s ({median(v) / base:.3f}x)" for m, v in walls.items()))
    write_json(args.json, {"bench": "profile_bias", "command": command, "walls": walls, "avg_ns": avg,
                           "percent": share, "warnings": bracket})


if __name__ == "__main__":
    main()
