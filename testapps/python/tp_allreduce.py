"""tp_allreduce: a 2-rank tensor-parallel step under torchrun (NCCL).

Each rank multiplies its own input by its own weight shard, the partial products are
summed with an NCCL all-reduce, then a Triton kernel (kc_tp_bias_act) adds a bias and
scales: both differ per rank, so a capture shows whose data it holds. Each rank writes
its report to KC_TESTAPP_REPORT with "{rank}" replaced by its rank, and its bias bytes
next to it (bias-rank<r>.bin), before the first Triton launch. Every step ends with a
second all-reduce, so once one rank has gone (kerncap ends the capturing process) the
other blocks in NCCL until kerncap stops the job.

Rank 1 waits half a second before its Triton launch: by then rank 0 has launched the
step's second all-reduce, whose NCCL kernel writes its data into rank 1's receive
buffers and then waits. Without the wait those peer writes could land between rank 1's
pre- and post-state snapshots, and a replay (which cannot make them) would not match
the post-state there (docs/selection.md, limits).
"""

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import triton
import triton.language as tl

M, K, N = 64, 512, 1024
STEPS = 3


@triton.jit
def kc_tp_bias_act(y_ptr, bias_ptr, out_ptr, scale, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    b = tl.load(bias_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(y + b, 0.0) * scale, mask=mask)


def main() -> None:
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device(f"cuda:{local}"))
    gen = torch.Generator(device="cuda").manual_seed(100 + rank)
    x = torch.randn(M, K, device="cuda", generator=gen)
    w = torch.randn(K, N, device="cuda", generator=gen)
    bias = torch.randn(M * N, device="cuda", generator=gen)
    scale = 1.0 + rank
    out = torch.empty(M * N, device="cuda")
    torch.cuda.synchronize()
    report = os.environ.get("KC_TESTAPP_REPORT")
    if report:
        path = Path(report.replace("{rank}", str(rank)))
        bias.cpu().numpy().tofile(path.with_name(f"bias-rank{rank}.bin"))
        import json

        path.write_text(json.dumps({"rank": rank, "device": local, "pid": os.getpid(), "bias": bias.data_ptr(),
                                    "out": out.data_ptr(), "scale": scale}))
    for _ in range(STEPS):
        y = (x @ w).reshape(-1)
        dist.all_reduce(y)
        if rank == 1:
            torch.cuda.synchronize()
            time.sleep(0.5)
        kc_tp_bias_act[(triton.cdiv(M * N, 1024),)](y, bias, out, scale, M * N, BLOCK=1024)
        dist.all_reduce(out)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    done = os.environ.get("KC_TESTAPP_DONE")
    if done:
        Path(done.replace("{rank}", str(rank))).touch()


if __name__ == "__main__":
    main()
