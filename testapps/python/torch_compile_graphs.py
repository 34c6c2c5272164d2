"""torch_compile_graphs: torch.compile(mode="reduce-overhead") on a block with a row
reduction and an independent pointwise op, so Inductor emits two kernels and replays them
from CUDA graphs (CUDAGraph trees) after the first calls (issue 12).

Call k's inputs are filled with (k + 1) / 16 (x) and (k + 1) / 32 (y) before the call.
  --calls N   calls of the compiled block (default 8)
"""

import argparse

import torch

from kc_testapp import mark_done, write_report

ROWS, COLS = 8192, 8192  # 128 MiB per input: each kernel runs tens of us on an H200


def block(x, w, y):
    rows = (x.float() * w.float()).sum(dim=-1)         # reduction kernel
    act = torch.nn.functional.gelu(y.float()) * 2.0 + 1.0  # pointwise kernel, another input
    return rows, act.half()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=8)
    args = parser.parse_args()
    compiled = torch.compile(block, mode="reduce-overhead")
    x = torch.empty(ROWS, COLS, device="cuda", dtype=torch.float16)
    w = torch.linspace(-1, 1, COLS, device="cuda").half()
    y = torch.empty(COLS, ROWS, device="cuda", dtype=torch.float16)
    write_report(x=x, w=w, y=y, calls=args.calls)
    for k in range(args.calls):
        x.fill_((k + 1) / 16)
        y.fill_((k + 1) / 32)
        rows, act = compiled(x, w, y)
        want_rows, want_act = block(x, w, y)
        if not torch.allclose(rows, want_rows, atol=1e-2, rtol=1e-3) or not torch.allclose(
            act.float(), want_act.float(), atol=1e-2, rtol=1e-2
        ):
            raise SystemExit(f"torch_compile_graphs: call {k} differs from eager")
    torch.cuda.synchronize()
    mark_done()


if __name__ == "__main__":
    main()
