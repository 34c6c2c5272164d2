"""Where and how an output differs: the mismatch map of one item (a region or a module
global), computed on the GPU by the replay core (native/replay/mismatch_kernels.cu) or
here in numpy (`compute`, the reference the GPU suite checks the kernels against), and
the compact summary of where the mismatches lie ("rows 4032–4095 only", "every 64th
column", "NaN in got where expected is finite").

Per element (whole elements of the item's dtype; raw bytes when it is unknown): a
mismatch is a differing bit pattern (exact mode) or the tolerance predicate of
`kerncap validate` (kerncap.core.dtypes.mismatch_mask). Each mismatch is classed as
NaN (either side NaN), inf (either side infinite) or finite with |got − expected|;
the error histogram bins finite errors by floor(log2), the ULP histogram by the bit
length of the distance between the two bit patterns in IEEE order. Value histograms
(pre, expected, got: every element) bin by sign and floor(log2 |v|). The grid holds,
per cell of the item's 2-D view (kerncap.replay.tensor_view.View), the mismatch count
and the worst element (a 32-bit severity key over the low 32 bits of its index); the
row and column profiles count mismatches per row and column (binned beyond 65,536).
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from kerncap.core import dtypes as dt
from kerncap.core.units import human_bytes
from kerncap.replay.tensor_view import View

ERR_BINS = 129        # 0: equal values, different bits; 1 + (floor(log2 |d|) + 64), clamped to [-64, 63]
ULP_BINS = 65         # bit length of the ULP distance (0 … 64)
VALUE_BINS = 260      # NaN, +inf, -inf, zero, 128 positive and 128 negative log2 bins
LOG_MIN, LOG_MAX = -64, 63
MAX_GRID = 1024       # cells per side
MAX_PROFILE = 65536   # row and column profile bins
FIRST_K = 16
KEY_NAN, KEY_INF = 0xFFFFFFFF, 0xFFFFFFFE
BLOCK_ELEMENTS = 1 << 22  # elements per numpy block (streaming)
SIDES = ("pre", "expected", "actual")


@dataclass
class FirstMismatch:
    index: int                      # element index in the item
    coords: tuple[int, ...] | None  # tensor coordinates (None: outside the view)
    expected: Any
    actual: Any
    pre: Any

    def to_dict(self) -> dict:
        return {"index": self.index, "coords": list(self.coords) if self.coords is not None else None,
                "expected": _num(self.expected), "actual": _num(self.actual), "pre": _num(self.pre)}

    @classmethod
    def from_dict(cls, d: dict) -> "FirstMismatch":
        return cls(int(d["index"]), tuple(d["coords"]) if d.get("coords") is not None else None,
                   _unnum(d["expected"]), _unnum(d["actual"]), _unnum(d["pre"]))


@dataclass
class MismatchMap:
    """One item's mismatches against its expected state; `grid`/`profiles` cover `view`."""
    name: str                     # "region 3"
    actual_label: str             # what produced "got": "variants/4.cubin", "synthetic: …"
    expected_label: str           # "captured post-state", "captured kernel on perturbation 2", …
    dtype: str | None             # None: raw bytes
    mode: str                     # "exact" | "tolerance"
    atol: float
    rtol: float
    size: int                     # bytes of the item
    view: View
    grid_rows: int
    grid_cols: int
    mismatched_elements: int = 0
    mismatched_bytes: int = 0
    tail_bytes: int = 0           # differing bytes after the last whole element
    nan_errors: int = 0           # mismatches with a NaN on either side
    inf_errors: int = 0
    outside_view: int = 0         # mismatches outside the view
    max_abs: float = 0.0
    max_rel: float = 0.0
    stale: int = 0                # mismatches where got is the pre-state, bit for bit (never written)
    ratio_min: float = math.inf   # got / expected over finite mismatches with expected != 0
    ratio_max: float = -math.inf
    err_hist: np.ndarray = field(default_factory=lambda: np.zeros(ERR_BINS, np.uint64))
    ulp_hist: np.ndarray = field(default_factory=lambda: np.zeros(ULP_BINS, np.uint64))
    value_hist: dict[str, np.ndarray] = field(default_factory=dict)
    cell_count: np.ndarray | None = None   # [grid_rows, grid_cols] uint64
    cell_worst: np.ndarray | None = None   # [grid_rows, grid_cols] uint64: key << 32 | low index bits
    cell_values: dict[int, tuple] = field(default_factory=dict)  # flat cell -> (index, pre, expected, actual)
    row_profile: np.ndarray | None = None
    col_profile: np.ndarray | None = None
    first: list[FirstMismatch] = field(default_factory=list)
    computed: str = "cpu"         # "gpu" | "cpu" | "cpu, sampled …"
    covered_rows: list[tuple[int, int]] | None = None  # view rows read when sampled (None: all)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.cell_count is None:
            self.cell_count = np.zeros((self.grid_rows, self.grid_cols), np.uint64)
        if self.cell_worst is None:
            self.cell_worst = np.zeros((self.grid_rows, self.grid_cols), np.uint64)
        if self.row_profile is None:
            self.row_profile = np.zeros(min(self.view.rows, MAX_PROFILE), np.uint64)
        if self.col_profile is None:
            self.col_profile = np.zeros(min(self.view.cols, MAX_PROFILE), np.uint64)
        for s in SIDES:
            self.value_hist.setdefault(s, np.zeros(VALUE_BINS, np.uint64))

    @property
    def elements(self) -> int:
        return self.size // self.itemsize

    @property
    def itemsize(self) -> int:
        return dt.itemsize(self.dtype) if self.dtype else 1

    @property
    def passed(self) -> bool:
        return self.mismatched_elements == 0 and self.tail_bytes == 0

    def nonfinite(self, side: str) -> tuple[int, int]:
        """(NaN count, ±inf count) over every element of one side."""
        h = self.value_hist[side]
        return int(h[0]), int(h[1] + h[2])

    def cell_of(self, index: int) -> tuple[int, int] | None:
        rc = self.view.coords(index)
        if rc is None:
            return None
        return rc[0] * self.grid_rows // self.view.rows, rc[1] * self.grid_cols // self.view.cols

    def cell_rows(self, gy: int) -> tuple[int, int]:
        """View rows [r0, r1) of grid row gy."""
        return _inverse(gy, self.grid_rows, self.view.rows)

    def cell_cols(self, gx: int) -> tuple[int, int]:
        return _inverse(gx, self.grid_cols, self.view.cols)

    def worst_index(self, gy: int, gx: int) -> int | None:
        """The element index of a cell's worst mismatch (from the low 32 bits of its key)."""
        if not int(self.cell_count[gy, gx]):
            return None
        low = int(self.cell_worst[gy, gx]) & 0xFFFFFFFF
        r0, r1 = self.cell_rows(gy)
        c0, c1 = self.cell_cols(gx)
        lo = self.view.start + r0 * self.view.row_stride + c0
        hi = self.view.start + (r1 - 1) * self.view.row_stride + c1
        if hi - lo > 1 << 32:
            return None  # a cell of more than 2^32 elements: the index is ambiguous
        cand = lo + ((low - lo) & 0xFFFFFFFF)
        return cand if cand < hi else None

    def worst_error(self, gy: int, gx: int) -> float | str | None:
        """A cell's worst error: abs error, "nan" or "inf" (None without mismatches)."""
        if not int(self.cell_count[gy, gx]):
            return None
        key = int(self.cell_worst[gy, gx]) >> 32
        if key == KEY_NAN:
            return "nan"
        if key == KEY_INF:
            return "inf"
        return float(np.array([key], np.uint32).view(np.float32)[0])

    def summary(self) -> str:
        return summarize(self)

    # -- JSON ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "actual": self.actual_label, "expected": self.expected_label, "dtype": self.dtype,
            "mode": self.mode, "atol": self.atol, "rtol": self.rtol, "size": self.size, "view": self.view.to_dict(),
            "grid_rows": self.grid_rows, "grid_cols": self.grid_cols,
            "mismatched_elements": self.mismatched_elements, "mismatched_bytes": self.mismatched_bytes,
            "tail_bytes": self.tail_bytes, "nan_errors": self.nan_errors, "inf_errors": self.inf_errors,
            "outside_view": self.outside_view, "max_abs": _num(self.max_abs), "max_rel": _num(self.max_rel),
            "stale": self.stale, "ratio_min": _num(self.ratio_min), "ratio_max": _num(self.ratio_max),
            "err_hist": _ints(self.err_hist), "ulp_hist": _ints(self.ulp_hist),
            "value_hist": {s: _ints(h) for s, h in self.value_hist.items()},
            "nan": {s: self.nonfinite(s)[0] for s in SIDES}, "inf": {s: self.nonfinite(s)[1] for s in SIDES},
            "cell_count": pack(self.cell_count), "cell_worst": pack(self.cell_worst),
            "cell_values": {str(k): [v[0], _num(v[1]), _num(v[2]), _num(v[3])] for k, v in self.cell_values.items()},
            "row_profile": pack(self.row_profile), "col_profile": pack(self.col_profile),
            "first": [f.to_dict() for f in self.first], "computed": self.computed,
            "covered_rows": [list(r) for r in self.covered_rows] if self.covered_rows is not None else None,
            "notes": list(self.notes), "summary": self.summary(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MismatchMap":
        gr, gc = int(d["grid_rows"]), int(d["grid_cols"])
        return cls(
            name=d["name"], actual_label=d["actual"], expected_label=d["expected"], dtype=d.get("dtype"),
            mode=d["mode"], atol=float(d["atol"]), rtol=float(d["rtol"]), size=int(d["size"]),
            view=View.from_dict(d["view"]), grid_rows=gr, grid_cols=gc,
            mismatched_elements=int(d["mismatched_elements"]), mismatched_bytes=int(d["mismatched_bytes"]),
            tail_bytes=int(d["tail_bytes"]), nan_errors=int(d["nan_errors"]), inf_errors=int(d["inf_errors"]),
            outside_view=int(d["outside_view"]), max_abs=float(_unnum(d["max_abs"])),
            max_rel=float(_unnum(d["max_rel"])), stale=int(d.get("stale", 0)),
            ratio_min=float(_unnum(d.get("ratio_min", "inf"))), ratio_max=float(_unnum(d.get("ratio_max", "-inf"))),
            err_hist=np.array(d["err_hist"], np.uint64), ulp_hist=np.array(d["ulp_hist"], np.uint64),
            value_hist={s: np.array(h, np.uint64) for s, h in d["value_hist"].items()},
            cell_count=unpack(d["cell_count"]).reshape(gr, gc), cell_worst=unpack(d["cell_worst"]).reshape(gr, gc),
            cell_values={int(k): (int(v[0]), _unnum(v[1]), _unnum(v[2]), _unnum(v[3]))
                         for k, v in (d.get("cell_values") or {}).items()},
            row_profile=unpack(d["row_profile"]), col_profile=unpack(d["col_profile"]),
            first=[FirstMismatch.from_dict(f) for f in d.get("first", [])], computed=d.get("computed", "?"),
            covered_rows=[tuple(r) for r in d["covered_rows"]] if d.get("covered_rows") is not None else None,
            notes=list(d.get("notes", [])),
        )


def pack(a: np.ndarray) -> str:
    """A uint64 array as base64 of its little-endian bytes (the replay protocol is JSON)."""
    return base64.b64encode(np.ascontiguousarray(a, dtype="<u8").tobytes()).decode()


def unpack(s: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype="<u8").astype(np.uint64)


def _ints(a: np.ndarray) -> list[int]:
    return [int(x) for x in a]


def _num(v: Any) -> Any:
    if isinstance(v, (np.floating, float)):
        v = float(v)
        return repr(v) if not math.isfinite(v) else v
    if isinstance(v, np.integer):
        return int(v)
    return v


def _unnum(v: Any) -> Any:
    return float(v) if v in ("inf", "-inf", "nan") else v


def _inverse(g: int, cells: int, n: int) -> tuple[int, int]:
    """[first, last + 1) of the indices i in [0, n) with i * cells // n == g."""
    lo = -(-g * n // cells)
    hi = -(-(g + 1) * n // cells)
    return lo, max(hi, lo + 1)


# -- the numpy reference -----------------------------------------------------------------------

Reader = Callable[[int, int], bytes]  # (byte offset, length) -> bytes of one state of the item


def grid_shape(view: View, grid_rows: int, grid_cols: int) -> tuple[int, int]:
    return max(1, min(grid_rows, view.rows, MAX_GRID)), max(1, min(grid_cols, view.cols, MAX_GRID))


def _value_bins(v: np.ndarray) -> np.ndarray:
    out = np.full(v.shape, 3, np.int64)  # zero
    with np.errstate(invalid="ignore"):
        out[np.isnan(v)] = 0
        out[v == np.inf] = 1
        out[v == -np.inf] = 2
        fin = np.isfinite(v) & (v != 0)
    _, e = np.frexp(v[fin])
    k = np.clip(e.astype(np.int64) - 1, LOG_MIN, LOG_MAX) - LOG_MIN
    out[fin] = np.where(v[fin] > 0, 4 + k, 4 + 128 + k)
    return out


def _ordered(dtype: str | None, raw: np.ndarray) -> np.ndarray:
    """Bit patterns in IEEE order as uint64 (integers: value + 2^(w-1); raw bytes: value)."""
    if dtype is None or dtype == "uint8":
        return raw.astype(np.uint64)
    width = dt.itemsize(dtype) * 8
    bits = raw.view({8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[width]).astype(np.uint64)
    half = np.uint64(1 << (width - 1))
    if not dt.is_float(dtype):
        return bits ^ half  # two's complement + 2^(w-1), in the unsigned domain
    mag = bits & (half - np.uint64(1))
    return np.where(bits & half, half - mag, half + mag)


def _bit_length(u: np.ndarray) -> np.ndarray:
    bl = np.zeros(u.shape, np.int64)
    x = u.copy()
    for s in (32, 16, 8, 4, 2, 1):
        m = x >= np.uint64(1 << s)
        bl[m] += s
        x[m] >>= np.uint64(s)
    return bl + (x > 0)


def compute(name: str, size: int, view: View, dtype: str | None, read_actual: Reader, read_expected: Reader,
            read_pre: Reader, *, atol: float = 0.0, rtol: float = 0.0, tolerance: bool = False,
            grid_rows: int = 256, grid_cols: int = 256, actual_label: str = "", expected_label: str = "",
            max_bytes: int | None = None) -> MismatchMap:
    """The mismatch map in numpy, streaming BLOCK_ELEMENTS at a time. `max_bytes`: read
    at most about this much of the item (evenly spaced blocks), saying so."""
    itemsize = dt.itemsize(dtype) if dtype else 1
    npdt = dt.numpy_dtype(dtype) if dtype else np.dtype(np.uint8)
    gr, gc = grid_shape(view, grid_rows, grid_cols)
    m = MismatchMap(name, actual_label, expected_label, dtype, "tolerance" if tolerance else "exact", atol, rtol,
                    size, view, gr, gc)
    n = size // itemsize
    blocks = _blocks(m, n, itemsize, max_bytes)
    firsts: list[int] = []
    for i0, i1 in blocks:
        off, length = i0 * itemsize, (i1 - i0) * itemsize
        ra = np.frombuffer(read_actual(off, length), npdt)
        re_ = np.frombuffer(read_expected(off, length), npdt)
        rp = np.frombuffer(read_pre(off, length), npdt)
        m.mismatched_bytes += int(np.count_nonzero(ra.view(np.uint8) != re_.view(np.uint8)))
        fa, fe = (dt.as_float64(dtype, ra), dt.as_float64(dtype, re_)) if dtype else (ra.astype(float), re_.astype(float))
        fp = dt.as_float64(dtype, rp) if dtype else rp.astype(float)
        for side, vals in (("pre", fp), ("expected", fe), ("actual", fa)):
            m.value_hist[side] += np.bincount(_value_bins(vals), minlength=VALUE_BINS).astype(np.uint64)
        if tolerance and dtype:
            bad = dt.mismatch_mask(dtype, fa, fe, atol, rtol)
        else:
            bad = ((ra.view(np.uint8) != re_.view(np.uint8)).reshape(len(ra), itemsize).any(axis=1)
                   if itemsize > 1 else ra != re_)
        idx = np.nonzero(bad)[0]
        if m.covered_rows is not None:
            r_lo = max(0, (i0 - view.start) // view.row_stride)
            r_hi = min(view.rows, -(-(i1 - view.start) // view.row_stride))
            if r_hi > r_lo:
                m.covered_rows.append((r_lo, r_hi))
        if not len(idx):
            continue
        m.mismatched_elements += len(idx)
        a, e = fa[idx], fe[idx]
        nan = np.isnan(a) | np.isnan(e)
        inf = ~nan & (np.isinf(a) | np.isinf(e))
        fin = ~nan & ~inf
        m.nan_errors += int(nan.sum())
        m.stale += int((ra[idx].view(np.uint8).reshape(len(idx), itemsize)
                        == rp[idx].view(np.uint8).reshape(len(idx), itemsize)).all(axis=1).sum())
        m.inf_errors += int(inf.sum())
        d = np.abs(a - e)
        if fin.any():
            _finite_errors(m, dtype, a[fin], e[fin], d[fin], ra[idx][fin], re_[idx][fin])
        gidx = idx.astype(np.int64) + i0
        if len(firsts) < FIRST_K:
            firsts += [int(x) for x in gidx[: FIRST_K - len(firsts)]]
        _place(m, view, gidx, gr, gc, nan, inf, fin, d)
    tail = size - n * itemsize
    if tail:
        ta, te = read_actual(n * itemsize, tail), read_expected(n * itemsize, tail)
        m.tail_bytes = sum(1 for x, y in zip(ta, te) if x != y)
        m.mismatched_bytes += m.tail_bytes
    reader = {"actual": read_actual, "expected": read_expected, "pre": read_pre}
    m.first = [first_mismatch(view, dtype, i, reader) for i in firsts]
    fill_cell_values(m, reader)
    return m


def _blocks(m: MismatchMap, n: int, itemsize: int, max_bytes: int | None) -> list[tuple[int, int]]:
    """The element ranges to read: every block, or (past `max_bytes`) evenly spaced ones,
    which the map then says it sampled."""
    blocks = [(i, min(i + BLOCK_ELEMENTS, n)) for i in range(0, n, BLOCK_ELEMENTS)]
    if max_bytes is not None and n * itemsize > max_bytes and len(blocks) > 1:
        keep = max(1, max_bytes // (BLOCK_ELEMENTS * itemsize))
        picked = sorted({round(k * (len(blocks) - 1) / max(keep - 1, 1)) for k in range(keep)})
        m.computed = (f"cpu, sampled {len(picked)} of {len(blocks)} blocks "
                      f"({human_bytes(len(picked) * BLOCK_ELEMENTS * itemsize)} of {human_bytes(m.size)})")
        m.covered_rows = []
        blocks = [blocks[k] for k in picked]
    return blocks


def _finite_errors(m: MismatchMap, dtype: str | None, a: np.ndarray, e: np.ndarray, df: np.ndarray,
                   raw_a: np.ndarray, raw_e: np.ndarray) -> None:
    """The finite mismatches of one block into the map: largest errors, ratio range, the
    error and ulp histograms."""
    m.max_abs = max(m.max_abs, float(df.max()))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(np.abs(e) > 0, df / np.abs(e), np.where(df > 0, np.inf, 0.0))
    m.max_rel = max(m.max_rel, float(rel.max()))
    if (e != 0).any():
        ratio = a[e != 0] / e[e != 0]
        m.ratio_min, m.ratio_max = min(m.ratio_min, float(ratio.min())), max(m.ratio_max, float(ratio.max()))
    bins = np.zeros(len(df), np.int64)
    nz = df > 0
    _, ex = np.frexp(df[nz])
    bins[nz] = np.clip(ex.astype(np.int64) - 1, LOG_MIN, LOG_MAX) - LOG_MIN + 1
    m.err_hist += np.bincount(bins, minlength=ERR_BINS).astype(np.uint64)
    oa, oe = _ordered(dtype, raw_a), _ordered(dtype, raw_e)
    u = np.where(oa > oe, oa - oe, oe - oa)
    m.ulp_hist += np.bincount(_bit_length(u), minlength=ULP_BINS).astype(np.uint64)


def _place(m: MismatchMap, view: View, gidx: np.ndarray, gr: int, gc: int, nan: np.ndarray, inf: np.ndarray,
           fin: np.ndarray, d: np.ndarray) -> None:
    """Mismatching elements (their indices `gidx`) into the grid: counts, the worst of each
    cell, the row and column profiles; those outside the view counted apart."""
    pr, pc = len(m.row_profile), len(m.col_profile)
    k = gidx - view.start
    r, c = np.divmod(k, view.row_stride)
    inside = (k >= 0) & (r < view.rows) & (c < view.cols)
    m.outside_view += int((~inside).sum())
    r, c = r[inside], c[inside]
    gy, gx = r * gr // view.rows, c * gc // view.cols
    cells = gy * gc + gx
    np.add.at(m.cell_count.reshape(-1), cells, np.uint64(1))
    keys = np.where(nan, KEY_NAN, np.where(inf, KEY_INF, 0)).astype(np.uint64)
    fkeys = np.minimum(d.astype(np.float32), np.float32(np.inf)).view(np.uint32).astype(np.uint64)
    keys = np.where(fin, fkeys, keys)[inside]
    packed = (keys << np.uint64(32)) | (gidx[inside].astype(np.uint64) & np.uint64(0xFFFFFFFF))
    np.maximum.at(m.cell_worst.reshape(-1), cells, packed)
    np.add.at(m.row_profile, r * pr // view.rows, np.uint64(1))
    np.add.at(m.col_profile, c * pc // view.cols, np.uint64(1))


def element(dtype: str | None, raw: bytes) -> Any:
    """One element's bytes as a Python number (bfloat16 decoded; raw bytes: an int)."""
    if not dtype:
        return raw[0]
    return dt.decode(dtype, raw)[0]


def first_mismatch(view: View, dtype: str | None, index: int, reader: dict[str, Reader]) -> FirstMismatch:
    size = dt.itemsize(dtype) if dtype else 1
    vals = {s: element(dtype, reader[s](index * size, size)) for s in SIDES}
    return FirstMismatch(index, view.tensor_coords(index), vals["expected"], vals["actual"], vals["pre"])


def fill_cell_values(m: MismatchMap, reader: dict[str, Reader], limit: int = 1 << 16) -> None:
    """The worst element's values of every cell with mismatches (the cursor's details)."""
    size = m.itemsize
    for flat in np.flatnonzero(m.cell_count)[:limit]:
        gy, gx = divmod(int(flat), m.grid_cols)
        i = m.worst_index(gy, gx)
        if i is not None:
            m.cell_values[int(flat)] = (i, *(element(m.dtype, reader[s](i * size, size)) for s in SIDES))


# -- where the mismatches lie -----------------------------------------------------------------------


def _runs(nonzero: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) runs of consecutive indices."""
    if not len(nonzero):
        return []
    cut = np.flatnonzero(np.diff(nonzero) != 1)
    starts = np.r_[nonzero[0], nonzero[cut + 1]]
    ends = np.r_[nonzero[cut], nonzero[-1]] + 1
    return list(zip(starts.tolist(), ends.tolist()))


def _period(nonzero: np.ndarray, n: int) -> int | None:
    """P when the indices are exactly first, first+P, first+2P, … (at least 3, P ≥ 2)."""
    if len(nonzero) < 3:
        return None
    steps = np.diff(nonzero)
    p = int(steps[0])
    if p < 2 or not (steps == p).all():
        return None
    return p if nonzero[0] < p and nonzero[-1] + p >= n else None


def _span_text(runs: list[tuple[int, int]], unit: str, exact: bool, scale: float = 1.0) -> str:
    def one(a: int, b: int) -> str:
        lo, hi = int(a * scale), int(math.ceil(b * scale)) - 1
        return f"{unit} {lo:,}" if lo == hi else f"{unit}s {lo:,}–{hi:,}"
    text = ", ".join(one(a, b) for a, b in runs[:3]) + (f" and {len(runs) - 3} more ranges" if len(runs) > 3 else "")
    return text if exact else text + " (binned)"


def _axis(profile: np.ndarray, n: int, unit: str) -> tuple[str, bool]:
    """What one profile says: (text, covers the whole axis)."""
    nz = np.flatnonzero(profile)
    exact = len(profile) == n
    scale = n / len(profile)
    if len(nz) == len(profile):
        return f"all {n:,} {unit}s", True
    p = _period(nz, len(profile)) if exact else None
    if p is not None:
        first = ", ".join(f"{int(x):,}" for x in nz[:3])
        return f"every {_ordinal(p)} {unit} ({unit}s {first}, …, {int(nz[-1]):,})", False
    runs = _runs(nz)
    if len(runs) == 1:
        a, b = runs[0]
        size = int(round((b - a) * scale))
        return _span_text(runs, unit, exact, scale) + (" only" + (f" (one block of {size:,} {unit}s)" if size > 1 else "")), False
    return _span_text(runs, unit, exact, scale), False


def _ordinal(p: int) -> str:
    suffix = "th" if 10 <= p % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(p % 10, "th")
    return f"{p}{suffix}"


def where(m: MismatchMap) -> str:
    """Where in the view the mismatches lie, in rows and columns (elements for a folded
    1-D view)."""
    v = m.view
    inside = m.mismatched_elements - m.outside_view
    if inside <= 0:
        return ""
    if v.wrapped:
        rows = np.flatnonzero(m.row_profile)
        cols = np.flatnonzero(m.col_profile)
        exact = len(m.row_profile) == v.rows and len(m.col_profile) == v.cols
        if exact and len(cols) < len(m.col_profile) and (p := _period(cols, v.cols)) and v.cols % p == 0:
            return f"every {_ordinal(p)} element (elements {int(cols[0]) + v.start:,}, {int(cols[0]) + p + v.start:,}, …)"
        runs = _runs(rows)
        scale = v.rows / len(m.row_profile)
        spans = ", ".join(
            f"elements {int(a * scale) * v.cols:,}–{min(int(math.ceil(b * scale)) * v.cols, v.rows * v.cols) - 1:,}"
            for a, b in runs[:3])
        if len(runs) == 1 and rows[0] == 0 and len(rows) == len(m.row_profile):
            return "throughout" if inside * 10 >= 9 * v.rows * v.cols else "scattered throughout"
        return spans + (f" and {len(runs) - 3} more ranges" if len(runs) > 3 else "") + (" only" if len(runs) == 1 else "")
    rows_text, all_rows = _axis(m.row_profile, v.rows, "row")
    cols_text, all_cols = _axis(m.col_profile, v.cols, "column")
    if all_rows and all_cols:
        return "throughout" if inside * 2 >= v.rows * v.cols else f"scattered over all rows and columns"
    if all_cols:
        return rows_text
    if all_rows:
        return cols_text
    return f"{rows_text} × {cols_text}"


def summarize(m: MismatchMap) -> str:
    """One line: how many, where, and what kind ("NaN in got where expected is finite")."""
    if m.passed:
        return "no mismatch"
    n = m.elements
    what = "bytes" if not m.dtype else f"{m.dtype} elements"
    parts = [f"{m.mismatched_elements:,} of {n:,} {what} ({100.0 * m.mismatched_elements / max(n, 1):.3g}%)"]
    loc = where(m)
    if loc:
        parts.append(loc)
    if m.outside_view:
        parts.append(f"{m.outside_view:,} outside the {m.view.rows:,}×{m.view.cols:,} view")
    if m.nan_errors:
        got_nan, exp_nan = m.nonfinite("actual")[0], m.nonfinite("expected")[0]
        side = ("NaN in got where expected is finite" if exp_nan == 0 else
                "NaN expected where got is a number" if got_nan == 0 else "NaN on both sides")
        parts.append(f"{side} ({m.nan_errors:,} elements)" if m.nan_errors < m.mismatched_elements else side)
    if m.inf_errors:
        parts.append(f"{m.inf_errors:,} with an infinity")
    if m.stale:
        parts.append("got is the pre-state there (never written)" if m.stale == m.mismatched_elements
                     else f"{m.stale:,} never written (got = pre-state)")
    elif math.isfinite(m.ratio_min) and m.ratio_min != 0 and m.ratio_max - m.ratio_min <= 1e-6 * abs(m.ratio_min):
        parts.append(f"got = {m.ratio_min:.6g} × expected")
    finite = m.mismatched_elements - m.nan_errors - m.inf_errors
    if finite > 0 and m.dtype and dt.is_float(m.dtype):
        ulps = np.flatnonzero(m.ulp_hist)
        if len(ulps) and ulps[-1] <= 3:
            parts.append(f"within {(1 << int(ulps[-1])) - 1} ULP")
        else:
            parts.append(f"max abs {m.max_abs:.3g}, max rel {m.max_rel:.3g}")
    elif finite > 0:
        parts.append(f"max abs {m.max_abs:.3g}")
    if m.tail_bytes:
        parts.append(f"{m.tail_bytes} differing bytes past the last whole element")
    if m.computed.startswith("cpu, sampled"):
        parts.append(m.computed)
    return "; ".join(parts)


# -- text ------------------------------------------------------------------------------------


def hist_line(hist: np.ndarray, label: Callable[[int], str], limit: int = 6) -> str:
    nz = np.flatnonzero(hist)
    top = sorted(nz, key=lambda b: -int(hist[b]))[:limit]
    return ", ".join(f"{label(int(b))}: {int(hist[b]):,}" for b in sorted(top))


def err_label(b: int) -> str:
    return "equal value" if b == 0 else f"2^{b - 1 + LOG_MIN}"


def ulp_label(b: int) -> str:
    if b <= 1:
        return str(b)
    return f"{1 << (b - 1)}–{(1 << b) - 1}" if b <= 10 else f"2^{b - 1}"


def value_label(b: int) -> str:
    if b < 4:
        return ("NaN", "+inf", "-inf", "0")[b]
    k = (b - 4) % 128 + LOG_MIN
    return ("-" if b >= 4 + 128 else "+") + f"2^{k}"


def coords_text(f: FirstMismatch, m: MismatchMap) -> str:
    if f.coords is None:
        return f"[{f.index:,}]"
    return "[" + ", ".join(str(c) for c in f.coords) + "]"


def format_map(m: MismatchMap, indent: str = "          ") -> list[str]:
    """The report lines `kerncap validate` prints under a failing region."""
    lines = [f"{indent}where: {m.summary()}"]
    shape = "×".join(map(str, m.view.shape))
    lines.append(f"{indent}view: {m.view.rows:,}×{m.view.cols:,} of {m.dtype or 'raw bytes'}"
                 f"{' (folded 1-D)' if m.view.wrapped else f' (tensor {shape})'} from {m.view.source}; "
                 f"computed on the {'GPU' if m.computed == 'gpu' else m.computed.replace('cpu', 'CPU')}")
    nan = ", ".join(f"{s} {m.nonfinite(s)[0]:,}/{m.nonfinite(s)[1]:,}" for s in ("expected", "actual"))
    lines.append(f"{indent}NaN/inf: {nan}")
    if m.err_hist.any():
        lines.append(f"{indent}abs error: {hist_line(m.err_hist, err_label)}")
    if m.ulp_hist.any():
        lines.append(f"{indent}ULP: {hist_line(m.ulp_hist, ulp_label)}")
    if m.first:
        lines.append(f"{indent}first: " + ", ".join(
            f"{coords_text(f, m)} expected {_show(f.expected)} got {_show(f.actual)}" for f in m.first[:4]))
    lines += [f"{indent}note: {n}" for n in m.notes]
    return lines


def _show(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def from_arrays(name: str, actual, expected, pre=None, *, dtype: str | None, view: View | None = None,
                tolerance: bool = False, atol: float = 0.0, rtol: float = 0.0, grid_rows: int = 256,
                grid_cols: int = 256, actual_label: str = "", expected_label: str = "") -> MismatchMap:
    """The map of two numpy arrays (or buffers) holding an item's bytes (e.g. loaded from
    `kerncap dump`); `pre` defaults to `expected`; `view` to the arrays' own 2-D shape."""
    a, e = np.ascontiguousarray(actual), np.ascontiguousarray(expected)
    p = e if pre is None else np.ascontiguousarray(pre)
    ab, eb, pb = (x.view(np.uint8).reshape(-1).tobytes() for x in (a, e, p))
    if not len(ab) == len(eb) == len(pb):
        raise ValueError(f"{name}: the arrays hold {len(ab)}, {len(eb)} and {len(pb)} bytes")
    if view is None:
        size = dt.itemsize(dtype) if dtype else 1
        n = len(ab) // size
        if a.ndim >= 2:
            cols = a.shape[-1]
            view = View(0, n // cols, cols, cols, tuple(a.shape), tuple(int(x // a.itemsize) for x in a.strides),
                        f"array shape {'×'.join(map(str, a.shape))}")
        else:
            from kerncap.replay.tensor_view import fold_width

            cols = fold_width(n)
            view = View(0, -(-n // cols), cols, cols, (n,), (1,), "1-D array", wrapped=True)
    rd = {k: (lambda b: lambda o, n: b[o:o + n])(v) for k, v in (("a", ab), ("e", eb), ("p", pb))}
    return compute(name, len(ab), view, dtype, rd["a"], rd["e"], rd["p"], atol=atol, rtol=rtol, tolerance=tolerance,
                   grid_rows=grid_rows, grid_cols=grid_cols, actual_label=actual_label, expected_label=expected_label)


def map_of_arrays(name: str, actual, expected, pre=None, *, dtype: str | None, view: View | None = None,
                  atol: float | None = None, rtol: float | None = None, grid: tuple[int, int] = (256, 256),
                  actual_label: str = "", expected_label: str = "") -> MismatchMap:
    """The map `Session.mismatch_maps` computes on the GPU, computed here in numpy from
    arrays holding an item's bytes (e.g. loaded from `dump`): the reference it is checked
    against (a tolerance when `atol` or `rtol` is given)."""
    return from_arrays(name, actual, expected, pre, dtype=dtype, view=view, tolerance=atol is not None or rtol is not None,
                       atol=atol or 0.0, rtol=rtol or 0.0, grid_rows=grid[0], grid_cols=grid[1],
                       actual_label=actual_label, expected_label=expected_label)


def format_text(m: MismatchMap) -> str:
    """The report lines `kerncap validate` prints under a failing region."""
    return "\n".join(format_map(m, indent=""))


def bin_label(histogram: str, b: int) -> str:
    """The label of bin `b` of a MismatchMap histogram: "value" (value_hist: "NaN",
    "+inf", "-inf", "0", "+2^3", …), "err" (err_hist: "2^-12", …) or "ulp" (ulp_hist)."""
    return {"value": value_label, "err": err_label, "ulp": ulp_label}[histogram](b)
