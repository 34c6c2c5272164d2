"""What a cubin (device ELF) says about its kernels: which it defines, their parameter
layout (`.nv.info.<kernel>` EIATTR_KPARAM_INFO) and the source files in their line
tables (`.debug_line`, present with `-lineinfo` or `-G`)."""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from pathlib import PurePosixPath

from elftools.common.exceptions import DWARFError, ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

from kerncap.errors import KerncapError

EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4
EIATTR_KPARAM_INFO = 0x17
DW_LNE_SET_ADDRESS = 2


@dataclass(frozen=True)
class ParamSlot:
    ordinal: int
    offset: int
    size: int


def open_elf(data: bytes, where: str) -> ELFFile:
    try:
        return ELFFile(io.BytesIO(data))
    except ELFError as exc:
        raise KerncapError(f"{where} is not a readable cubin ({exc})") from None


_SHDR = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr
_SYM = struct.Struct("<IBBHQQ")          # Elf64_Sym
SHT_NOBITS = 8


def _sections(data: bytes, where: str) -> list[tuple[str, int, int, int, int]]:
    """(name, type, file offset, size, link) of each section of a little-endian ELF64
    image, read with struct alone: pyelftools builds objects per header, 0.14 s for the two
    lookups recompile makes in the 1,439 sections of ggml's mmvq.cu cubin (this: 3 ms)."""
    try:
        if data[:5] != b"\x7fELF\x02" or data[5] != 1:
            raise ValueError("not a little-endian ELF64 image")
        shoff, = struct.unpack_from("<Q", data, 0x28)
        entsize, count, strndx = struct.unpack_from("<HHH", data, 0x3A)
        if entsize != _SHDR.size or shoff + count * entsize > len(data) or strndx >= max(count, 1):
            raise ValueError("its section headers lie outside it")
        heads = list(_SHDR.iter_unpack(data[shoff:shoff + count * entsize]))
        _, _, _, _, str_off, str_size, *_ = heads[strndx]
        names = data[str_off:str_off + str_size]
        out = []
        for name, kind, _, _, offset, size, link, *_ in heads:
            if kind != SHT_NOBITS and offset + size > len(data):
                raise ValueError("a section lies outside it")
            out.append((names[name:names.find(b"\0", name)].decode(errors="replace"), kind, offset, size, link))
        return out
    except (ValueError, struct.error, IndexError) as exc:
        raise KerncapError(f"{where} is not a readable cubin ({exc})") from None


def section_data(data: bytes, name: str, where: str) -> bytes | None:
    """The bytes of the section called `name`, or None when the image has none."""
    for sec, kind, offset, size, _ in _sections(data, where):
        if sec == name:
            return b"" if kind == SHT_NOBITS else data[offset:offset + size]
    return None


def symbol_names(data: bytes, where: str) -> list[str]:
    """The non-empty names in the image's `.symtab`."""
    sections = _sections(data, where)
    for sec, _, offset, size, link in sections:
        if sec == ".symtab" and link < len(sections):
            _, _, str_off, str_size, _ = sections[link]
            strings = data[str_off:str_off + str_size]
            table = data[offset:offset + size - size % _SYM.size]
            return [strings[n:strings.find(b"\0", n)].decode(errors="replace")
                    for n, *_ in _SYM.iter_unpack(table) if 0 < n < len(strings)]
    return []


def defined_functions(elf: ELFFile) -> set[str]:
    """Names of functions the cubin defines (STT_FUNC with a section, not UND)."""
    symtab = elf.get_section_by_name(".symtab")
    if symtab is None:
        return set()
    return {
        s.name
        for s in symtab.iter_symbols()
        if s["st_info"]["type"] == "STT_FUNC" and s["st_shndx"] != "SHN_UNDEF" and s.name
    }


def kernel_names(elf: ELFFile) -> set[str]:
    """Defined functions that are kernels: they carry a `.nv.info.<name>` section."""
    return {f for f in defined_functions(elf) if elf.get_section_by_name(f".nv.info.{f}") is not None}


