"""Edits of testapps/cuda/smooth/smooth_kernel.cuh used by the source-recompile test and
the demo: the original, a faster one (boundary check hoisted out of the inner loop,
common tap count unrolled; same fmaf order, so byte-identical) and a wrong one; and the
Triton twin's edit (testapps/python/triton_smooth.py: the tap weight's volatile load made a
plain one)."""

from pathlib import Path

SMOOTH_MANGLED = "_Z6smoothPKfPfS0_ii"  # smooth(const float*, float*, const float*, int, int)

FAST_BODY = """  const int half = taps / 2;
  if (taps == 64 && i >= half && i + 64 - half <= n) {
    // Interior point: every tap is in range, so the check leaves the loop and it unrolls.
#pragma unroll
    for (int k = 0; k < 64; ++k) acc = fmaf(w[k], x[i + k - half], acc);
  } else {
    for (int k = 0; k < taps; ++k) {
      int j = i + k - half;
      if (j >= 0 && j < n) acc = fmaf(w[k], x[j], acc);
    }
  }
"""

ORIGINAL_LOOP = """  for (int k = 0; k < taps; ++k) {
    int j = i + k - taps / 2;
    if (j >= 0 && j < n) acc = fmaf(w[k], x[j], acc);
  }
"""


def kernel_header(reproducer: Path) -> Path:
    """The editable copy of smooth_kernel.cuh inside a reproducer's source/."""
    hits = sorted((reproducer / "source").rglob("smooth_kernel.cuh"))
    if not hits:
        raise FileNotFoundError(f"no smooth_kernel.cuh under {reproducer / 'source'}")
    return hits[0]


def edit(header: Path, kind: str) -> None:
    text = header.read_text()
    base = text if ORIGINAL_LOOP in text else None
    if base is None:
        raise ValueError(f"{header} no longer holds the original loop")
    if kind == "fast":
        header.write_text(text.replace(ORIGINAL_LOOP, FAST_BODY))
    elif kind == "wrong":  # off-by-one in the window: must fail validation
        header.write_text(text.replace("int j = i + k - taps / 2;", "int j = i + k - taps / 2 + 1;"))
    else:
        raise ValueError(kind)


TRITON_SMOOTH_KERNEL = "kc_smooth_taps"
TRITON_EDIT = ("        w = tl.load(w_ptr + t, volatile=True)\n", "        w = tl.load(w_ptr + t)\n")


def triton_edit(reproducer: Path) -> None:
    """The Triton twin's faster edit in a reproducer's pinned source (source/kernel.py)."""
    kernel = reproducer / "source" / "kernel.py"
    text = kernel.read_text()
    if text.count(TRITON_EDIT[0]) != 1:
        raise ValueError(f"{kernel} no longer holds the volatile tap load once")
    kernel.write_text(text.replace(*TRITON_EDIT))
