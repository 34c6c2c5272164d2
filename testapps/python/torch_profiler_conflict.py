"""torch_profiler_conflict: runs an eager workload under torch.profiler with CUDA
activities, so Kineto subscribes to CUPTI too. Only one CUPTI subscriber is allowed
per process (DESIGN §6): extract must detect the conflict and say so.
Target: torch.lerp (kernel names contain "lerp").
"""

import torch
from torch.profiler import ProfilerActivity, profile

from kc_testapp import mark_done


def main() -> None:
    n = 1 << 20
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        a = torch.ones(n, device="cuda")
        b = torch.zeros(n, device="cuda")
        for _ in range(3):
            out = torch.lerp(a, b, 0.5)
        torch.cuda.synchronize()
    if out[0].item() != 0.5:
        raise SystemExit("torch_profiler_conflict: wrong result")
    mark_done()


if __name__ == "__main__":
    main()
