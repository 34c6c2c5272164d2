"""paired_launches: the paired measure of what kerncap's dispatcher costs a PyTorch
eager op or a Triton launch (bench/paired.py; testapps/cuda/launch_paired.cu does the
same for cudart launches and graph launches).

Launches in --blocks blocks of --per-block: `x.add_(1.0)` (--kind torch) or a one-block
Triton kernel adding one (--kind triton). Between blocks it flips
kerncap_bench_passthrough (libkerncap_entry.so, allowed only under
KERNCAP_BENCH_PASSTHROUGH=1) in ABBA order: a = kerncap's dispatcher, p = the wrapper
jumping straight to the driver; without the switch every block runs as it is (mode n).
Each block ends with torch.cuda.synchronize(); one line per block:
  block=<i> mode=<a|p|n> wall_ns=<block wall> cpu_ns=<this thread's CPU in the block>
"""

from __future__ import annotations

import argparse
import ctypes
import time

import torch

from kc_testapp import mark_done, write_report


def switch():
    """kerncap_bench_passthrough, or None where it is absent or refused."""
    try:
        fn = ctypes.CDLL(None).kerncap_bench_passthrough  # the preloaded libkerncap_entry.so
    except AttributeError:
        return None, "absent"
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
    return (fn, "paired") if fn(0) == 0 else (None, "refused")


def launcher(kind: str):
    x = torch.zeros(256, device="cuda")
    if kind == "torch":
        return lambda: x.add_(1.0)
    from kc_paired_triton import kc_paired_add_one

    return lambda: kc_paired_add_one[(1,)](x, 256, BLOCK=256)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=["torch", "triton"], default="torch")
    parser.add_argument("--blocks", type=int, default=64)
    parser.add_argument("--per-block", type=int, default=2000)
    args = parser.parse_args()
    launch = launcher(args.kind)
    for _ in range(200):  # warm-up: Triton compiles, PyTorch loads its kernels
        launch()
    torch.cuda.synchronize()
    flip, state = switch()
    print(f"switch={state}", flush=True)
    lines, wall, cpu = [], 0, 0
    for b in range(args.blocks):
        mode = "n"
        if flip is not None:
            mode = "p" if b % 4 in (1, 2) else "a"  # a p p a a p p a ...
            flip(1 if mode == "p" else 0)
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        for _ in range(args.per_block):
            launch()
        torch.cuda.synchronize()
        w, c = time.perf_counter_ns() - w0, time.thread_time_ns() - c0
        wall, cpu = wall + w, cpu + c
        lines.append(f"block={b} mode={mode} wall_ns={w} cpu_ns={c}")
    if flip is not None:
        flip(0)
    print("\n".join(lines), flush=True)
    launches = args.blocks * args.per_block
    print(f"paired_launches: {args.kind}, {launches} launches, {wall / launches:.1f} ns wall and "
          f"{cpu / launches:.1f} ns CPU per launch", flush=True)
    write_report(launches=launches, loop_ns=wall, cpu_ns=cpu)
    mark_done()


if __name__ == "__main__":
    main()
