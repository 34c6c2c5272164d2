"""Units and formatting shared by the CLI, the workbench and the engine's reports:
byte counts, launch dimensions, kernel names, speedups, driver versions and plain-text
tables.
One place, so every front end prints a size or a name the same way."""

from __future__ import annotations

import re
from collections.abc import Sequence


# Characters a terminal acts on instead of showing: C0 controls but tab and newline, DEL,
# C1 controls (ESC [ ... as one byte), the Unicode line separators and the bidirectional
# overrides and isolates (text that reads differently from what it is).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}"


def printable(text: str, *, newlines: bool = True) -> str:
    """`text` with every control character escaped (ESC -> '\\x1b'), so that a string from a
    reproducer (a kernel name, a path, a command) cannot move the cursor, recolour, retitle
    or reorder the terminal; `newlines=False` escapes newlines and tabs too (one field)."""
    text = _CONTROL.sub(_escape, text)
    return text.replace("\n", "\\n").replace("\t", "\\t") if not newlines else text


def human_bytes(n: int | float, *, trim: bool = False) -> str:
    """1536 -> '1.5 KiB'; with `trim`, 16 MiB is '16 MiB' rather than '16.0 MiB'."""
    if abs(n) < 1024:
        return f"{int(n)} B"
    n = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "TiB":
            break
    text = f"{n:.1f} {unit}"
    return text.replace(".0 ", " ") if trim else text


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(?:i?b)?\s*", re.I)


def parse_bytes(text: str) -> int:
    """'40G', '512 MiB', '1t', '4096' -> bytes (binary multiples); ValueError otherwise."""
    m = _SIZE.fullmatch(text)
    if not m:
        raise ValueError(f"{text!r} is not a size (e.g. 4096, 512M, 40G, 1T)")
    return int(float(m.group(1)) * 1024 ** "_kmgtp".index(m.group(2).lower() or "_"))


def format_dim(dim: Sequence[int] | None, *, sep: str = "x", trim: bool = True) -> str:
    """(128, 1, 1) -> '128'; (64, 32, 1) -> '64x32'; with trim=False every component."""
    if not isinstance(dim, (list, tuple)):
        return str(dim or "")
    dims = list(dim) or [0]
    while trim and len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    return sep.join(str(d) for d in dims)


def dim_tuple(dim: Sequence[int] | None) -> str:
    """[64, 1, 1] -> '(64, 1, 1)' (the full launch dimension, as `kerncap info` shows it)."""
    return "(" + ", ".join(str(x) for x in (dim or [])) + ")"


def short_kernel_name(name: str, width: int = 64) -> str:
    """A readable one-line form of a demangled name: no return type or argument
    list, template arguments below the first level elided, middle cut to `width`."""
    s = name.strip()
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                s = s[:i] if i > 0 else s
                break
    if s.startswith("void "):
        s = s[5:]
    return cut_middle(collapse_templates(s, keep=1), width)


def collapse_templates(name: str, keep: int = 1) -> str:
    """Template arguments below nesting depth `keep` replaced by `…`:
    keep=1: `a<b<c>, d>` -> `a<b<…>, d>`; keep=0: -> `a<…>`."""
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
            if depth == keep + 1:
                out.append("<…")
                continue
        elif ch == ">":
            depth -= 1
            if depth == keep:
                out.append(">")
                continue
        if depth <= keep:
            out.append(ch)
    return "".join(out)


def _last_component(name: str) -> str:
    """`at::native::(anonymous namespace)::k<…>` -> `k<…>` (split outside template brackets)."""
    parts = re.split(r"::(?![^<]*>)", name)
    return parts[-1] if parts[-1] else name


def fit_kernel_name(name: str, width: int) -> str:
    """A demangled (or plain) kernel name in at most `width` characters. Real PyTorch /
    cuBLAS / cuDNN names run to hundreds of characters; they lose, in this order, the
    argument list and return type, nested then all template arguments, the namespaces,
    then their middle."""
    s = short_kernel_name(name, width=10**6)
    for step in (lambda n: collapse_templates(n, keep=0), _last_component):
        if len(s) <= width:
            return s
        s = step(s)
    return cut_middle(s, width)


def cut_middle(text: str, width: int) -> str:
    """`text` cut to `width` characters by an ellipsis two thirds of the way along."""
    if len(text) <= width:
        return text
    keep = max(width - 1, 1)
    return text[: keep - keep // 3] + "…" + text[len(text) - keep // 3 :]


def cut_end(text: str | None, width: int) -> str:
    """`text` cut to `width` characters with a trailing ellipsis; '?' for nothing."""
    text = text or "?"
    return text if len(text) <= width else text[: width - 1] + "…"


def speedup_text(s: float | None, digits: int = 2) -> str:
    """A speedup (baseline time / variant time): 1.234 -> '1.23×'; None -> '—'."""
    return "—" if s is None else f"{s:.{digits}f}×"


def interval_text(low: float | None, high: float | None, digits: int = 2) -> str:
    """A speedup's confidence interval: '1.21–1.35'; '' when there is none."""
    return "" if low is None or high is None else f"{low:.{digits}f}–{high:.{digits}f}"


def driver_version_text(v: int | None) -> str:
    """cuDriverGetVersion's 13000 -> '13.0'."""
    if not isinstance(v, int):
        return "?"
    return f"{v // 1000}.{(v % 1000) // 10}"


def text_table(headers: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    """Lines of a plain-text table, two spaces indented; columns in `right` right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return ["  " + line(headers), "  " + line(["-" * w for w in widths]), *("  " + line(r) for r in rows)]
