"""`kerncap recompile` for Triton reproducers: re-JIT the edited source/kernel.py with the
pinned contract, write the cubin to variants/, and check that it can stand in for the
captured binary (same symbol, same parameter layout)."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from kerncap.core.fsio import write_atomic
from kerncap.errors import KerncapError
from kerncap.reproducer.format import Capture
from kerncap.reproducer.variants import RecompileResult, variants_dir
from kerncap.sources.cubin import open_elf, param_layout
from kerncap.triton import configs, pinned

SCRATCH_PARAMS = ("global_scratch", "profile_scratch")


def recompile(reproducer_dir, config: str | dict | None = None) -> RecompileResult:
    """Compile source/kernel.py under the captured contract (or with `config`'s compile
    options pinned instead, e.g. "num_warps=4,num_stages=2") into variants/."""
    start = time.monotonic()
    root = Path(reproducer_dir)
    spec = pinned.load_spec(root)
    capture = Capture.open(root)
    overrides = pinned.parse_config(config, spec) if isinstance(config, str) or config is None else dict(config)
    option_overrides, constexpr_overrides = pinned.split_overrides(overrides, spec)
    grid_pin = configs.pinned_grid(spec, constexpr_overrides)  # refuses an underivable grid before compiling
    phases: dict[str, float] = {}
    compiled, _fn, _module = pinned.compile_pinned(root, spec, overrides, times=phases)
    cubin = compiled.asm.get("cubin")
    if not isinstance(cubin, (bytes, bytearray)):
        raise KerncapError(f"Triton produced no cubin for {spec['function']} (backend {compiled.metadata.target})")
    log = [f"compiled {spec['function']} with Triton {spec.get('triton_version')} for sm_{spec['target']['arch']}"]
    _check_symbol(compiled.name, capture, spec)
    log += _check_params(bytes(cubin), capture, spec)
    launch, notes = _launch_changes(compiled.metadata, spec, capture, grid_pin)
    log += notes

    variants = variants_dir(root)
    digest = hashlib.sha256(cubin).hexdigest()
    stem = f"{compiled.name}-{digest[:12]}"
    out = variants / f"{stem}.cubin"
    _write(out, bytes(cubin))
    if isinstance(compiled.asm.get("ptx"), str):
        _write(variants / f"{stem}.ptx", compiled.asm["ptx"].encode())
    _write(variants / f"{stem}.launch.json", (json.dumps(launch, indent=1) + "\n").encode())
    options = pinned.compile_options(spec, option_overrides)
    pinned_view = {k: options.get(k) for k in ("num_warps", "num_stages", "num_ctas", "maxnreg")}
    log.append(f"options: {pinned_view}" + (f" (overridden: {overrides})" if overrides else " (as captured)"))
    if constexpr_overrides:
        log.append(f"autotuned constexprs pinned to {constexpr_overrides}")
    if digest == spec.get("cubin_sha256"):
        log.append("the cubin is identical to the captured one")
    log.append(f"wrote {out}")
    command = ["triton.compile", f"source/{spec.get('source', 'kernel.py')}:{spec['function']}",
               f"target=cuda:{spec['target']['arch']}", *[f"{k}={v}" for k, v in pinned_view.items() if v is not None],
               *[f"{k}={v}" for k, v in constexpr_overrides.items()]]
    return RecompileResult(cubin=out, seconds=time.monotonic() - start, command=command, log="\n".join(log),
                           mode="triton", phases={k: round(v, 4) for k, v in phases.items()})


def _write(path: Path, data: bytes) -> None:
    write_atomic(path, data)


def _check_symbol(name: str, capture: Capture, spec: dict) -> None:
    captured = capture.kernel.get("name")
    if name != captured:
        raise KerncapError(
            f"the recompiled kernel is named {name}, the captured one {captured}",
            f"keep the function name {spec['function']} in source/kernel.py",
        )


def _param_names(spec: dict, count: int) -> list[str]:
    """Cubin parameter ordinal -> argument name: the non-constexpr arguments in order,
    then Triton's scratch pointers."""
    sig = spec["signature"]
    names = [n for n in spec["arg_names"] if sig.get(n) not in (None, "constexpr")]
    names += list(SCRATCH_PARAMS)
    return [names[i] if i < len(names) else f"#{i}" for i in range(count)]


