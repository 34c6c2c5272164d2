"""Finding a kernel's `__global__` definition by reading the source tree (no build needed).

Handles `__launch_bounds__(...)`/`__attribute__((...))` anywhere between `__global__`
and the name, `template <...>` lines before it, `extern "C"`, and kernels declared
through a function-like macro whose body holds `__global__` and names the kernel
after a macro parameter (`#define KERNEL(name) __global__ void name`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from kerncap.sources.includes import read_text

SOURCE_SUFFIXES = {".cu", ".cuh", ".h", ".hpp", ".hh", ".hxx", ".inl", ".inc", ".cpp", ".cc", ".cxx"}
TU_SUFFIXES = {".cu"}
_SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv", "venv"}
_ATTRIBUTES = {"__launch_bounds__", "__attribute__", "__declspec", "__maxnreg__", "__cluster_dims__", "alignas"}
_IDENT = re.compile(r"[A-Za-z_]\w*")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)\(([^)]*)\)(.*(?:\\\n.*)*)", re.M)


@dataclass(frozen=True)
class GrepHit:
    file: Path
    line: int
    name: str
    via_macro: str | None = None


def iter_source_files(root: Path):
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        # build trees hold copies and generated files, not the sources
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in _SKIP_DIRS and not d.startswith(".") and not (here / d / "CMakeCache.txt").exists()
        )
        for name in sorted(filenames):
            if Path(name).suffix in SOURCE_SUFFIXES:
                yield here / name


def strip_comments(text: str) -> str:
    """Comments and string literals blanked out, offsets and newlines kept."""
    def blank(m: re.Match) -> str:
        s = m.group(0)
        if s.startswith('"'):
            return s if s == '"C"' else '"' + re.sub(r"[^\n]", " ", s[1:-1]) + '"'
        return re.sub(r"[^\n]", " ", s)

    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', blank, text, flags=re.S)


def _skip_balanced(text: str, i: int) -> int:
    """Index just past the parenthesised group starting at text[i] == '('."""
    depth = 0
    while i < len(text):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def _declared_name(text: str, i: int) -> tuple[str | None, int]:
    """From just after `__global__`: the declared function name and the index of its '('."""
    last_ident = None
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
            continue
        m = _IDENT.match(text, i)
        if m:
            word = m.group()
            i = m.end()
            if word in _ATTRIBUTES:
                j = i
                while j < len(text) and text[j].isspace():
                    j += 1
                if j < len(text) and text[j] == "(":
                    i = _skip_balanced(text, j)
                continue
            last_ident = word
            continue
        if c == "(":
            return last_ident, i
        if c == "<":  # template arguments of an explicit specialisation/instantiation
            depth = 0
            while i < len(text):
                depth += text[i] == "<"
                depth -= text[i] == ">"
                i += 1
                if depth == 0:
                    break
            continue
        if c in "[":
            i = text.find("]]", i) + 2 if text.startswith("[[", i) else i + 1
            continue
        if c in ";{}#":
            return None, i
        i += 1
    return last_ident, i  # ran off the end: a macro body such as `__global__ void name`


def _is_definition(text: str, paren: int) -> bool:
    j = _skip_balanced(text, paren)
    while j < len(text) and (text[j].isspace() or text.startswith("const", j)):
        j += 5 if text.startswith("const", j) else 1
    return j < len(text) and text[j] == "{"


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def find_definitions(root: Path, name: str) -> list[GrepHit]:
    hits: list[GrepHit] = []
    files = list(iter_source_files(root))
    texts = {f: strip_comments(read_text(f)) for f in files}
    macros: dict[str, int] = {}  # macro name -> index of the parameter that names the kernel
    for text in texts.values():
        for m in _DEFINE.finditer(text):
            body = m.group(3)
            if "__global__" not in body:
                continue
            params = [p.strip() for p in m.group(2).split(",")]
            declared, _ = _declared_name(body, body.index("__global__") + len("__global__"))
            if declared in params:
                macros[m.group(1)] = params.index(declared)
    for path, text in texts.items():
        define_spans = [(m.start(), m.end()) for m in _DEFINE.finditer(text)]
        for m in re.finditer(r"\b__global__\b", text):
            if any(a <= m.start() < b for a, b in define_spans):
                continue
            declared, paren = _declared_name(text, m.end())
            if declared == name and _is_definition(text, paren):
                hits.append(GrepHit(path, _line_of(text, m.start()), name))
        for macro, index in macros.items():
            for m in re.finditer(rf"\b{re.escape(macro)}\s*\(([^()]*)\)\s*\(", text):
                args = [a.strip() for a in m.group(1).split(",")]
                if index < len(args) and args[index] == name and _is_definition(text, m.end() - 1):
                    hits.append(GrepHit(path, _line_of(text, m.start()), name, via_macro=macro))
    return hits
