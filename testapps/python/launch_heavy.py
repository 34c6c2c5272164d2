"""launch_heavy: many small kernel launches (default 100000) in a loop, for the
capture-overhead bench. Prints one line with the loop's wall time:
  launch_heavy: 100000 launches in 0.812 s
and, when KC_TESTAPP_REPORT is set, writes {"launches", "loop_ns"} there.
"""

import argparse
import time

import torch

from kc_testapp import cpu_speed_ns, mark_done, write_report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--launches", type=int, default=100_000)
    args = parser.parse_args()
    x = torch.zeros(256, device="cuda")
    torch.cuda.synchronize()
    cal_before = cpu_speed_ns()
    t0 = time.perf_counter()
    for _ in range(args.launches):
        x.add_(1.0)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    cal_after = cpu_speed_ns()
    if x[0].item() != float(args.launches):
        raise SystemExit(f"launch_heavy: x[0] = {x[0].item()}, expected {args.launches}")
    print(f"launch_heavy: {args.launches} launches in {seconds:.3f} s", flush=True)
    write_report(launches=args.launches, loop_ns=int(seconds * 1e9),  # for bench/overhead.py
                 cal_before_ns=cal_before, cal_after_ns=cal_after)
    mark_done()


if __name__ == "__main__":
    main()
