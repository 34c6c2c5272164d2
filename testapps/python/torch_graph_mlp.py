"""torch_graph_mlp: one MLP step (fp16 Linear -> Triton bias+GELU -> Linear) recorded with
torch.cuda.graph and replayed with a new input copied in before each replay (issue 12).

Warm-up runs the step eagerly twice on a side stream (PyTorch's recipe), so each kernel's
dispatches 0 and 1 are eager and replay r runs dispatch 2 + r (the GEMMs: 4 + 2r and
5 + 2r when both use one nvjet kernel). Replay r's input is filled with (r + 1) / 8.
  --replays N   graph replays (default 6)
  --eager       the same steps without a graph (the bench's baseline)
  --steps N     with --eager: steps after warm-up (default: --replays)
"""

import argparse

import torch
import triton
import triton.language as tl

from kc_testapp import mark_done, write_report

# bias+GELU reads and writes 512 MiB each: the GEMM's output left in the 60 MB L2 speeds the
# in-app kernel up by a few percent only, so replay and app agree within 10%. The GEMMs stay
# memory-bound (K or N = 256): back-to-back compute-bound GEMMs on the replay hit the
# power limit and clock down (measured: 1.43 ms replayed vs 1.18 ms in the app at 2048).
TOKENS, D_IN, D_HID = 16384, 256, 16384
BLOCK = 1024
WARMUP = 2


@triton.jit
def kc_bias_gelu(x_ptr, b_ptr, out_ptr, n, n_cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offs % n_cols, mask=mask).to(tl.float32)
    y = x + b
    # tanh-approximated GELU; tanh(z) = 2 * sigmoid(2z) - 1
    z = 0.7978845608 * (y + 0.044715 * y * y * y)
    g = 0.5 * y * (2.0 * tl.sigmoid(2.0 * z))
    tl.store(out_ptr + offs, g.to(tl.float16), mask=mask)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replays", type=int, default=6)
    parser.add_argument("--eager", action="store_true")
    parser.add_argument("--steps", type=int)
    args = parser.parse_args()

    gen = torch.Generator(device="cuda").manual_seed(7)
    w1 = (torch.randn(D_IN, D_HID, device="cuda", generator=gen) * 0.03).half()
    b1 = (torch.randn(D_HID, device="cuda", generator=gen) * 0.1).half()
    w2 = (torch.randn(D_HID, D_IN, device="cuda", generator=gen) * 0.03).half()
    x = torch.zeros(TOKENS, D_IN, device="cuda", dtype=torch.float16)
    h_pre = torch.empty(TOKENS, D_HID, device="cuda", dtype=torch.float16)
    h = torch.empty_like(h_pre)
    out = torch.empty(TOKENS, D_IN, device="cuda", dtype=torch.float16)
    n = h_pre.numel()
    grid = (triton.cdiv(n, BLOCK),)

    def step():
        torch.matmul(x, w1, out=h_pre)
        kc_bias_gelu[grid](h_pre, b1, h, n, D_HID, BLOCK=BLOCK)
        torch.matmul(h, w2, out=out)

    torch.cuda.synchronize()
    write_report(x=x, w1=w1, b1=b1, w2=w2, h_pre=h_pre, h=h, out=out, warmup=WARMUP, replays=args.replays)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            step()
    torch.cuda.current_stream().wait_stream(side)

    sums = []
    if args.eager:
        for r in range(args.steps or args.replays):
            x.fill_((r + 1) / 8)
            step()
            sums.append(float(out.float().sum()))
    else:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        for r in range(args.replays):
            x.fill_((r + 1) / 8)
            graph.replay()
            sums.append(float(out.float().sum()))
    torch.cuda.synchronize()
    # The app's own check: the graph's result equals an eager step on the last input.
    expect = torch.nn.functional.gelu(torch.matmul(x, w1).float() + b1.float(), approximate="tanh").half()
    expect = torch.matmul(expect, w2)
    if not torch.allclose(out.float(), expect.float(), atol=2e-2, rtol=2e-2):
        raise SystemExit("torch_graph_mlp: the last step's output differs from an eager recomputation")
    mark_done()


if __name__ == "__main__":
    main()
