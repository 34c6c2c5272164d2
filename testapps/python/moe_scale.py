"""moe_scale: a fused-MoE-style PyTorch + Triton forward holding >= 20 GB of expert
weights (issue 7: bench/scale.py captures it on the H200).

    python3 moe_scale.py [--layers 24] [--experts 8] [--d-model 4096] [--d-ff 7168]
                         [--tokens 256] [--seed 0]

Each layer stacks its experts' weights in one bf16 tensor per matrix, W_up [E, D, F] and
W_down [E, F, D] (defaults: 24 x 2 x 8 x 4096 x 7168 x 2 bytes = 22.5 GB), made on the
GPU from a seeded generator (no host round trip). Per layer, on the GPU only:

    router matmul -> softmax -> top-1 expert per token -> tokens sorted by expert, each
    expert's run padded to BLOCK_M (vLLM's moe_align_block_size) ->
    moe_scale_expert_ffn(h, W_up[l])  -> silu -> moe_scale_expert_ffn(act, W_down[l])
    -> h = h + gate * down

`moe_scale_expert_ffn` is one plain @triton.jit kernel with fixed blocks (no autotuning,
so dispatch counting is trivial): a block of BLOCK_M sorted tokens, all routed to one
expert e, times W[e]. It runs twice per layer (up, then down projection); torch's silu
kernel runs once per layer. So the last layer's up projection is dispatch
2 * (layers - 1) of moe_scale_expert_ffn and its silu is dispatch layers - 1 of
"silu" (the report names both as target_* and second_*).

Before the last layer's up projection the app synchronizes and notes the time
(t_target), so a bench can tell the app's own time to the dispatch. Timestamps are
time.time() values (t_start: before torch is imported; t_weights: weights ready;
t_target; t_forward: forward finished) and go to the report (KC_TESTAPP_REPORT) as soon
as they are known. At the end the last layer's two projections are checked against torch.
"""

import time

T_START = time.time()  # before the heavy imports: a bench compares against process start

import argparse  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kc_testapp import mark_done, write_report  # noqa: E402

TARGET_KERNEL = "moe_scale_expert_ffn"
SECOND_KERNEL = "silu"  # torch's silu_kernel: one launch per layer
MOE_LAUNCHES_PER_LAYER = 2  # up and down projection
BLOCK_M, BLOCK_N, BLOCK_K = 32, 128, 64
TOLERANCE = 0.02  # of the reference's largest magnitude: bf16 output rounding, both sides


