"""triton_smooth: the smooth app's 64-tap filter (testapps/cuda/smooth) as one plain
@triton.jit kernel, y = w (*) x over n floats, launched L times (y zeroed before each).

    python3 triton_smooth.py [n = 4194304] [launches = 5]

No autotuner (one config, so every run launches the same compiled kernel and
`kerncap apply` finds it in every run). Inputs are small dyadic numbers, so every sum is
exact in float32: an edit that keeps the taps' order is byte-exact. The kernel re-reads
each tap's weight with a volatile load (the compiler may not keep it in a register or
let it hit in L1): the demo's deliberate inefficiency, which bench/apply_speedup.py's
Triton edit (TRITON_EDIT) makes a plain load.
"""

import sys

import torch
import triton
import triton.language as tl

from kc_testapp import mark_done, write_report

TAPS, BLOCK = 64, 256


@triton.jit
def kc_smooth_taps(x_ptr, w_ptr, y_ptr, n, TAPS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for t in range(TAPS):
        w = tl.load(w_ptr + t, volatile=True)
        acc += w * tl.load(x_ptr + offs + t, mask=offs + t < n, other=0.0)
    tl.store(y_ptr + offs, acc, mask=offs < n)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 22
    launches = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    if n < TAPS or launches < 1:
        raise SystemExit(f"triton_smooth: n must be at least {TAPS} and launches at least 1")
    i = torch.arange(n, device="cuda", dtype=torch.int64)
    x = ((i * 37) % 64).to(torch.float32) / 64.0
    w = (1 + torch.arange(TAPS, device="cuda") % 5).to(torch.float32) / 16.0
    y = torch.empty(n, device="cuda", dtype=torch.float32)
    torch.cuda.synchronize()
    write_report(x=x, y=y, w=w, n=n)
    grid = (triton.cdiv(n, BLOCK),)
    for _ in range(launches):
        y.zero_()  # every launch changes y
        kc_smooth_taps[grid](x, w, y, n, TAPS=TAPS, BLOCK=BLOCK)
    torch.cuda.synchronize()
    xp = torch.nn.functional.pad(x, (0, TAPS))
    ref = sum(w[t] * xp[t:t + n] for t in range(TAPS))
    if not torch.equal(y, ref):
        raise SystemExit("triton_smooth: wrong result against torch")
    mark_done()


if __name__ == "__main__":
    main()
