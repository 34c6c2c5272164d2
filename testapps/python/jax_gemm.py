"""jax_gemm: a GEMM fusion under JAX's defaults (issue 25): the BFC arena preallocates
75 % of the GPU in one allocation (104.9 GiB on an H200), of which the dispatch reaches
a few MiB. `f(a, b, c) = tanh(a @ b) * 0.5 + c` in bf16 is a fusion XLA autotunes while
it compiles (its candidate runs come between RedzoneAllocatorKernelImpl and
xla_fp_comparison launches); the app then calls it CALLS times on new inputs, so every
real dispatch changes the output. No report of addresses: JAX hands out none; the GPU
test finds the kernel with `kerncap profile`.

Do not set XLA_PYTHON_CLIENT_PREALLOCATE: the preallocation is the point."""

import os
import sys
import time

import jax
import jax.numpy as jnp

from kc_testapp import mark_done, write_report

N = int(os.environ.get("KC_JAX_N", "1024"))
CALLS = 4


@jax.jit
def f(a, b, c):
    return jnp.tanh(a @ b) * 0.5 + c


def main() -> None:
    if os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").lower() in ("false", "0"):
        print("jax_gemm: XLA_PYTHON_CLIENT_PREALLOCATE is off; this app tests the default", file=sys.stderr)
        sys.exit(2)
    key = jax.random.PRNGKey(7)
    ka, kb, kc = jax.random.split(key, 3)
    a = jax.random.normal(ka, (N, N), jnp.bfloat16)
    b = jax.random.normal(kb, (N, N), jnp.bfloat16) * 0.03125
    c = jax.random.normal(kc, (N, N), jnp.bfloat16)
    stats = jax.devices()[0].memory_stats() or {}
    write_report(n=N, pool_bytes=int(stats.get("pool_bytes", 0) or stats.get("bytes_limit", 0)))
    out = None
    for i in range(CALLS):
        # Apart in time from compilation: kerncap takes target launches within 50 ms of
        # XLA's autotuner helpers for candidate runs (docs/capture-format.md).
        time.sleep(0.2)
        out = f(a + i, b, c)
        out.block_until_ready()
    print(f"jax_gemm: {N}x{N} bf16, {CALLS} calls, checksum {float(jnp.sum(out.astype(jnp.float32))):.3f}")
    mark_done()


if __name__ == "__main__":
    main()