def _eiattrs(data: bytes):
    p = 0
    while p + 2 <= len(data):
        fmt, attr = data[p], data[p + 1]
        p += 2
        if fmt == EIFMT_NVAL:
            value = b""
        elif fmt == EIFMT_BVAL:
            value, p = data[p : p + 1], p + 1
        elif fmt == EIFMT_HVAL:
            value, p = data[p : p + 2], p + 2
        elif fmt == EIFMT_SVAL:
            (n,) = struct.unpack_from("<H", data, p)
            value, p = data[p + 2 : p + 2 + n], p + 2 + n
        else:
            return  # unknown format: the rest cannot be framed
        yield attr, value


def param_layout(elf: ELFFile, kernel: str) -> list[ParamSlot] | None:
    """The kernel's parameters in ordinal order, or None when it has no `.nv.info` section."""
    section = elf.get_section_by_name(f".nv.info.{kernel}")
    if section is None:
        return None
    slots = []
    for attr, value in _eiattrs(section.data()):
        if attr == EIATTR_KPARAM_INFO and len(value) >= 12:
            _index, ordinal, offset, flags = struct.unpack_from("<IHHI", value)
            slots.append(ParamSlot(ordinal, offset, (flags >> 18) & 0x3FFF))
    return sorted(slots, key=lambda s: s.ordinal)


def line_table_files(elf: ELFFile, kernel: str | None = None) -> list[str] | None:
    """Source paths in the cubin's `.debug_line`; with `kernel`, only the files whose
    lines belong to that kernel's code (sequences are matched to functions through
    `.rela.debug_line`). None when the cubin has no line table."""
    if elf.get_section_by_name(".debug_line") is None:
        return None
    try:
        dwarf = elf.get_dwarf_info(relocate_dwarf_sections=False)
        programs = []
        offset, size = 0, elf.get_section_by_name(".debug_line")["sh_size"]
        while offset < size:
            prog = dwarf._parse_line_program_at_offset(offset, dwarf.structs)
            programs.append(prog)
            offset = prog.program_end_offset
    except (DWARFError, ELFError, AttributeError, KeyError, struct.error) as exc:
        raise KerncapError(f"cannot read the line table of the cubin ({type(exc).__name__}: {exc})") from None

    owners = _sequence_owners(elf) if kernel else None
    files: list[str] = []
    seq = -1
    for prog in programs:
        names = _file_names(prog)
        used: set[int] = set()
        for entry in prog.get_entries():
            if entry.is_extended and entry.command == DW_LNE_SET_ADDRESS:
                seq += 1
            if entry.state is None:
                continue
            if owners is None or (seq < len(owners) and owners[seq] == kernel):
                used.add(entry.state.file)
        for index in sorted(used):
            if 0 < index <= len(names) and names[index - 1] not in files:
                files.append(names[index - 1])
    if kernel and owners is not None and not files:
        return line_table_files(elf, None)  # sequences did not map to functions: whole table
    return files


def _file_names(prog) -> list[str]:
    header = prog.header
    dirs = [d.decode(errors="replace") if isinstance(d, bytes) else d for d in header["include_directory"]]
    out = []
    for fe in header["file_entry"]:
        name = fe.name.decode(errors="replace") if isinstance(fe.name, bytes) else fe.name
        d = fe.dir_index
        if d and 0 < d <= len(dirs) and not name.startswith("/"):
            name = str(PurePosixPath(dirs[d - 1]) / name)
        out.append(name)
    return out


def _sequence_owners(elf: ELFFile) -> list[str] | None:
    """Function owning each DW_LNE_set_address of `.debug_line`, in section order."""
    rela = elf.get_section_by_name(".rela.debug_line")
    symtab = elf.get_section_by_name(".symtab")
    if not isinstance(rela, RelocationSection) or symtab is None:
        return None
    owners = []
    for reloc in sorted(rela.iter_relocations(), key=lambda r: r["r_offset"]):
        sym = symtab.get_symbol(reloc["r_info_sym"])
        name = sym.name
        if sym["st_info"]["type"] == "STT_SECTION":
            name = elf.get_section(sym["st_shndx"]).name
        owners.append(name.removeprefix(".text."))
    return owners
