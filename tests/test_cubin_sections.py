"""The struct-only section and symbol readers of kerncap.sources.cubin (recompile's
machine-code comparison and the captured module's names) agree with pyelftools on every
committed H200 capture's cubin, and a damaged image is one KerncapError."""

from __future__ import annotations

from pathlib import Path

import pytest
from kerncap.errors import KerncapError
from kerncap.sources import cubin

CUBINS = sorted((Path(__file__).resolve().parent / "fixtures" / "captures").glob("*/capture/cubins/*.cubin"))


@pytest.mark.parametrize("path", CUBINS, ids=lambda p: p.parts[-4])
def test_sections_and_symbols_match_pyelftools(path):
    data = path.read_bytes()
    elf = cubin.open_elf(data, str(path))
    symtab = elf.get_section_by_name(".symtab")
    assert cubin.symbol_names(data, "x") == [s.name for s in symtab.iter_symbols() if s.name]
    named = [s for s in elf.iter_sections() if s.name]
    assert len(named) > 5
    for s in named:
        want = b"" if s["sh_type"] == "SHT_NOBITS" else s.data()
        assert cubin.section_data(data, s.name, "x") == want, s.name
    assert cubin.section_data(data, ".text.no_such_kernel", "x") is None


def test_a_damaged_image_is_named():
    data = bytearray(CUBINS[0].read_bytes())
    for bad in (b"", b"\x7fELF\x01" + bytes(64), bytes(data[:0x40]),
                data[:0x28] + (len(data) + 1).to_bytes(8, "little") + data[0x30:]):
        with pytest.raises(KerncapError, match="the variant is not a readable cubin"):
            cubin.section_data(bytes(bad), ".text.k", "the variant")


def test_hostile_images_give_a_result_or_one_kerncaperror():
    """Bytes flipped in the ELF header and section headers of a real cubin, and the image cut
    short: the readers answer or raise KerncapError, never another exception."""
    import random

    data = CUBINS[0].read_bytes()
    shoff = int.from_bytes(data[0x28:0x30], "little")
    rng = random.Random(44)
    for _ in range(400):
        bad = bytearray(data[: rng.choice([len(data), rng.randrange(len(data))])])
        for _ in range(rng.randrange(1, 6)):
            at = rng.choice([rng.randrange(0x40), shoff + rng.randrange(max(1, len(data) - shoff))])
            if at < len(bad):
                bad[at] = rng.randrange(256)
        try:
            cubin.symbol_names(bytes(bad), "x")
            cubin.section_data(bytes(bad), ".text.k", "x")
        except KerncapError:
            pass
    for n in range(6, 0x40, 5):  # an ELF64 magic with its header cut short
        with pytest.raises(KerncapError, match="not a readable cubin"):
            cubin.section_data(data[:n], ".text.k", "x")
