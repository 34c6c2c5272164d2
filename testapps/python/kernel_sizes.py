"""kernel_sizes: kernels of three sizes launched alternately, for bench/profile_bias.py (what
the sampled profile's event pairs add to a kernel, against --exact): a tiny add (256
floats, ~2 us), a large add (16M floats, ~60 us) and an fp16 2048^3 matmul (~30 us).
  --iters N   rounds of the three (default 3000)
"""

import argparse

import torch

from kc_testapp import mark_done


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=3000)
    args = parser.parse_args()
    tiny = torch.zeros(256, device="cuda")
    big = torch.zeros(16 << 20, device="cuda")
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    for _ in range(args.iters):
        tiny.add_(1.0)
        big.add_(1.0)
        torch.matmul(a, a, out=c)
    torch.cuda.synchronize()
    mark_done()


if __name__ == "__main__":
    main()
