"""jax_chain: a chain of matmuls under JAX with XLA's default flags (issue 43): XLA runs
the step's fusions, GEMM fusions among them, as CUDA graphs (its command buffers), whose
edges carry data (the driver's cuGraphGetEdges answers CUDA_ERROR_LOSSY_QUERY to a
query without it). `step(h)` is LAYERS x `h = tanh(h @ w_i) + h` in bf16; the app calls it
CALLS times, apart in time from compilation (kerncap takes target launches within 50 ms
of XLA's autotuner helpers for candidate runs). The GPU test finds the kernel with
`kerncap profile`. XLA_PYTHON_CLIENT_PREALLOCATE=false keeps the arena small (the arena
is jax_gemm's subject, not this app's)."""

import os
import time

import jax
import jax.numpy as jnp

from kc_testapp import mark_done, write_report

N = int(os.environ.get("KC_JAX_N", "1024"))
LAYERS = 4
CALLS = 6


def main() -> None:
    key = jax.random.PRNGKey(11)
    keys = jax.random.split(key, LAYERS + 1)
    ws = [jax.random.normal(k, (N, N), jnp.bfloat16) * 0.03125 for k in keys[:LAYERS]]
    x = jax.random.normal(keys[LAYERS], (N, N), jnp.bfloat16)

    @jax.jit
    def step(h, ws):
        for w in ws:
            h = jnp.tanh(h @ w) + h
        return h

    write_report(n=N, layers=LAYERS)
    out = None
    for i in range(CALLS):
        time.sleep(0.2)
        out = step(x + i, ws)
        out.block_until_ready()
    print(f"jax_chain: {N}x{N} bf16, {LAYERS} layers, {CALLS} calls, "
          f"checksum {float(jnp.sum(out.astype(jnp.float32))):.3f}; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    mark_done()


if __name__ == "__main__":
    main()
