"""The one-block Triton kernel testapps/python/paired_launches.py launches (--kind triton);
a module of its own so the torch kind never imports Triton."""

import triton
import triton.language as tl


@triton.jit
def kc_paired_add_one(ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(ptr + offs, tl.load(ptr + offs, mask=mask) + 1.0, mask=mask)
