"""torch_compile_rmsnorm: torch.compile(mode="max-autotune-no-cudagraphs") of an RMSNorm
forward that also returns rstd (as a training forward saves it for backward), on a
bf16 activation x of [rows, cols] and weight w of [cols], called 3 times.

Inductor generates one looped two-pass reduction kernel, triton_red_fused_*: pass 1
sums x*x over R0_BLOCK tiles, pass 2 reloads x to write y. Under max-autotune its
CachingAutotuner benchmarks several (XBLOCK, R0_BLOCK, num_warps) configs and refines
the fastest by coordinate descent. The fp32 sum, hence rstd and y, depends on R0_BLOCK
(it sets the order of the additions), so another config changes the rounding. On the
H200 the autotuner chose XBLOCK=1, R0_BLOCK=32768 (a whole row per tile), num_warps=32
in every capture so far (docs/facts.md §13).

  python torch_compile_rmsnorm.py [rows cols [mode]]   (default 512 32768;
                                                         mode: a torch.compile mode)
"""

import os
import sys

# Autotune every run: with Inductor's caches a second run reuses the first run's choice
# and its autotuner never sees the other configs.
os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")

import torch  # noqa: E402

from kc_testapp import mark_done, write_report  # noqa: E402

EPS = 1e-6


def rmsnorm(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xf = x.float()
    rstd = torch.rsqrt((xf * xf).mean(dim=-1, keepdim=True) + EPS)
    return (xf * rstd * w.float()).to(x.dtype), rstd


def main() -> None:
    rows, cols = (int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2 else (512, 32768)
    mode = sys.argv[3] if len(sys.argv) > 3 else "max-autotune-no-cudagraphs"
    gen = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.rand(cols, device="cuda", dtype=torch.bfloat16, generator=gen) + 0.5
    torch.cuda.synchronize()
    write_report(x=x, w=w, rows=rows, cols=cols)
    compiled = torch.compile(rmsnorm, mode=None if mode == "default" else mode)
    for _ in range(3):
        # New inputs each call, so the output blocks never already hold the result.
        x.mul_(1.0078125)
        y, rstd = compiled(x, w)
    torch.cuda.synchronize()
    y_ref, rstd_ref = rmsnorm(x, w)
    if not (torch.allclose(rstd, rstd_ref, rtol=1e-4) and torch.allclose(y.float(), y_ref.float(), rtol=2e-2, atol=2e-2)):
        raise SystemExit("torch_compile_rmsnorm: compiled result differs from eager")
    mark_done()


if __name__ == "__main__":
    main()