def _check_params(cubin: bytes, capture: Capture, spec: dict) -> list[str]:
    name = capture.kernel["name"]
    new = param_layout(open_elf(cubin, "the recompiled cubin"), name)
    old = None
    if capture.cubin_path.is_file():
        old = param_layout(open_elf(capture.cubin_path.read_bytes(), str(capture.cubin_path)), name)
    if old is None:  # fall back to the manifest's parameter list
        old_slots = [(p.offset, p.size) for p in sorted(capture.params, key=lambda p: p.index)]
    else:
        old_slots = [(s.offset, s.size) for s in old]
    if new is None:
        raise KerncapError(f"the recompiled cubin has no .nv.info.{name} section (no parameter layout)")
    new_slots = [(s.offset, s.size) for s in new]
    if new_slots == old_slots:
        return [f"parameter layout matches the capture ({len(new_slots)} parameters, "
                f"{sum(s for _, s in new_slots)} bytes)"]
    names = _param_names(spec, max(len(new_slots), len(old_slots)))
    diffs = []
    for i in range(max(len(new_slots), len(old_slots))):
        a = old_slots[i] if i < len(old_slots) else None
        b = new_slots[i] if i < len(new_slots) else None
        if a != b:
            fmt = lambda s: "absent" if s is None else f"offset {s[0]} size {s[1]}"  # noqa: E731
            diffs.append(f"{names[i]}: captured {fmt(a)}, now {fmt(b)}")
    raise KerncapError(
        f"the recompiled {name} takes different parameters than the captured one: " + "; ".join(diffs),
        "an argument's type or specialisation changed (e.g. a scalar that is now a pointer, or a global "
        "scratch buffer the kernel newly needs); keep the captured argument types",
    )


def _launch_changes(metadata, spec: dict, capture: Capture,
                    pinned_grid: tuple[list[int], str | None]) -> tuple[dict, list[str]]:
    """The grid, block size and dynamic shared memory the variant must be launched with:
    the pinned autotune config sets the grid, Triton derives the block from num_warps and
    the shared memory from the kernel's use."""
    warp = int(getattr(metadata, "warp_size", 32) or 32)
    block = [int(metadata.num_warps) * warp, 1, 1]
    smem = int(metadata.shared)
    captured_grid = [int(g) for g in capture.launch.get("grid", [])]
    captured_block = list(capture.launch.get("block", []))
    captured_smem = int(capture.launch.get("shared_mem_bytes", 0))
    grid, grid_note = pinned_grid
    launch = {"kernel": metadata.name, "grid": grid, "block": block, "shared_mem_bytes": smem, "changed": []}
    notes = [grid_note] if grid_note else []
    if grid != captured_grid:
        launch["changed"].append("grid")
    if block != captured_block:
        launch["changed"].append("block")
        notes.append(f"block changes {captured_block} -> {block} (num_warps {metadata.num_warps}): "
                     "replay must launch the variant with the block in its .launch.json")
    if smem != captured_smem:
        launch["changed"].append("shared_mem_bytes")
        notes.append(f"dynamic shared memory changes {captured_smem} -> {smem} bytes: "
                     "replay must launch the variant with the value in its .launch.json")
    scratch = int(getattr(metadata, "global_scratch_size", 0) or 0)
    captured_scratch = int((spec.get("options") or {}).get("global_scratch_size", 0) or 0)
    if scratch > captured_scratch:
        raise KerncapError(
            f"the recompiled {metadata.name} needs {scratch} bytes of global scratch per program, "
            f"the captured one {captured_scratch}",
            "the captured scratch buffer is too small for this variant; choose other options",
        )
    return launch, notes
