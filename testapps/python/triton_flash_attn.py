"""triton_flash_attn: an @triton.autotune'd FlashAttention-style fp16 forward kernel
(online softmax over K/V blocks, fp32 accumulators, fp16 output), called 3 times.

The configs differ in BLOCK_N (the K/V block size: it changes the order of the
online-softmax accumulation, hence the rounding) and num_warps. As in
triton_autotune.py, dispatch 0 is the first launch with the chosen config and the
report gets the chosen config (`best`) only after tuning, so tests extract with
keep_running. `out` is cleared before every call so that every dispatch changes it.

The kernel reloads the loop-invariant Q tile on every K/V iteration with a volatile load
(which the compiler may not hoist): that is the demo's deliberate inefficiency. The GPU
tests' "faster edit" loads Q once before the loop: same values, less memory traffic.
"""

import torch
import triton
import triton.language as tl

from kc_testapp import mark_done, write_report

BATCH, HEADS, SEQ, HEAD_DIM = 2, 4, 1024, 64


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=2),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=2),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 128}, num_warps=8, num_stages=2),
    ],
    key=["seq_len"],
)
@triton.jit
def kc_flash_attn_fwd(Q, K, V, Out, sm_scale, seq_len,
                      HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Q, K, V, Out: contiguous [batch * heads, seq_len, HEAD_DIM] fp16; seq_len is a
    # multiple of BLOCK_M and BLOCK_N (no masks).
    start_m = tl.program_id(0)
    base = tl.program_id(1).to(tl.int64) * seq_len * HEAD_DIM
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    qk_scale = sm_scale * 1.44269504  # 1/ln(2): exp(x) == exp2(x * log2(e))
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for start_n in range(0, seq_len, BLOCK_N):
        # The demo's deliberate inefficiency: Q does not change inside the loop, yet it is
        # reloaded on every iteration (volatile, so that the compiler cannot hoist it).
        q = tl.load(q_ptrs, volatile=True)
        kv_offs = base + (start_n + offs_n)[:, None] * HEAD_DIM + offs_d[None, :]
        k = tl.load(K + kv_offs)
        v = tl.load(V + kv_offs)
        qk = tl.dot(q, tl.trans(k))
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(tl.float16), v, acc)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(Out + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(tl.float16))


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(11)
    shape = (BATCH, HEADS, SEQ, HEAD_DIM)
    q = torch.randn(shape, device="cuda", dtype=torch.float16, generator=gen)
    k = torch.randn(shape, device="cuda", dtype=torch.float16, generator=gen)
    v = torch.randn(shape, device="cuda", dtype=torch.float16, generator=gen)
    out = torch.empty(shape, device="cuda", dtype=torch.float16)
    sm_scale = HEAD_DIM ** -0.5
    torch.cuda.synchronize()
    tensors = dict(q=q, k=k, v=v, out=out, seq=SEQ, batch=BATCH, heads=HEADS, head_dim=HEAD_DIM)
    write_report(best=None, **tensors)

    grid = lambda meta: (triton.cdiv(SEQ, meta["BLOCK_M"]), BATCH * HEADS)  # noqa: E731
    for _ in range(3):
        # The autotuner's benchmark runs already wrote `out` in the first call: clear it
        # so the captured dispatch (1, after tuning) changes it.
        out.zero_()
        kc_flash_attn_fwd[grid](q, k, v, out, sm_scale, SEQ, HEAD_DIM=HEAD_DIM)
        best = kc_flash_attn_fwd.best_config
        write_report(
            best={"BLOCK_M": best.kwargs["BLOCK_M"], "BLOCK_N": best.kwargs["BLOCK_N"],
                  "num_warps": best.num_warps, "num_stages": best.num_stages},
            **tensors,
        )
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=sm_scale)
    err = (out.float() - ref.float()).abs().max().item()
    if not err <= 1e-2:
        raise SystemExit(f"triton_flash_attn: wrong result (max abs error {err} against SDPA)")
    mark_done()


if __name__ == "__main__":
    main()
