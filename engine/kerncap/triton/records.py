"""Reading the hook's `triton-<pid>.json` files and picking the record and launch that
belong to a capture.

The record is the one whose cubin sha256 equals the captured module's (exact); failing
that, one with the captured kernel's name (a warning says so). Among the record's
launches, the captured one is the launch whose tensor pointers are all parameter values
of the capture and whose grid is the captured grid.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

from kerncap.errors import KerncapError
from kerncap.reproducer.format import Capture

HOOK_FORMAT = "kerncap-triton"


@dataclass
class Selected:
    record: dict
    launch: dict
    source_file: Path  # the triton-<pid>.json it came from
    by: str  # "sha256" | "name"
    launch_match: str  # "params+grid" | "grid" | "last"
    warnings: list[str] = field(default_factory=list)


def load_hook_files(run_dir: Path) -> list[tuple[Path, dict]]:
    docs = []
    for path in sorted(Path(run_dir).glob("triton-*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise KerncapError(f"{path} is not valid JSON ({exc})", "the app's Python hook was interrupted; extract again") from None
        if doc.get("format") != HOOK_FORMAT:
            raise KerncapError(f"{path} is not a kerncap Triton record (format {doc.get('format')!r})")
        docs.append((path, doc))
    return docs


def select(capture: Capture, run_dir: Path) -> Selected:
    docs = load_hook_files(run_dir)
    if not docs:
        raise KerncapError(f"no triton-*.json in {run_dir}", "the Python hook did not run in the app (was PYTHONPATH overridden?)")
    # Several processes may launch the same cubin (ranks of a job): the capturing
    # process's own records hold the captured launch.
    pid = capture.provenance.get("pid")
    docs = [(p, d) for p, d in docs if Path(p).name == f"triton-{pid}.json"] or docs
    module = capture.kernel.get("module", {})
    sha = module.get("sha256")
    name = capture.kernel.get("name")
    by_sha = [(p, r) for p, d in docs for r in d.get("kernels", {}).values() if r.get("cubin_sha256") == sha]
    warnings: list[str] = []
    if by_sha:
        path, record = by_sha[-1]
        by = "sha256"
    else:
        by_name = [(p, r) for p, d in docs for r in d.get("kernels", {}).values() if r.get("kernel") == name]
        if not by_name:
            seen = sorted({r.get("kernel") for _, d in docs for r in d.get("kernels", {}).values()})
            raise KerncapError(
                f"the Python hook recorded no Triton kernel for the captured {name} (cubin {sha}); it saw: "
                + (", ".join(seen) or "none"),
                "the captured kernel is not a Triton kernel, or it was launched through a path the hook does not wrap",
            )
        path, record = by_name[-1]
        by = "name"
        warnings.append(
            f"no Triton record has the captured cubin's sha256 {sha}; using the record of {name} with cubin "
            f"{record.get('cubin_sha256')} (the recompiled kernel may not be the captured binary)"
        )
    launch, how = _pick_launch(capture, record)
    if how != "params+grid":
        warnings.append(
            f"the captured launch of {name} could not be identified among the hook's launches by its arguments "
            f"(matched by {how}); tensor shapes and dtypes come from that launch"
        )
    return Selected(record, launch, path, by, how, warnings)


def _pointer_values(capture: Capture) -> set[int]:
    return {struct.unpack("<Q", p.value)[0] for p in capture.params if p.size == 8 and len(p.value) == 8}


def _tensor_ptrs(launch: dict) -> list[int]:
    ptrs = []
    for arg in launch.get("args", []):
        if arg.get("kind") == "tensor":  # a tensor descriptor is no pointer parameter
            ptrs.append(arg["data_ptr"])
    return ptrs


def _pick_launch(capture: Capture, record: dict) -> tuple[dict, str]:
    launches = record.get("launches") or []
    if not launches:
        raise KerncapError(f"the Triton record of {record.get('kernel')} holds no launch")
    grid = list(capture.launch.get("grid", []))
    values = _pointer_values(capture)
    same_grid = [launch for launch in launches if launch.get("grid") == grid]
    for launch in reversed(same_grid):
        ptrs = _tensor_ptrs(launch)
        if ptrs and all(p in values for p in ptrs):
            return launch, "params+grid"
    if same_grid:
        return same_grid[-1], "grid"
    return launches[-1], "last"
