"""What a cubin is built for, read from its ELF header: turns a driver's "no binary
for GPU" into "cubin X is for sm_80, this GPU is sm_90"."""

from __future__ import annotations

import struct
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
EI_ABIVERSION = 8
E_FLAGS_OFFSET_64 = 48


def cubin_arch(image: bytes) -> int | None:
    """The SM number (90 for sm_90) of an ELF cubin; None for anything else (fatbin, PTX).

    CUDA ELF ABI version 8 and later (CUDA 12.8+) keep the SM in bits 8..15 of e_flags,
    earlier versions in bits 0..7.
    """
    if len(image) < E_FLAGS_OFFSET_64 + 4 or image[:4] != ELF_MAGIC or image[4] != 2:  # ELFCLASS64
        return None
    flags = struct.unpack_from("<I", image, E_FLAGS_OFFSET_64)[0]
    sm = (flags >> 8) & 0xFF if image[EI_ABIVERSION] >= 8 else flags & 0xFF
    return sm or None


def describe_arch_mismatch(path: str | Path | None, image: bytes, cc: tuple[int, int]) -> str:
    """One sentence comparing the cubin's architecture with the GPU's."""
    what = f"cubin {path}" if path else "the captured cubin"
    gpu = f"this GPU is sm_{cc[0]}{cc[1]} (compute capability {cc[0]}.{cc[1]})"
    sm = cubin_arch(image)
    if sm is None:
        return f"{what} is not an ELF cubin; {gpu}"
    return f"{what} is built for sm_{sm}; {gpu}"
