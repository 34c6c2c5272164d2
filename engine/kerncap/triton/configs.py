"""The autotune configs a captured Triton kernel could have run with, and the launch grid
a pinned one needs.

The hook records every config the app's `@triton.autotune` offered (with the grid the
app's grid callable gives for it) or that Inductor's heuristics offered its
CachingAutotuner. Pinning another one (`--config BLOCK_N=32,num_warps=4`) must launch
the number of programs that config needs: the grid of a user kernel is the recorded
one; an Inductor kernel's is cdiv(xnumel, XBLOCK) (y, z alike), checked against the
captured grid before it is trusted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kerncap.errors import KerncapError, UsageError
from kerncap.triton.values import decode_value

OPTION_KEYS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
# Inductor: the block size of grid axis i is the BLOCK of that axis' numel.
INDUCTOR_GRID_AXES = (("XBLOCK", "xnumel"), ("YBLOCK", "ynumel"), ("ZBLOCK", "znumel"))
# Inductor's reduction blocks (R0_BLOCK, R1_BLOCK, legacy RBLOCK) never set the grid.
INDUCTOR_REDUCTION_BLOCK = re.compile(r"^R\d*_?BLOCK$")


@dataclass
class Candidate:
    constexprs: dict[str, Any]
    options: dict[str, Any]
    grid: list[int] | None = None
    grid_error: str | None = None
    captured: bool = False

    @property
    def config(self) -> str:
        """As a --config string."""
        items = {**self.constexprs, **self.options}
        return ",".join(f"{k}={v}" for k, v in items.items())


def _decode_kwargs(kwargs: dict | None) -> dict[str, Any]:
    return {k: decode_value(v, what=f"autotune kwarg {k}") for k, v in (kwargs or {}).items()}


def tuned_config(spec: dict) -> dict | None:
    """The recorded chosen config: the app's autotuner's, else Inductor's."""
    return spec.get("autotune_config") or (spec.get("inductor") or {}).get("config")


def captured_constexprs(spec: dict) -> dict[str, Any]:
    return _decode_kwargs((tuned_config(spec) or {}).get("kwargs"))


def _named_ints(spec: dict) -> dict[str, int]:
    """Integer constexprs and scalar arguments of the captured launch, by name."""
    out: dict[str, int] = {}
    for e in spec.get("constexprs", []):
        value = e.get("value") or {}
        if e.get("name") and value.get("type") == "int":
            out[e["name"]] = int(value["value"])
    for a in (spec.get("launch") or {}).get("args", []):
        if a.get("name") and a.get("kind") == "int":
            out[a["name"]] = int(a["value"])
    return out


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def inductor_grid(spec: dict, constexprs: dict[str, Any]) -> list[int]:
    """The grid an Inductor kernel launches with these block sizes. Raises when the
    captured grid does not follow Inductor's cdiv(numel, BLOCK) rule (grid splitting,
    cooperative reductions): then the grid cannot be derived."""
    grid = [int(g) for g in spec["launch"]["grid"]]
    captured = captured_constexprs(spec)
    ints = {**_named_ints(spec), **{k: v for k, v in captured.items() if isinstance(v, int)}}
    new = list(grid)
    for key, value in constexprs.items():
        if value == captured.get(key) or INDUCTOR_REDUCTION_BLOCK.match(key):
            continue
        axis = next((i for i, (block, _) in enumerate(INDUCTOR_GRID_AXES) if block == key), None)
        if axis is None:
            raise KerncapError(
                f"--config {key}={value}: kerncap cannot tell how Inductor's grid depends on {key}",
                f"pin the captured {key}={captured.get(key)}, or change only XBLOCK/YBLOCK/ZBLOCK, R0_BLOCK and "
                "compile options",
            )
        numel_name = INDUCTOR_GRID_AXES[axis][1]
        numel, old = ints.get(numel_name), captured.get(key)
        if not isinstance(value, int) or value <= 0:
            raise UsageError(f"--config {key}={value}: a block size must be a positive integer")
        if numel is None or not isinstance(old, int) or axis >= len(grid) or grid[axis] != _cdiv(numel, old):
            raise KerncapError(
                f"--config {key}={value}: the captured grid {grid} is not cdiv({numel_name}={numel}, {key}={old}) "
                f"on axis {axis}, so the grid this config needs cannot be derived",
                f"pin a config with the captured {key}={old}",
            )
        new[axis] = _cdiv(numel, value)
    return new


def candidates(spec: dict) -> list[Candidate]:
    """Every recorded autotune config of the kernel, the captured one marked, each with
    the grid it launches (None when it cannot be told)."""
    tuned = spec.get("autotune_config")
    inductor = spec.get("inductor") or {}
    entries = (tuned or {}).get("configs") or (inductor.get("configs") if not tuned else None) or []
    captured = captured_constexprs(spec)
    options = spec.get("options") or {}
    out = []
    for entry in entries:
        cand = Candidate(_decode_kwargs(entry.get("kwargs")),
                         {k: entry[k] for k in OPTION_KEYS if entry.get(k) is not None})
        if tuned:
            cand.grid, cand.grid_error = entry.get("grid"), entry.get("grid_error")
        else:
            try:
                cand.grid = inductor_grid(spec, cand.constexprs)
            except KerncapError as exc:
                cand.grid_error = str(exc)
        cand.captured = cand.constexprs == captured and all(options.get(k) == v for k, v in cand.options.items())
        out.append(cand)
    return out


def pinned_grid(spec: dict, constexprs: dict[str, Any]) -> tuple[list[int], str | None]:
    """(grid in programs, a note for the log) for a recompile that pins these autotuned
    constexprs. The captured grid when none of them changes."""
    grid = [int(g) for g in spec["launch"]["grid"]]
    captured = captured_constexprs(spec)
    pinned = {**captured, **constexprs}
    if pinned == captured:
        return grid, None
    if not spec.get("autotune_config"):
        new = inductor_grid(spec, pinned)
        return new, f"Inductor's grid for {_fmt(constexprs)}: {new} (captured {grid})"
    cands = candidates(spec)
    match = next((c for c in cands if c.constexprs == pinned), None)
    if match is not None and match.grid:
        return list(match.grid), f"the app's grid for {_fmt(constexprs)}: {match.grid} (captured {grid})"
    grids = {tuple(c.grid) for c in cands if c.grid}
    if cands and grids == {tuple(grid)} and all(c.grid for c in cands):
        return grid, f"every autotune config of the app launches {grid}: grid kept"
    if not cands:  # a capture from before the hook recorded the configs
        return grid, (f"autotuned constexprs pinned to {_fmt(constexprs)}; the replay keeps the captured grid {grid}: "
                      "a config that changes the number of programs does not validate")
    why = f" ({match.grid_error})" if match is not None and match.grid_error else ""
    raise KerncapError(
        f"--config {_fmt(constexprs)}: the grid for this config is unknown{why}; the app's configs launch different grids",
        "pin one of the app's autotune configs (kerncap recompile DIR --list-configs)",
    )


def _fmt(values: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in values.items())
