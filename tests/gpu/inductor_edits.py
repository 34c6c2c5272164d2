"""A faster, byte-exact edit of an Inductor two-pass looped reduction (RMSNorm's):
keep the row in registers instead of loading it twice.

Inductor's kernel sums x*x over the row in R0_BLOCK tiles (pass 1), then walks the row
again, reloading x, to write the normalised output (pass 2). When the row is a known
number of tiles, both passes can be unrolled: pass 1 keeps each tile it loaded in a
register tensor of its own, pass 2 uses those instead of loading again. Every
arithmetic operation stays the same and in the same order (the per-lane sums add the
tiles in the same sequence), so every output bit is unchanged; the second read of x
from memory is gone and pass 1's loads are all independent.
"""

from __future__ import annotations

import re

LOOP = re.compile(r"^(?P<ind>[ \t]*)for r0_offset in (?:tl\.)?range\(0, r0_numel, R0_BLOCK\):[ \t]*\n", re.M)
LOAD = re.compile(r"^(?P<ind>[ \t]*)(?P<var>tmp\d+) = tl\.load\((?P<ptr>\w+) \+ \((?P<addr>[^)]*)\), (?P<mask>[^,]+), "
                  r"(?:eviction_policy='\w+', )?other=(?P<other>[^)]+)\)(?P<suffix>.*)$")


def _body(lines: list[str], indent: str) -> list[str]:
    body = []
    for line in lines:
        if line.strip() and not line.startswith(indent + " ") and not line.startswith(indent + "\t"):
            break
        body.append(line)
    while body and not body[-1].strip():
        body.pop()
    return body


def _dedent(body: list[str], indent: str) -> list[str]:
    """The loop body one level out (the loop is unrolled away)."""
    inner = len(indent) + 4
    return [indent + line[inner:] if line.strip() else line for line in body]


def _loads(body: list[str]) -> dict[tuple, tuple[int, re.Match]]:
    """(ptr, address, mask, other, suffix) -> (line index, match) of each load."""
    out = {}
    for i, line in enumerate(body):
        m = LOAD.match(line.rstrip("\n"))
        if m:
            out[(m["ptr"], m["addr"], m["mask"], m["other"], m["suffix"])] = (i, m)
    return out


def keep_row_in_registers(source: str, tiles: int) -> str:
    """The edited kernel module. `tiles` = r0_numel / R0_BLOCK of the captured config."""
    loops = list(LOOP.finditer(source))
    if len(loops) != 2:
        raise ValueError(f"expected two `for r0_offset in range(0, r0_numel, R0_BLOCK)` loops, found {len(loops)}")
    first, second = loops
    indent = first["ind"]
    if second["ind"] != indent:
        raise ValueError("the two R loops are not at the same depth")
    body1 = _body(source[first.end():].splitlines(keepends=True), indent)
    between_start = first.end() + sum(len(x) for x in body1)
    body2 = _body(source[second.end():].splitlines(keepends=True), second["ind"])
    end2 = second.end() + sum(len(x) for x in body2)
    loads1, loads2 = _loads(body1), _loads(body2)
    reused = {key: (loads1[key][1]["var"], loads2[key][0]) for key in loads2 if key in loads1}
    if not reused:
        raise ValueError("pass 2 loads nothing that pass 1 loaded")
    kept = {var for var, _ in reused.values()}

    body1, body2 = _dedent(body1, indent), _dedent(body2, indent)
    out1 = []
    for k in range(tiles):
        out1.append(f"{indent}r0_offset = {k} * R0_BLOCK\n")
        for line in body1:
            for var in kept:
                line = re.sub(rf"\b{var}\b", f"{var}_t{k}", line)
            out1.append(line)
    out2 = []
    for k in range(tiles):
        out2.append(f"{indent}r0_offset = {k} * R0_BLOCK\n")
        for i, line in enumerate(body2):
            hit = next(((var, key) for key, (var, idx) in reused.items() if idx == i), None)
            if hit:
                target = LOAD.match(line.rstrip("\n"))["var"]
                line = f"{indent}{target} = {hit[0]}_t{k}\n"
            out2.append(line)
    return (source[:first.start()] + "".join(out1) + source[between_start:second.start()] + "".join(out2)
            + source[end2:])

