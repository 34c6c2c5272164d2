"""torch_expandable: a small eager workload meant to run with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, where the caching allocator maps
physical memory into reserved VA (cuMemAddressReserve + cuMemMap), so the captured
regions come from cuMemMap. Target: torch.lerp (its kernel names contain "lerp").
"""

import os

import torch

from kc_testapp import mark_done, write_report


def main() -> None:
    if "expandable_segments:True" not in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        print("torch_expandable: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is not set", flush=True)
    n = 1 << 22
    gen = torch.Generator(device="cuda").manual_seed(3)
    a = torch.randn(n, device="cuda", generator=gen)
    b = torch.randn(n, device="cuda", generator=gen)
    out = torch.empty(n, device="cuda")
    torch.cuda.synchronize()
    write_report(a=a, b=b, out=out, n=n)
    for _ in range(3):
        torch.lerp(a, b, 0.25, out=out)
        a.mul_(0.5)
    torch.cuda.synchronize()
    mark_done()


if __name__ == "__main__":
    main()
