"""nvtx_layers: an NVTX-annotated 8-layer model run at two sequence lengths.

Each layer runs one Triton kernel (kc_nvtx_layer: out = x * w, row-wise, one program
per token, so its grid is the sequence length) inside `torch.cuda.nvtx.range(f"layer.{i}")`,
and each forward runs inside `forward.S{seq}`, itself inside a start/end range
`step.{k}` (torch.cuda.nvtx.range_start). `--nvtx forward.S1024/layer.5` must pick the
kernel of layer 5 in the second forward: grid and `seq` argument 1024, layer 5's
weights (`w5` in the report) among its arguments. The report is written before the
first forward, so it exists when the capturing process exits.
"""

import torch
import triton
import triton.language as tl

from kc_testapp import mark_done, write_report

LAYERS = 8
HIDDEN = 256
SEQS = (256, 1024)


@triton.jit
def kc_nvtx_layer(x_ptr, w_ptr, out_ptr, seq, hidden, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = (cols < hidden) & (row < seq)
    x = tl.load(x_ptr + row * hidden + cols, mask=mask)
    w = tl.load(w_ptr + cols, mask=mask)
    tl.store(out_ptr + row * hidden + cols, x * w + 1.0, mask=mask)


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(13)
    weights = [torch.rand(HIDDEN, device="cuda", generator=gen) + 0.5 for _ in range(LAYERS)]
    inputs = {s: torch.rand(s, HIDDEN, device="cuda", generator=gen) for s in SEQS}
    torch.cuda.synchronize()  # CUDA is up before the first NVTX range
    write_report(**{f"w{i}": w for i, w in enumerate(weights)}, **{f"x{s}": x for s, x in inputs.items()})

    for step, seq in enumerate(SEQS):
        rid = torch.cuda.nvtx.range_start(f"step.{step}")
        with torch.cuda.nvtx.range(f"forward.S{seq}"):
            h = inputs[seq]
            for i, w in enumerate(weights):
                with torch.cuda.nvtx.range(f"layer.{i}"):
                    out = torch.empty_like(h)
                    kc_nvtx_layer[(seq,)](h, w, out, seq, HIDDEN, BLOCK=HIDDEN)
                    h = out
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_end(rid)
    mark_done()


if __name__ == "__main__":
    main()
