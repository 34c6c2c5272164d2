"""big_alloc: holds >= 8 GB of device memory in a few tensors, then launches the small
Triton kernel kc_touch on one 1 MiB tensor. A capture of kc_touch snapshots everything
live, so this measures snapshot throughput (bench/snapshot.py).
  --gb N                  GiB to allocate (default 8), in 1 GiB tensors
  --fill zeros|random     content of the big tensors (zeros: elided chunks; random:
                          every chunk stored)
"""

import argparse

import torch
import triton
import triton.language as tl

from kc_testapp import mark_done, write_report

GIB = 1 << 30


@triton.jit
def kc_touch(p_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(p_ptr + offs, tl.load(p_ptr + offs, mask=mask) + 1.0, mask=mask)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gb", type=int, default=8)
    parser.add_argument("--fill", choices=["zeros", "random"], default="zeros")
    args = parser.parse_args()

    gen = torch.Generator(device="cuda").manual_seed(5)
    big = []
    for _ in range(args.gb):
        t = torch.empty(GIB, dtype=torch.uint8, device="cuda")
        if args.fill == "zeros":
            t.zero_()
        else:
            t.random_(0, 256, generator=gen)
        big.append(t)
    small = torch.zeros(1 << 18, device="cuda")
    torch.cuda.synchronize()
    write_report(small=small, big=[t.data_ptr() for t in big], gb=args.gb, fill=args.fill)

    kc_touch[(triton.cdiv(small.numel(), 1024),)](small, small.numel(), BLOCK=1024)
    torch.cuda.synchronize()
    if small[0].item() != 1.0:
        raise SystemExit("big_alloc: kc_touch did not run")
    mark_done()


if __name__ == "__main__":
    main()
