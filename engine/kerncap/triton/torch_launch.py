"""Launching a Triton reproducer through PyTorch: captured regions become GPU buffers,
tensor arguments become views into them at the captured offsets, and after the launch
each buffer is compared with the captured post-state.

The buffers are ordinary PyTorch allocations, not the captured virtual addresses: the
kernel sees the right bytes through its arguments, which is all a Triton kernel reads
unless it follows pointers stored in memory (then use `kerncap replay`, which restores
the original addresses).
"""

from __future__ import annotations

from dataclasses import dataclass

from kerncap.errors import KerncapError
from kerncap.reproducer.format import Capture
from kerncap.triton.values import decode_value


@dataclass
class RegionCheck:
    region: int
    dtype: str | None
    size: int
    mismatched_bytes: int
    mismatched_elements: int | None  # outside atol/rtol, when a tolerance was asked for
    passed: bool


def region_buffers(capture: Capture, spec: dict, torch) -> dict[int, object]:
    """Region id -> uint8 CUDA tensor holding the region's pre-state, for every region a
    tensor argument points into."""
    buffers = {}
    for arg in spec["launch"]["args"]:
        if arg.get("kind") != "tensor":
            continue
        region = capture.region_of(arg["data_ptr"])
        if region is None:
            raise KerncapError(f"argument {arg.get('name')} points at {arg['data_ptr']:#x}, outside every captured region",
                               "the capture does not hold this tensor; use `kerncap replay` instead")
        if region.id not in buffers:
            host = bytearray(capture.read_bytes(region.pre, region.size))
            buffers[region.id] = torch.frombuffer(host, dtype=torch.uint8).to("cuda")
    return buffers


def tensor_view(arg: dict, capture: Capture, buffers: dict, torch):
    region = capture.region_of(arg["data_ptr"])
    dtype = getattr(torch, arg["dtype"], None)
    if dtype is None:
        raise KerncapError(f"argument {arg.get('name')} has dtype {arg['dtype']}, unknown to this PyTorch")
    size = arg["element_size"]
    shape, strides = arg["shape"], arg["strides"]
    extent = 0 if any(s == 0 for s in shape) else 1 + sum((s - 1) * st for s, st in zip(shape, strides))
    start = arg["data_ptr"] - region.base
    raw = buffers[region.id][start : start + extent * size]
    if extent == 0:
        return torch.empty(shape, dtype=dtype, device="cuda")
    return raw.view(dtype).as_strided(shape, strides)


def kernel_arguments(spec: dict, capture: Capture, buffers: dict, torch, resolve_jit=None) -> list:
    """All of the kernel's arguments in order (Triton's launcher takes the constexprs too
    and ignores them)."""
    by_name = {a.get("name"): a for a in spec["launch"]["args"] if a.get("name")}
    constexpr_by_name = {e.get("name"): e["value"] for e in spec.get("constexprs", []) if e.get("name")}
    values = []
    for name in spec["arg_names"]:
        arg = by_name.get(name)
        if arg is None:
            enc = constexpr_by_name.get(name, {"type": "none"})
            values.append(decode_value(enc, what=f"argument {name}", resolve_jit=resolve_jit))
        elif arg["kind"] == "tensor":
            values.append(tensor_view(arg, capture, buffers, torch))
        elif arg["kind"] in ("int", "bool"):
            values.append(arg["value"])
        elif arg["kind"] == "float":
            values.append(float(arg["value"]))
        elif arg["kind"] == "none":
            values.append(None)
        elif arg["kind"] == "value":
            values.append(decode_value(arg["value"], what=f"argument {name}", resolve_jit=resolve_jit))
        else:
            raise KerncapError(f"argument {name} was captured as {arg['kind']}, which reproducer.py cannot rebuild",
                               "use `kerncap replay`, which replays the captured parameter bytes")
    return values


def install_allocator(torch, triton) -> None:
    """Triton asks this for global scratch memory at launch (kernels that need it)."""
    if hasattr(triton, "set_allocator"):
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))


def compare(capture: Capture, buffers: dict, dtypes: dict[int, str], torch,
            atol: float | None = None, rtol: float | None = None) -> list[RegionCheck]:
    results = []
    tolerant = atol is not None or rtol is not None
    for rid, buf in sorted(buffers.items()):
        region = next(r for r in capture.regions if r.id == rid)
        want = torch.frombuffer(bytearray(capture.read_bytes(region.post, region.size)), dtype=torch.uint8).to("cuda")
        bad_bytes = int((buf != want).sum().item())
        bad_elems = None
        passed = bad_bytes == 0
        dtype_name = dtypes.get(rid)
        if tolerant and bad_bytes and dtype_name:
            dtype = getattr(torch, dtype_name)
            size = torch.empty((), dtype=dtype).element_size()
            n = region.size // size * size
            got_v, want_v = buf[:n].view(dtype), want[:n].view(dtype)
            if dtype.is_floating_point:
                close = torch.isclose(got_v.float(), want_v.float(), atol=atol or 0.0, rtol=rtol or 0.0, equal_nan=True)
            else:
                close = (got_v.long() - want_v.long()).abs() <= (atol or 0)
            bad_elems = int((~close).sum().item()) + int((buf[n:] != want[n:]).sum().item())
            passed = bad_elems == 0
        results.append(RegionCheck(rid, dtype_name, region.size, bad_bytes, bad_elems, passed))
    return results
