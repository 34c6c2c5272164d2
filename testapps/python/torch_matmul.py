"""torch_matmul: eager fp16 4096x4096 matmul on cuBLAS, plus an elementwise add.

On an H200 the GEMM is cuBLASLt's nvjet_* kernel, launched with cuLaunchKernelEx with
its arguments in `extra` and a cluster launch attribute (DESIGN fact 2).
  --iters N             matmul+add rounds (default 20)
  --torch-profile PATH  run the whole workload under torch.profiler and write
                        {kernel name: {"calls", "total_us"}} (the reference for test_profile)
"""

import argparse
import contextlib
import json

import torch

from kc_testapp import mark_done, write_report


def kernel_totals(prof) -> dict:
    totals: dict = {}
    for evt in prof.events():
        if evt.device_type != torch.autograd.DeviceType.CUDA:
            continue
        entry = totals.setdefault(evt.name, {"calls": 0, "total_us": 0.0})
        entry["calls"] += 1
        entry["total_us"] += evt.time_range.elapsed_us()
    return totals


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--torch-profile", metavar="PATH")
    args = parser.parse_args()

    if args.torch_profile:
        from torch.profiler import ProfilerActivity, profile

        ctx = profile(activities=[ProfilerActivity.CUDA])
    else:
        ctx = contextlib.nullcontext()

    n = 4096
    with ctx as prof:
        gen = torch.Generator(device="cuda").manual_seed(1234)
        a = torch.randn(n, n, device="cuda", dtype=torch.float16, generator=gen)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16, generator=gen)
        c = torch.empty(n, n, device="cuda", dtype=torch.float16)
        d = torch.empty(n, n, device="cuda", dtype=torch.float16)
        torch.cuda.synchronize()
        write_report(a=a, b=b, c=c, d=d, n=n)
        for _ in range(args.iters):
            torch.matmul(a, b, out=c)
            torch.add(c, a, out=d)
        torch.cuda.synchronize()

    if args.torch_profile:
        with open(args.torch_profile, "w") as f:
            json.dump(kernel_totals(prof), f, indent=1)
    mark_done()


if __name__ == "__main__":
    main()
