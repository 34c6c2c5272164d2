"""Triton and torch.compile (Inductor) kernels: what the Python hook recorded in the app
becomes an editable, recompilable reproducer.

  attach_triton(reproducer_dir, capture, run_dir)  called by extract: writes
      source/kernel.py, source/triton.json and reproducer.py
  recompile(reproducer_dir, config=None)           re-JIT source/kernel.py into variants/
  region_dtypes(reproducer_dir, capture)           region id -> dtype, for validation
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kerncap.errors import KerncapError
from kerncap.reproducer.format import Capture
from kerncap.triton import records
from kerncap.triton.kernel_source import function_only_module, sanitize_module
from kerncap.triton.pinned import SPEC_FORMAT, SPEC_NAME, load_spec
from kerncap.triton.recompile import RecompileResult, recompile
from kerncap.triton.reproducer_script import render

__all__ = ["attach_triton", "recompile", "region_dtypes", "RecompileResult"]

CONFIG_KEYS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def attach_triton(reproducer_dir, capture: Capture, run_dir) -> dict | None:
    """Write the Triton sources of the captured kernel into the reproducer and return
    the `sources` entry of reproducer.json."""
    root, run_dir = Path(reproducer_dir), Path(run_dir)
    chosen = records.select(capture, run_dir)
    record, launch = chosen.record, chosen.launch
    fn = record.get("function") or {}
    fn_name = fn.get("name") or record["kernel"]
    source_dir = root / "source"
    source_dir.mkdir(exist_ok=True)

    kernel_text, how = _kernel_module_text(run_dir, fn)
    _write(source_dir / "kernel.py", kernel_text)
    spec = _spec(record, launch, capture, fn_name, how, chosen)
    _write(source_dir / SPEC_NAME, json.dumps(spec, indent=1) + "\n")
    _write(root / "reproducer.py", render(record["kernel"]))
    os.chmod(root / "reproducer.py", 0o755)

    config = {k: (record.get("options") or {}).get(k) for k in CONFIG_KEYS}
    if record.get("autotune_config") or launch.get("autotune_config"):
        tuned = launch.get("autotune_config") or record.get("autotune_config")
        config["autotune_kwargs"] = tuned.get("kwargs")
    result = {
        "kind": "triton",
        "translation_unit": "source/kernel.py",
        "files": ["source/kernel.py", f"source/{SPEC_NAME}", "reproducer.py"],
        "method": "triton-hook",
        "confidence": "exact" if chosen.by == "sha256" and how == "module snapshot" else "likely",
        "config": config,
        "kernel_source": how,
        "original_file": fn.get("file"),
    }
    inductor = launch.get("inductor") or record.get("inductor")
    if inductor and inductor.get("generated_source"):
        result["generated_source"] = inductor["generated_source"]
    if chosen.warnings:
        result["warnings"] = chosen.warnings
    return result


def _kernel_module_text(run_dir: Path, fn: dict) -> tuple[str, str]:
    snapshot = fn.get("module_snapshot")
    if snapshot and (run_dir / snapshot).is_file():
        text, _blanked = sanitize_module((run_dir / snapshot).read_text(), fn.get("file") or "kernel.py")
        return text, "module snapshot"
    if fn.get("source"):
        return function_only_module(fn["source"], fn.get("first_line")), "function source"
    raise KerncapError(
        f"the Python hook recorded no source for {fn.get('name')} (file {fn.get('file')})",
        "the kernel's module file was not readable in the app; keep it on disk while capturing",
    )


def _spec(record: dict, launch: dict, capture: Capture, fn_name: str, how: str, chosen) -> dict:
    fn = record.get("function") or {}
    options = record.get("options") or {}
    target = options.get("target") or {}
    if not target.get("arch"):
        cc = capture.provenance.get("gpu", {}).get("cc") or [9, 0]
        target = {"backend": "cuda", "arch": cc[0] * 10 + cc[1], "warp_size": 32}
    block = list(capture.launch.get("block", []))
    return {
        "format": SPEC_FORMAT,
        "format_version": 1,
        "kernel": record["kernel"],
        "function": fn_name,
        "source": "kernel.py",
        "source_from": how,
        "cubin_sha256": record.get("cubin_sha256"),
        "triton_version": record.get("triton_version"),
        "launcher": record.get("launcher"),
        "arg_names": fn.get("arg_names", []),
        "declared_constexprs": fn.get("declared_constexprs", []),
        "signature": record.get("signature", {}),
        "constexprs": record.get("constexprs", []),
        "attrs": record.get("attrs", []),
        "target": {"backend": target.get("backend", "cuda"), "arch": target["arch"], "warp_size": target.get("warp_size", 32)},
        "options": options,
        "autotune_config": launch.get("autotune_config") or record.get("autotune_config"),
        "inductor": launch.get("inductor") or record.get("inductor"),
        "launch": {
            "grid": list(capture.launch.get("grid", launch.get("grid", []))),
            "block": block,
            "shared_mem_bytes": capture.launch.get("shared_mem_bytes"),
            "args": launch.get("args", []),
            "hook_dispatch": launch.get("hook_dispatch"),
        },
        "original": {
            "file": fn.get("file"),
            "dir": os.path.dirname(fn["file"]) if fn.get("file") else None,
            "module": fn.get("module"),
            "first_line": fn.get("first_line"),
            "sys_path": fn.get("sys_path", []),
        },
        "selection": {"record_by": chosen.by, "launch_by": chosen.launch_match, "hook_file": chosen.source_file.name,
                      "warnings": chosen.warnings},
    }


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def region_dtypes(reproducer_dir, capture: Capture) -> dict[int, str]:
    """Region id -> dtype name ('float16', 'bfloat16', 'float32', ...) of the tensor
    arguments that point into it, for tolerance validation. A region that tensors of
    several dtypes share (PyTorch's caching allocator packs them into one segment) gets
    the dtype of the tensors that cover every byte the kernel changed in it; when no one
    dtype does, it is left out (validated byte-exact)."""
    try:
        spec = load_spec(Path(reproducer_dir))
    except KerncapError:
        return {}
    seen: dict[int, dict[str, list[tuple[int, int]]]] = {}
    for arg in spec.get("launch", {}).get("args", []):
        if arg.get("kind") != "tensor":
            continue
        region = capture.region_of(arg["data_ptr"])
        if region is not None:
            seen.setdefault(region.id, {}).setdefault(arg["dtype"], []).append(_tensor_span(arg))
    out = {}
    by_id = {r.id: r for r in capture.regions}
    for rid, spans in seen.items():
        if len(spans) == 1:
            out[rid] = next(iter(spans))
        else:
            dtype = _written_dtype(capture, by_id[rid], spans)
            if dtype is not None:
                out[rid] = dtype
    return out


def _tensor_span(arg: dict) -> tuple[int, int]:
    """[start, end) bytes of a strided tensor's storage extent."""
    shape, strides = arg.get("shape") or [], arg.get("strides") or []
    if any(int(n) == 0 for n in shape):
        return int(arg["data_ptr"]), int(arg["data_ptr"])
    last = sum((int(n) - 1) * int(st) for n, st in zip(shape, strides))
    return int(arg["data_ptr"]), int(arg["data_ptr"]) + (last + 1) * int(arg.get("element_size", 1))


def _written_dtype(capture: Capture, region, spans: dict[str, list[tuple[int, int]]]) -> str | None:
    """The one dtype whose tensors cover every byte that differs between the region's
    pre- and post-state (only changed chunks are read)."""
    import numpy as np

    candidates, any_change = set(spans), False
    for i, (a, b) in enumerate(zip(region.pre, region.post)):
        if a == b or not candidates:
            continue
        length = capture.chunk_length(region.size, i)
        diff = np.frombuffer(capture.read_chunk(a, length), dtype=np.uint8) != np.frombuffer(
            capture.read_chunk(b, length), dtype=np.uint8)
        if not diff.any():
            continue
        any_change = True
        lo = region.base + i * capture.chunk_size
        for dtype in list(candidates):
            covered = np.zeros(length, dtype=bool)
            for start, end in spans[dtype]:
                covered[max(start - lo, 0):max(min(end - lo, length), 0)] = True
            if (diff & ~covered).any():
                candidates.discard(dtype)
    return next(iter(candidates)) if any_change and len(candidates) == 1 else None
