"""What Nsight Compute and compute-sanitizer found for each variant of the history, read
from what `kerncap replay --ncu` / `validate --sanitize` (or the workbench) stored next
to the variant (variants/<stem>.ncu.json, variants/<stem>.<tool>.json). Pure logic."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rich.text import Text

from kerncap import api

# History columns once measured: (metric key, header)
METRIC_COLUMNS = (
    ("duration_ns", "ncu µs"),
    ("dram_read_bytes", "DRAM rd"),
    ("dram_write_bytes", "DRAM wr"),
    ("sm_pct", "SM %"),
    ("memory_pct", "mem %"),
    ("occupancy_pct", "occ %"),
    ("registers", "regs"),
)


@dataclass
class VariantInspect:
    ncu: api.NcuResult | None = None
    sanitize: dict[str, api.SanitizeResult] = field(default_factory=dict)  # tool -> its result

    @property
    def latest_sanitize(self):
        return max(self.sanitize.values(), key=lambda r: r.created, default=None)


def cubin_of(root: Path, variant) -> Path | None:
    """The variant's cubin (None: the baseline runs the captured cubin)."""
    if variant.id == 0 or not variant.cubin:
        return None
    return Path(root) / variant.cubin


def load_all(root: Path, variants: list) -> dict[int, VariantInspect]:
    """Stored tool results per variant id (variants with none are left out)."""
    out: dict[int, VariantInspect] = {}
    for v in variants:
        cubin = cubin_of(root, v)
        found = VariantInspect(ncu=api.stored_ncu(root, cubin))
        for tool in api.SANITIZE_TOOLS:
            r = api.stored_sanitize(root, cubin, tool)
            if r is not None:
                found.sanitize[tool] = r
        if found.ncu is not None or found.sanitize:
            out[v.id] = found
    return out


def metric_cell(key: str, value: float | None) -> str:
    """Compact for a table column: µs, MB, %, count."""
    if value is None:
        return "—"
    if key == "duration_ns":
        return f"{value / 1e3:,.2f}"
    if key.endswith("_bytes"):
        return f"{value / 1e6:,.1f}M"
    if key.endswith("_pct"):
        return f"{value:.1f}"
    return f"{value:,.0f}"


def sanitize_cell(info: VariantInspect | None) -> Text:
    r = info.latest_sanitize if info else None
    if r is None:
        return Text("")
    if r.clean:
        return Text(f"✓ {r.tool}", style="green")
    n = len(r.kernel_errors) + len(r.host_errors)
    return Text(f"✗ {r.tool} {n}", style="bold red")
