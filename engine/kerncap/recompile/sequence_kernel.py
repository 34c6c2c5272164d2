"""Rebuilding one kernel of a sequence (docs/sequences.md): its kernel entry
(`kernels/<k>/`, a one-dispatch reproducer of its first launch with its sources) is
recompiled like any reproducer, whole translation unit, and a sequence variant
(`variants/kernel-<k>-<n>.json`) replaces the kernel's module with the new cubin in every
launch of it and of the other kernels of that module (one translation unit, one cubin,
one set of module globals)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kerncap.errors import KerncapError, UsageError
from kerncap.recompile import recompile
from kerncap.reproducer.editable import source_fingerprint
from kerncap.reproducer.format import Capture
from kerncap.reproducer.sequence_variant import write_variant
from kerncap.reproducer.variants import RecompileResult

KERNELS_DIR = "kernels"


def kernel_index(cap: Capture, selector: str) -> int:
    """The kernel a --kernel names: its index in the sequence, or a (unique) part of its name."""
    seq = cap.sequence
    assert seq is not None
    if selector.isdigit() and int(selector) < len(seq.kernels):
        return int(selector)
    hits = [k.id for k in seq.kernels if selector in k.name or selector in (k.demangled or "")]
    listing = "; ".join(f"{k.id}: {k.demangled or k.name}" for k in seq.kernels[:12])
    if not hits:
        raise UsageError(f"--kernel {selector!r} names no kernel of the sequence", f"its kernels are {listing}")
    if len(hits) > 1:
        raise UsageError(f"--kernel {selector!r} names {len(hits)} kernels of the sequence",
                         f"pass its number or a longer part of its name ({listing})")
    return hits[0]


def choose(cap: Capture, selector: str | None) -> int:
    """The kernel a build (or a source edit) of a sequence reaches: `selector` (its number
    or a part of its name), else the only kernel whose entry has sources."""
    if selector is not None:
        return kernel_index(cap, selector)
    editable = editable_kernels(cap)
    if len(editable) != 1:
        seq = cap.sequence
        names = "; ".join(f"{k}: {seq.kernels[k].demangled or seq.kernels[k].name}" for k in editable[:12])
        raise UsageError(f"{cap.reproducer_dir} is a sequence: a build rebuilds one of its kernels, and "
                         + (f"{len(editable)} have sources ({names})" if editable else "none has sources"),
                         "name the kernel (build --kernel K)" if editable else
                         "extract the sequence with --source-dir (CUDA C++)")
    return editable[0]


def entry_dir(root: Path, k: int) -> Path:
    return Path(root) / KERNELS_DIR / str(k)


def kernel_of_source(root: str | os.PathLike, path: str | os.PathLike) -> int | None:
    """The kernel whose entry's sources hold `path` (kernels/<k>/source/...), else None."""
    try:
        rel = Path(path).resolve().relative_to((Path(root) / KERNELS_DIR).resolve())
    except ValueError:
        return None
    parts = rel.parts
    return int(parts[0]) if len(parts) > 2 and parts[0].isdigit() and parts[1] == "source" else None


def editable_kernels(cap: Capture) -> list[int]:
    """The kernels of the sequence whose entries have sources to rebuild."""
    assert cap.sequence is not None
    return [k.id for k in cap.sequence.kernels if (entry_dir(cap.reproducer_dir, k.id) / "source").is_dir()]


def source_hash(root: Path, k: int) -> str:
    """The fingerprint a History row of kernel k's rebuild keeps (its entry's sources and k)."""
    inner = source_fingerprint(entry_dir(root, k) / "source")
    return hashlib.sha256(f"kernel {k}:{inner}".encode()).hexdigest()


def launches_of(cap: Capture, k: int) -> list[int]:
    assert cap.sequence is not None
    return [l.index for l in cap.sequence.launches if l.kernel == k]


def recompile_kernel(repro: str | os.PathLike, selector: str, *, trust: bool = False,
                     mode: str = "auto") -> tuple[RecompileResult, Path]:
    """(the rebuild of the kernel's entry, the sequence variant that uses it)."""
    cap = Capture.open(repro)
    if cap.sequence is None:
        raise UsageError("--kernel picks one kernel of a sequence", f"{repro} holds one dispatch: recompile it whole")
    root = cap.reproducer_dir
    k = kernel_index(cap, selector)
    entry = entry_dir(root, k)
    if not (entry / "capture" / "manifest.json").is_file():
        raise KerncapError(f"{entry} is missing: the sequence has no kernel entry for kernel {k}",
                           "extract the sequence again with this kerncap")
    if not (entry / "source").is_dir():
        raise KerncapError(f"kernel {k} ({cap.sequence.kernels[k].demangled or cap.sequence.kernels[k].name}) has "
                           f"no sources in {entry / 'source'}",
                           "extract with --source-dir (CUDA C++); library kernels have no source to rebuild")
    if mode == "reduced":
        raise UsageError("a kernel of a sequence is rebuilt with its whole translation unit: the new cubin replaces "
                         "its module, which the sequence's other kernels of that unit launch from too",
                         "drop --reduced")
    result = recompile(entry, trust=trust, mode="full")
    module = cap.sequence.kernels[k].module
    n = len(list((root / "variants").glob(f"kernel-{k}-*.json"))) if (root / "variants").is_dir() else 0
    variant = write_variant(root, f"kernel-{k}-{n + 1}", modules={module: str(Path(result.cubin).relative_to(root))},
                            note=f"kernel {k} rebuilt from {entry / 'source'}")
    return result, variant
