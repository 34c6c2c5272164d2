"""seq_layer: one decoder layer of a small PyTorch model, as a sequence (issue 29,
tests/gpu/test_sequences.py, bench/sequences.py).

The layer: a Triton RMSNorm (kc_seq_rmsnorm), the q/k/v projections (fp16 GEMMs), SDPA
(PyTorch's default fp16 attention on the H200: cuDNN), the output projection, a residual
add, and an MLP (GEMM, GELU, GEMM, residual add): elementwise kernels between the GEMMs.

  --mode eager   warm-up once (outside any range: Triton compiles, cuBLAS and cuDNN set up,
                 the caching allocator holds every buffer), then STEPS steps, each inside
                 NVTX range "step.<s>", each layer inside "layer.<l>"
  --mode graph   warm-up once on a side stream, record the model with torch.cuda.graph,
                 then replay it STEPS times (kc_seq_rmsnorm's dispatch 0 is the warm-up,
                 dispatch 1 + s * LAYERS + l runs in replay s)
  --layers L     layers in the model (default 2)
The report holds the input, the output, the first layer's weights and `ballast`: 64 MiB
allocated first (its own caching-allocator segment) that no launch reaches, which a
pruned sequence drops (docs/prune.md, tests/gpu/test_sequences.py).
"""

import argparse

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from kc_testapp import mark_done, write_report

TOKENS, HIDDEN, HEADS, FFN = 512, 1024, 8, 2048


@triton.jit
def kc_seq_rmsnorm(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    var = tl.sum(x * x, axis=0) / n_cols
    w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
    y = x * tl.rsqrt(var + eps) * w
    tl.store(out_ptr + row * n_cols + cols, y.to(tl.float16), mask=mask)


def rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    kc_seq_rmsnorm[(x.shape[0],)](x, w, out, x.shape[1], 1e-6, BLOCK=triton.next_power_of_2(x.shape[1]))
    return out


class Layer:
    def __init__(self, gen: torch.Generator):
        def weight(*shape):
            return (torch.randn(*shape, device="cuda", generator=gen) * 0.02).half()

        self.norm1 = torch.ones(HIDDEN, device="cuda", dtype=torch.float16)
        self.norm2 = torch.ones(HIDDEN, device="cuda", dtype=torch.float16)
        self.wqkv, self.wo = weight(3 * HIDDEN, HIDDEN), weight(HIDDEN, HIDDEN)
        self.w1, self.w2 = weight(FFN, HIDDEN), weight(HIDDEN, FFN)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        h = rmsnorm(x, self.norm1)
        q, k, v = F.linear(h, self.wqkv).view(TOKENS, 3, HEADS, HIDDEN // HEADS).permute(1, 2, 0, 3)
        a = F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), is_causal=True)
        a = a.squeeze(0).permute(1, 0, 2).reshape(TOKENS, HIDDEN)
        x = x + F.linear(a, self.wo)
        h = rmsnorm(x, self.norm2)
        return x + F.linear(F.gelu(F.linear(h, self.w1)), self.w2)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("eager", "graph"), default="eager")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    args = p.parse_args()
    ballast = torch.full((16 << 20,), 1.0, device="cuda")  # 64 MiB nothing reads
    gen = torch.Generator(device="cuda").manual_seed(29)
    layers = [Layer(gen) for _ in range(args.layers)]
    x = torch.randn(TOKENS, HIDDEN, device="cuda", generator=gen).half()

    def model(inp: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(layers):
            with torch.cuda.nvtx.range(f"layer.{i}"):
                inp = layer(inp)
        return inp

    if args.mode == "eager":
        out = model(x)  # warm-up, outside every step range
        torch.cuda.synchronize()
        write_report(x=x, out=out, wqkv=layers[0].wqkv, ballast=ballast)
        for s in range(args.steps):
            with torch.cuda.nvtx.range(f"step.{s}"):
                out = model(x)
            torch.cuda.synchronize()
    else:
        static_x = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            static_out = model(static_x)  # warm-up: kc_seq_rmsnorm's dispatches 0 .. 2 * layers - 1
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = model(static_x)
        torch.cuda.synchronize()
        write_report(x=static_x, out=static_out, wqkv=layers[0].wqkv, ballast=ballast)
        for s in range(args.steps):
            static_x.mul_(0.5)  # each replay on a new input
            with torch.cuda.nvtx.range(f"replay.{s}"):
                g.replay()
            torch.cuda.synchronize()
    mark_done()


if __name__ == "__main__":
    main()
