'''The `reproducer.py` written into a Triton reproducer: compile source/kernel.py with the
pinned contract, launch it through PyTorch on the captured inputs, compare with the
captured outputs, optionally time it. It reads everything from source/triton.json.'''

REPRODUCER_PY = '''#!/usr/bin/env python3
"""Standalone reproducer of the Triton kernel {kernel}, written by kerncap.

  python reproducer.py                          # compile source/kernel.py, launch, compare
  python reproducer.py --config num_warps=4     # pin other compile options
  python reproducer.py --atol 1e-3 --rtol 1e-3  # compare with a tolerance (dtypes known)
  python reproducer.py --iterations 100         # also time the kernel

Inputs are the captured pre-state of the regions the tensor arguments point into,
uploaded to fresh PyTorch buffers; the grid is the captured one (or the pinned
autotune config's), in programs. The
kernel is compiled with the captured signature, constexprs and options
(source/triton.json), so only your edits to source/kernel.py change the code.
Exit status: 0 when every compared region matches, 1 otherwise.
"""

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="compile options to pin instead of the captured ones, e.g. num_warps=4,num_stages=2")
    ap.add_argument("--atol", type=float, help="absolute tolerance (default: byte-exact)")
    ap.add_argument("--rtol", type=float, help="relative tolerance (default: byte-exact)")
    ap.add_argument("--iterations", type=int, default=0, help="time this many launches after the check")
    opts = ap.parse_args()

    import torch
    import triton

    from kerncap.reproducer.format import Capture
    from kerncap.errors import KerncapError
    from kerncap.triton import configs, pinned, region_dtypes, torch_launch
    from kerncap.triton.values import jit_resolver

    try:
        capture = Capture.open(HERE)
        spec = pinned.load_spec(HERE)
        overrides = pinned.parse_config(opts.config, spec)
        compiled, _fn, module = pinned.compile_pinned(HERE, spec, overrides)
        grid, grid_note = configs.pinned_grid(spec, pinned.split_overrides(overrides, spec)[1])
        buffers = torch_launch.region_buffers(capture, spec, torch)
        args = torch_launch.kernel_arguments(spec, capture, buffers, torch, jit_resolver(module))
    except KerncapError as exc:
        print(f"reproducer: {{exc}}", file=sys.stderr)
        return exc.exit_code  # 2 usage, 3 could not run (docs/cli.md)
    torch_launch.install_allocator(torch, triton)
    if grid_note:
        print(grid_note)
    grid = tuple(grid)  # programs, not threads
    compiled[grid](*args)
    torch.cuda.synchronize()

    checks = torch_launch.compare(capture, buffers, region_dtypes(HERE, capture), torch, opts.atol, opts.rtol)
    for c in checks:
        state = "ok" if c.passed else "DIFFERS"
        detail = f"{{c.mismatched_bytes}} bytes differ"
        if c.mismatched_elements is not None:
            detail += f", {{c.mismatched_elements}} {{c.dtype}} elements outside tolerance"
        print(f"region {{c.region}} ({{c.dtype or 'bytes'}}, {{c.size}} B): {{state}} ({{detail}})")
    unchecked = [r.id for r in capture.regions if r.written and r.id not in buffers]
    if unchecked:
        print(f"regions written but not reachable from the arguments (not checked): {{unchecked}}")

    if opts.iterations > 0:
        # Timing reruns the kernel on its own outputs: fine for timing, not for checking.
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(opts.iterations):
            start.record()
            compiled[grid](*args)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000.0)
        times.sort()
        print(f"{{len(times)}} launches: median {{times[len(times) // 2]:.2f}} us, min {{times[0]:.2f}} us")
    return 0 if all(c.passed for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
'''


def render(kernel: str) -> str:
    return REPRODUCER_PY.format(kernel=kernel)
