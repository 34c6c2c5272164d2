"""Which module globals a kernel's code can reach, read from its PTX.

`kerncap apply` copies the captured module's globals into the variant's before each
substituted launch (docs/apply.md). A global the variant's code never names can be neither
read nor written by it, so copying it is stream work for nothing: ggml's mat-vec module has
11 lookup tables and its q4_0 kernel reads none. The cubin cannot tell which globals a
kernel uses: ptxas keeps every module global, unused and `static` ones too; non-rdc code
addresses `__device__` globals through constant bank 4, which the driver fills from
module-wide relocations (the unused ones' included), and `__constant__` ones by bank-3
offsets with no relocation at all (nvcc 13.0, sm_90: docs/facts.md §44). The PTX names
them. What the kernel reaches: the names in its body, in the bodies of the functions it
names (calls, function pointers, child kernels) and in the initializers of the globals it
names (a pointer to another global), followed transitively.
"""

from __future__ import annotations

import re

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_BOUNDARY = re.compile(r"[{};]")
_FUNCTION = re.compile(r"\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)")
# `.global .align 8 .u64 dptr = generic(dtab);`, `.const .align 4 .b8 ctab[64];`, on a line of
# its own (the module's first statement also holds `.version`, `.target`: no `;` ends them)
_VARIABLE = re.compile(r"^[ \t]*(?:\.(?:visible|extern|weak|common)\s+)*\.(?:global|const)\s+"
                       r"(?:(?:\.\w+|\d+)\s+)*([A-Za-z_$][\w$]*)", re.M)
# a name, not a register (%r1), not a part of an instruction or type (ld.const.f32)
_NAME = re.compile(r"(?<![\w.$%])[A-Za-z_$][\w$]*")


def module_items(ptx: str) -> tuple[dict[str, str], set[str]]:
    """Every function definition's and module variable's text by name, and which names are
    module variables (`.global`, `.const`)."""
    text = _COMMENT.sub(" ", ptx)
    items: dict[str, str] = {}
    variables: set[str] = set()
    start = depth = 0
    body_at = initializer = None
    for m in _BOUNDARY.finditer(text):
        c = m.group()
        if c == "{":
            if depth == 0:
                initializer = "=" in text[start:m.start()]
                body_at = m.start()
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0 and not initializer:  # the end of a function's body
                fn = _FUNCTION.search(text, start, body_at)
                if fn:
                    items[fn.group(1)] = text[start : m.end()]
                start = m.end()
        elif depth == 0:  # a declaration ends (a function's prototype, a variable)
            var = _VARIABLE.search(text, start, m.end())
            if var:
                variables.add(var.group(1))
                items.setdefault(var.group(1), text[start : m.end()])
            start = m.end()
    return items, variables


def globals_reached(ptx: str, kernel: str) -> frozenset[str] | None:
    """The module globals `kernel`'s code can reach (see the module's doc), or None when
    the PTX does not define it (then nothing can be left out)."""
    items, variables = module_items(ptx)
    if kernel not in items or kernel in variables:
        return None
    seen = {kernel}
    pending = [kernel]
    while pending:
        for name in _NAME.findall(items.get(pending.pop(), "")):
            if name not in seen and name in items:
                seen.add(name)
                pending.append(name)
    return frozenset(seen & variables)
