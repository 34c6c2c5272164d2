"""paged_attention: a vLLM-style decode step over a paged KV cache preallocated at 90 %
of the free GPU memory (issue 25). The cache is one tensor (one allocation, ~125 GiB on
an H200); a few sequences own blocks scattered over all of it (a block table, as vLLM's
block manager hands them out), and a Triton kernel computes one attention output per
(sequence, head) by walking the sequence's block table. Every step appends one token
(K and V written into its block) and clears `out` first, so each dispatch reads new
cache bytes and changes its output. Reported: the tensors' device addresses.

The kernel is deterministic (no atomics; fixed-order reductions): byte-exact in replay."""

import torch
import triton
import triton.language as tl

from kc_testapp import mark_done, write_report

SEQS, HEADS, HEAD_DIM, BLOCK = 8, 8, 64, 16
MAX_BLOCKS_PER_SEQ = 16
STEPS = 3
FRACTION = 0.90


@triton.jit
def kc_paged_attn_decode(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, seq_lens_ptr, out_ptr, scale,
                         max_blocks, HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    # q: [seqs, heads, dim] fp16; caches: [blocks, BLOCK, heads, dim] fp16; block_table:
    # [seqs, max_blocks] int32; seq_lens: [seqs] int32; out: [seqs, heads, dim] fp32.
    s = tl.program_id(0)
    h = tl.program_id(1)
    d = tl.arange(0, HEAD_DIM)
    t = tl.arange(0, BLOCK)
    q = tl.load(q_ptr + (s * HEADS + h) * HEAD_DIM + d).to(tl.float32)
    n = tl.load(seq_lens_ptr + s)
    m = tl.full([1], -float("inf"), tl.float32)
    l = tl.zeros([1], tl.float32)
    acc = tl.zeros([HEAD_DIM], tl.float32)
    for b in range(0, tl.cdiv(n, BLOCK)):
        blk = tl.load(block_table_ptr + s * max_blocks + b).to(tl.int64)
        rows = blk * BLOCK + t
        offs = (rows[:, None] * HEADS + h) * HEAD_DIM + d[None, :]
        valid = (b * BLOCK + t) < n
        k = tl.load(k_cache_ptr + offs, mask=valid[:, None], other=0.0).to(tl.float32)
        v = tl.load(v_cache_ptr + offs, mask=valid[:, None], other=0.0).to(tl.float32)
        logits = tl.sum(k * q[None, :], axis=1) * scale
        logits = tl.where(valid, logits, -float("inf"))
        m_new = tl.maximum(m, tl.max(logits, axis=0))
        p = tl.exp(logits - m_new)
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new
    tl.store(out_ptr + (s * HEADS + h) * HEAD_DIM + d, acc / l)


def main() -> None:
    torch.manual_seed(3)
    dev = "cuda"
    free, _ = torch.cuda.mem_get_info()
    per_block = 2 * BLOCK * HEADS * HEAD_DIM * 2  # K and V, fp16
    blocks = int(free * FRACTION) // per_block
    # One allocation for both caches (vLLM allocates its KV cache up front like this).
    cache = torch.empty((2, blocks, BLOCK, HEADS, HEAD_DIM), dtype=torch.float16, device=dev)
    k_cache, v_cache = cache[0], cache[1]
    gen = torch.Generator(device="cpu").manual_seed(11)
    table = torch.randperm(blocks, generator=gen)[: SEQS * MAX_BLOCKS_PER_SEQ].to(torch.int32).view(SEQS, -1)
    block_table = table.to(dev)
    seq_lens = torch.tensor([17 + 9 * s for s in range(SEQS)], dtype=torch.int32)
    # The sequences' tokens so far, written where the block table says.
    for s in range(SEQS):
        for pos in range(int(seq_lens[s])):
            blk, row = int(table[s, pos // BLOCK]), pos % BLOCK
            k_cache[blk, row] = torch.randn(HEADS, HEAD_DIM, device=dev).half()
            v_cache[blk, row] = torch.randn(HEADS, HEAD_DIM, device=dev).half()
    q = torch.randn(SEQS, HEADS, HEAD_DIM, device=dev).half()
    out = torch.zeros(SEQS, HEADS, HEAD_DIM, device=dev, dtype=torch.float32)
    lens = seq_lens.to(dev)
    write_report(cache=cache, k_cache=k_cache, v_cache=v_cache, block_table=block_table, seq_lens=lens, q=q,
                 out=out, cache_bytes=cache.numel() * cache.element_size(), blocks=blocks)
    for step in range(STEPS):
        for s in range(SEQS):  # append this step's token
            pos = int(seq_lens[s])
            blk, row = int(table[s, pos // BLOCK]), pos % BLOCK
            k_cache[blk, row] = torch.randn(HEADS, HEAD_DIM, device=dev).half()
            v_cache[blk, row] = torch.randn(HEADS, HEAD_DIM, device=dev).half()
        seq_lens += 1
        lens.copy_(seq_lens)
        out.zero_()
        kc_paged_attn_decode[(SEQS, HEADS)](q, k_cache, v_cache, block_table, lens, out, HEAD_DIM ** -0.5,
                                            MAX_BLOCKS_PER_SEQ, HEADS=HEADS, HEAD_DIM=HEAD_DIM, BLOCK=BLOCK)
        torch.cuda.synchronize()
    print(f"paged_attention: cache {cache.numel() * 2 / 2**30:.1f} GiB in {blocks} blocks, {STEPS} steps, "
          f"out checksum {float(out.sum()):.4f}")
    mark_done()


if __name__ == "__main__":
    main()
