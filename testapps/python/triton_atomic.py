"""triton_atomic: a Triton kernel whose float result depends on the order of its atomics
(issue 14: nondeterministic kernels).

kc_atomic_bins: program p sums its BLOCK values of x and adds the sum to out[p % BINS]
with tl.atomic_add; 8192 programs, 32 bins, so each bin adds 256 partial sums in
whatever order the programs finish. Float addition is not associative: the last bits of
`out` change from run to run. Launched 3 times (dispatches 0, 1, 2), `out` zeroed before
each. The report holds x, out and the grid.
"""

import torch
import triton
import triton.language as tl

from kc_testapp import mark_done, write_report

PROGRAMS, BLOCK, BINS = 8192, 512, 32


@triton.jit
def kc_atomic_bins(x_ptr, out_ptr, BLOCK: tl.constexpr, BINS: tl.constexpr):
    pid = tl.program_id(axis=0)
    x = tl.load(x_ptr + pid * BLOCK + tl.arange(0, BLOCK))
    tl.atomic_add(out_ptr + pid % BINS, tl.sum(x, axis=0))


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(14)
    x = torch.randn(PROGRAMS * BLOCK, device="cuda", generator=gen)
    out = torch.zeros(BINS, device="cuda")
    torch.cuda.synchronize()
    write_report(x=x, out=out, programs=PROGRAMS, block=BLOCK, bins=BINS)
    for _ in range(3):
        out.zero_()
        kc_atomic_bins[(PROGRAMS,)](x, out, BLOCK=BLOCK, BINS=BINS)
    torch.cuda.synchronize()
    expect = x.view(PROGRAMS, BLOCK).sum(dim=1).view(-1, BINS).sum(dim=0)
    if not torch.allclose(out, expect, rtol=1e-4, atol=1e-3):
        raise SystemExit("triton_atomic: wrong result")
    mark_done()


if __name__ == "__main__":
    main()
