"""What CUPTI times an empty <<<1,1>>> kernel at on this GPU: the figure the sampled
profile's calibration gives back (KERNCAP_PROFILE_EMPTY_KERNEL_NS, docs/interposer.md
"Calibration"). Profiles testapps' hold_probe with `--exact` and prints kc_probe_empty's
average ns per launch (and its spin kernel's) to stdout, the median over --repeat runs.

  python3 bench/probes/empty_kernel_ns.py [--testapps-build DIR] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import build_testapps  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--testapps-build", type=Path, default=Path(os.environ.get("KERNCAP_TESTAPPS_BUILD", "/tmp/kc-testapps")))
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    from kerncap.capture.profile import run_profile

    exe = build_testapps(args.testapps_build) / "hold_probe"
    empty, spin = [], []
    for _ in range(args.repeat):
        r = run_profile([str(exe), "300"], output=lambda *_: None)
        by = {k.name: k for k in r.kernels}
        empty.append(next(k.avg_ns for n, k in by.items() if "kc_probe_empty" in n))
        spin.append(next(k.avg_ns for n, k in by.items() if "kc_probe_spin" in n))
    print(f"kc_probe_empty {statistics.median(empty):.0f} ns per launch (runs: {', '.join(f'{x:.0f}' for x in empty)}); "
          f"kc_probe_spin {statistics.median(spin):.0f} ns", file=sys.stderr)
    print(round(statistics.median(empty)))


if __name__ == "__main__":
    main()
