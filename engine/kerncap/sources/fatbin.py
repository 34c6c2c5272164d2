"""Device code images (cubins) embedded in host objects built by nvcc.

nvcc puts the device code of a translation unit into the host object's
`.nv_fatbin` section: a sequence of fat binaries (magic 0xBA55ED50), each a list of
entries (ELF cubin or PTX) with a small header. CUDA 12.8+ compresses entries with
zstd (flag 0x8000; `-compress-mode=size|balance|default`) or an LZ4-style block
codec (flag 0x2000; `-compress-mode=speed`, older toolkits). cuobjdump would do the
same, but build machines do not always ship it, so the container is read here.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from pathlib import Path

import zstandard
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from kerncap.errors import KerncapError

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2
FLAG_LZ4 = 0x2000
FLAG_ZSTD = 0x8000
ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190


@dataclass(frozen=True)
class DeviceImage:
    """One cubin found in an object: its bytes and the SM it was built for."""

    source: Path  # the host object (or cubin) it came from
    arch: int  # e.g. 90
    data: bytes


def _lz4_block_decompress(src: bytes, out_size: int) -> bytes:
    """The fatbinary's LZ4-style codec: literal-run/match tokens, 2-byte back offsets."""
    out = bytearray()
    i, n = 0, len(src)
    while i < n:
        token = src[i]
        i += 1
        lit = token >> 4
        if lit == 15:
            while True:
                b = src[i]
                i += 1
                lit += b
                if b != 255:
                    break
        out += src[i : i + lit]
        i += lit
        if i >= n or len(out) >= out_size:
            break
        back = src[i] | (src[i + 1] << 8)
        i += 2
        match = (token & 15) + 4
        if match == 19:
            while True:
                b = src[i]
                i += 1
                match += b
                if b != 255:
                    break
        if back == 0 or back > len(out):
            raise ValueError(f"bad back reference {back} at output offset {len(out)}")
        start = len(out) - back
        for k in range(match):  # byte by byte: the match may overlap what it produces
            out.append(out[start + k])
    return bytes(out[:out_size])


def _zstd_decompress(data: bytes, out_size: int, where: str) -> bytes:
    try:
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=out_size)
    except zstandard.ZstdError as exc:
        raise KerncapError(f"the zstd-compressed device code in {where} cannot be decompressed ({exc})",
                           "rebuild the app, or with -Xfatbin=-compress-mode=none") from None


def parse_fatbin(blob: bytes, where: str) -> list[tuple[int, bytes]]:
    """(arch, cubin bytes) for every ELF entry of the fat binaries in `blob`."""
    images: list[tuple[int, bytes]] = []
    pos = 0
    while pos + 16 <= len(blob):
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", blob, pos)
        if magic != FATBIN_MAGIC:
            break  # padding between fat binaries ends the list
        p, end = pos + header_size, pos + header_size + fat_size
        while p + 16 <= end:
            kind, _ev, entry_header, payload_size = struct.unpack_from("<HHIQ", blob, p)
            if entry_header < 64 or entry_header > end - p:
                raise KerncapError(f"malformed fat binary in {where} (entry header of {entry_header} bytes)")
            stored_size = struct.unpack_from("<I", blob, p + 16)[0]
            arch = struct.unpack_from("<I", blob, p + 28)[0]
            flags = struct.unpack_from("<Q", blob, p + 40)[0]
            plain_size = struct.unpack_from("<Q", blob, p + 56)[0]
            payload = blob[p + entry_header : p + entry_header + payload_size]
            if kind == KIND_ELF:
                if flags & FLAG_ZSTD:
                    data = _zstd_decompress(payload[:stored_size] or payload, plain_size, where)
                elif flags & FLAG_LZ4:
                    try:
                        data = _lz4_block_decompress(payload[:stored_size] or payload, plain_size)
                    except (IndexError, ValueError) as exc:
                        raise KerncapError(f"could not decompress the device code in {where} ({exc})") from None
                else:
                    data = payload
                if data[:4] == ELF_MAGIC:
                    images.append((arch, data))
            p += entry_header + payload_size
        pos = end
    return images


def read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise KerncapError(f"cannot read {path}: {exc.strerror}") from None


def device_images(path: Path, raw: bytes | None = None) -> list[DeviceImage]:
    """Every cubin inside `path` (bytes `raw` if already read): a host object,
    executable or library built by nvcc, or a cubin itself."""
    if raw is None:
        raw = read_file(path)
    if raw[:4] != ELF_MAGIC:
        return []
    try:
        elf = ELFFile(io.BytesIO(raw))
        if elf["e_machine"] in ("EM_CUDA", EM_CUDA):
            return [DeviceImage(path, _cubin_arch(elf), raw)]
        section = elf.get_section_by_name(".nv_fatbin")
        if section is None:
            return []
        blob = section.data()
    except ELFError as exc:
        raise KerncapError(f"{path} is not a readable ELF file ({exc})") from None
    return [DeviceImage(path, arch, data) for arch, data in parse_fatbin(blob, str(path))]


def _cubin_arch(elf: ELFFile) -> int:
    # EF_CUDA_SM: low byte of e_flags (CUDA < 12.8) or bits 8..15 (newer ABI)
    flags = elf["e_flags"]
    return (flags >> 8) & 0xFF if elf["e_ident"]["EI_ABIVERSION"] >= 8 else flags & 0xFF