@triton.jit
def moe_scale_expert_ffn(x_ptr, w_ptr, out_ptr, sorted_ids_ptr, block_expert_ptr, num_tokens, num_experts, K, N,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # x: [num_tokens, K] bf16; w: [num_experts, K, N] bf16; out: [num_tokens, N] bf16.
    # sorted_ids: token ids grouped by expert, each group padded to BLOCK_M with
    # num_tokens; block_expert[b]: the expert of sorted block b, num_experts past the end.
    # K is a multiple of BLOCK_K and N of BLOCK_N (no masks on those).
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    e = tl.load(block_expert_ptr + pid_m)
    if e >= num_experts:
        return
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    tok = tl.load(sorted_ids_ptr + offs_m)
    valid = tok < num_tokens
    tok = tl.where(valid, tok, 0).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_rows = x_ptr + tok[:, None] * K
    w_e = w_ptr + e.to(tl.int64) * K * N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(x_rows + (k0 + offs_k)[None, :], mask=valid[:, None], other=0.0)
        b = tl.load(w_e + (k0 + offs_k)[:, None] * N + offs_n[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(out_ptr + tok[:, None] * N + offs_n[None, :], acc.to(tl.bfloat16), mask=valid[:, None])


def align_routing(expert_of_token: torch.Tensor, experts: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(sorted_ids, block_expert, blocks) for top-1 routing, on the GPU without a host
    sync: the grid is sized for the worst case, blocks past the end get `experts`."""
    tokens = expert_of_token.numel()
    device = expert_of_token.device
    counts = torch.zeros(experts, dtype=torch.int64, device=device)
    counts.scatter_add_(0, expert_of_token, torch.ones_like(expert_of_token))
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    seg_end = torch.cumsum(padded, 0)
    seg_start = seg_end - padded
    tok_start = torch.cumsum(counts, 0) - counts
    order = torch.argsort(expert_of_token, stable=True)
    e_sorted = expert_of_token[order]
    rank = torch.arange(tokens, device=device) - tok_start[e_sorted]
    blocks = triton.cdiv(tokens, BLOCK_M) + experts
    sorted_ids = torch.full((blocks * BLOCK_M,), tokens, dtype=torch.int32, device=device)
    sorted_ids[seg_start[e_sorted] + rank] = order.to(torch.int32)
    block_start = torch.arange(blocks, device=device) * BLOCK_M
    block_expert = torch.searchsorted(seg_end, block_start, right=True).to(torch.int32)
    return sorted_ids, block_expert, blocks


def expert_ffn(x, w, out, sorted_ids, block_expert, blocks) -> None:
    experts, k, n = w.shape
    moe_scale_expert_ffn[(blocks, n // BLOCK_N)](
        x, w, out, sorted_ids, block_expert, x.shape[0], experts, k, n,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=4, num_stages=3,
    )


def reference(x, w, expert_of_token) -> torch.Tensor:
    out = torch.empty(x.shape[0], w.shape[2], dtype=torch.float32, device=x.device)
    for e in range(w.shape[0]):
        rows = (expert_of_token == e).nonzero().squeeze(1)
        if rows.numel():
            out[rows] = x[rows].float() @ w[e].float()
    return out


def check(name: str, got: torch.Tensor, ref: torch.Tensor) -> float:
    err = (got.float() - ref).abs().max().item()
    scale = ref.abs().max().item()
    if not err <= TOLERANCE * scale:
        raise SystemExit(f"moe_scale: wrong {name} projection in the last layer "
                         f"(max abs error {err:.4g} against torch, largest value {scale:.4g})")
    return err


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=4096)
    parser.add_argument("--d-ff", type=int, default=7168)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if min(args.layers, args.experts, args.tokens) < 1:
        parser.error("--layers, --experts and --tokens must be at least 1")
    for flag, value in (("--d-model", args.d_model), ("--d-ff", args.d_ff)):
        if value < BLOCK_N or value % BLOCK_N:
            parser.error(f"{flag} {value} is not a positive multiple of {BLOCK_N} (the kernel's fixed block)")
    return args


def main() -> None:
    args = parse_args()
    L, E, D, FF, T = args.layers, args.experts, args.d_model, args.d_ff, args.tokens
    bf16, dev = torch.bfloat16, "cuda"
    report = dict(
        layers=L, experts=E, d_model=D, d_ff=FF, tokens=T, weight_bytes=2 * L * E * D * FF * 2,
        target_kernel=TARGET_KERNEL, target_dispatch=MOE_LAUNCHES_PER_LAYER * (L - 1),
        second_kernel=SECOND_KERNEL, second_dispatch=L - 1, t_start=T_START, t_imported=time.time(),
    )

    gen = torch.Generator(device=dev).manual_seed(args.seed)
    # Filled in place: a scaled copy would need the memory twice. std 1/sqrt(K) keeps
    # every layer's outputs about unit size.
    w_up = [torch.empty(E, D, FF, dtype=bf16, device=dev).normal_(0.0, D ** -0.5, generator=gen) for _ in range(L)]
    w_down = [torch.empty(E, FF, D, dtype=bf16, device=dev).normal_(0.0, FF ** -0.5, generator=gen) for _ in range(L)]
    router = [torch.empty(D, E, dtype=bf16, device=dev).normal_(0.0, D ** -0.5, generator=gen) for _ in range(L)]
    h = torch.empty(T, D, dtype=bf16, device=dev).normal_(0.0, 1.0, generator=gen)
    torch.cuda.synchronize()
    report.update(t_weights=time.time(), w_up_first=w_up[0], w_up_last=w_up[-1], w_down_last=w_down[-1])
    write_report(**report)
    print(f"moe_scale: {report['weight_bytes'] / 1e9:.2f} GB of expert weights ({L} layers x {E} experts, "
          f"{D}x{FF}) ready at {report['t_weights'] - T_START:.2f} s", flush=True)

    for layer in range(L):
        last = layer == L - 1
        probs = torch.softmax((h @ router[layer]).float(), dim=-1)
        gate, expert_of_token = probs.max(dim=-1)
        sorted_ids, block_expert, blocks = align_routing(expert_of_token, E)
        up = torch.empty(T, FF, dtype=bf16, device=dev)
        if last:
            # The bench's "time to the dispatch": everything before it has finished.
            torch.cuda.synchronize()
            report.update(t_target=time.time(), h_last=h, up_last=up, sorted_ids_last=sorted_ids,
                          block_expert_last=block_expert)
            write_report(**report)
        expert_ffn(h, w_up[layer], up, sorted_ids, block_expert, blocks)
        act = F.silu(up)
        down = torch.empty(T, D, dtype=bf16, device=dev)
        expert_ffn(act, w_down[layer], down, sorted_ids, block_expert, blocks)
        if last:
            h_last, routing_last, up_last, act_last, down_last = h, expert_of_token, up, act, down
        h = h + down * gate.to(bf16)[:, None]
    torch.cuda.synchronize()
    report["t_forward"] = time.time()

    err_up = check("up", up_last, reference(h_last, w_up[-1], routing_last))
    err_down = check("down", down_last, reference(act_last, w_down[-1], routing_last))
    report.update(max_err_up=err_up, max_err_down=err_down)
    write_report(**report)
    print(f"moe_scale: forward done at {report['t_forward'] - T_START:.2f} s (target dispatched at "
          f"{report['t_target'] - T_START:.2f} s); last layer matches torch "
          f"(max abs error up {err_up:.3g}, down {err_down:.3g})", flush=True)
    mark_done()


if __name__ == "__main__":
    main()
