"""The per-translation-unit module id that nvcc writes into internal-linkage names.

nvcc's front end names every internal-linkage device entity of a TU after a module
id: `_<hash>_<len>_<file>_<first external function>`, e.g. `_1fd5b349_6_eam_cu_main`,
where the hash is of the source file's absolute path. It shows up in device globals
that thrust, CUB and libcu++ define in every TU that includes them
(`_ZN32_INTERNAL_1fd5b349_6_eam_cu_main4cuda3std3__45__cpo5beginE`) and in anything
in an anonymous namespace (`_ZN34_GLOBAL__N__1fd5b349_...`). A copy of the TU compiled
elsewhere (the reproducer's source/) gets another hash, so the variant's module names
its globals differently from the captured one. The front end takes the id from a file
(`--module_id_file_name` without `--gen_module_id_file`), so the recompile hands it
the captured module's id and the names come out the same (measured: byte-identical
cubins). `global_names_for` matches globals of two modules by what they are when the
ids differ anyway (a variant built by hand with plain nvcc).
"""

from __future__ import annotations

import re

# <len>_INTERNAL_<id without its leading "_"> / <len>_GLOBAL__N_<id>: the length prefix
# says where the identifier ends, so the id can be cut out exactly.
_PREFIXED = re.compile(r"(\d+)(_INTERNAL_|_GLOBAL__N__)(?=[0-9a-f]{8}_\d+_)")


def module_ids(names) -> set[str]:
    """Module ids ("_1fd5b349_6_eam_cu_main") found in mangled names."""
    found: set[str] = set()
    for name in names:
        for m in _PREFIXED.finditer(name):
            length = int(m.group(1))
            ident = name[m.end(1) : m.end(1) + length]
            if len(ident) != length:
                continue
            # _INTERNAL_<hash>... -> _<hash>...; _GLOBAL__N__<hash>... -> _<hash>...
            found.add(ident[len("_INTERNAL") :] if m.group(2) == "_INTERNAL_" else ident[len("_GLOBAL__N_") :])
    return found


def module_id(names) -> str | None:
    """The one module id the names carry, or None (none, or several: not one TU's)."""
    ids = module_ids(names)
    return next(iter(ids)) if len(ids) == 1 else None


def _mangled_len(ident: str) -> str:
    return f"{len(ident)}{ident}"


def rename(name: str, old: str, new: str) -> str:
    """`name` with module id `old` replaced by `new`, length prefixes adjusted."""
    if old == new or old not in name:
        return name
    for head in ("_INTERNAL", "_GLOBAL__N_"):
        old_ident, new_ident = head + old, head + new
        name = name.replace(_mangled_len(old_ident), _mangled_len(new_ident))
    return name.replace(old, new)  # e.g. nested _GLOBAL__N_ inside an _INTERNAL_ name


_COMPILER_CONSTANT = re.compile(r"\$str(\$\d+)?|__unnamed_\d+")


def compiler_constant(name: str) -> bool:
    """A constant the compiler names itself (`$str$2`, a string literal; `__unnamed_7`):
    read-only, and numbered per module, so another build's `__unnamed_7` may be another
    object. A variant keeps its own, never the captured module's bytes."""
    return _COMPILER_CONSTANT.fullmatch(name) is not None


def global_names_for(captured: list[str], available: set[str]) -> dict[str, str | None]:
    """For each captured global name, the name of the same global in a module that
    defines `available` (None when it has no such global, or when it is a compiler
    constant, see compiler_constant): the same name, or the same name under the other
    module's id."""
    old = module_id(captured)
    new = module_id(available)
    out: dict[str, str | None] = {}
    for name in captured:
        if compiler_constant(name):
            out[name] = None
        elif name in available:
            out[name] = name
        elif old and new and old != new and rename(name, old, new) in available:
            out[name] = rename(name, old, new)
        else:
            out[name] = None
    return out


def object_names(image: bytes) -> set[str] | None:
    """Names of the data objects (module globals) a cubin defines; None when `image` is
    not an ELF cubin (PTX, a fatbin: the driver resolves those)."""
    import io

    from elftools.elf.elffile import ELFFile

    if not image.startswith(b"\x7fELF"):
        return None
    try:
        symtab = ELFFile(io.BytesIO(image)).get_section_by_name(".symtab")
        if symtab is None:  # not a cubin as nvcc writes them: leave it to the driver
            return None
        return {s.name for s in symtab.iter_symbols()
                if s["st_info"]["type"] == "STT_OBJECT" and s["st_shndx"] != "SHN_UNDEF" and s.name}
    except Exception:  # noqa: BLE001 - pyelftools raises many types on malformed input
        return None
