"""Turning the snapshot of the kernel's module into an editable `source/kernel.py`.

The module is usually the app's own script: importing it as-is could run the app. So
top-level statements that do work (calls, loops, `if __name__ == "__main__":`, ...) are
blanked out, while imports, definitions and constant assignments stay. Blanked lines
stay as empty lines, so line numbers in compiler messages match the original file.
"""

from __future__ import annotations

import ast

# Calls an assignment may make and still be a definition (constants, Triton configs).
_SAFE_CALL_ROOTS = {"int", "float", "bool", "str", "tuple", "list", "dict", "set", "frozenset", "range", "len", "min", "max"}
_SAFE_CALL_LEAVES = {"constexpr", "Config", "dtype", "cdiv", "next_power_of_2", "namedtuple", "field"}


def _dotted_root_and_leaf(func: ast.expr) -> tuple[str | None, str | None]:
    leaf = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    while isinstance(func, ast.Attribute):
        func = func.value
    return (func.id if isinstance(func, ast.Name) else None), leaf


class _Definitions:
    """What a top-level statement may call and still count as a definition."""

    def __init__(self, tree: ast.Module):
        self.triton_names: set[str] = set()
        self.local_functions: set[str] = set()
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                module = node.module if isinstance(node, ast.ImportFrom) else None
                for alias in node.names:
                    source = module or alias.name
                    if source.split(".")[0] == "triton":
                        self.triton_names.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.local_functions.add(node.name)

    def call_ok(self, call: ast.Call) -> bool:
        root, leaf = _dotted_root_and_leaf(call.func)
        return (
            root in _SAFE_CALL_ROOTS
            or leaf in _SAFE_CALL_LEAVES
            or root in self.triton_names
            or (root in self.local_functions and isinstance(call.func, ast.Name))
        )

    def value_ok(self, node: ast.AST | None) -> bool:
        if node is None:
            return True
        return all(self.call_ok(n) for n in ast.walk(node) if isinstance(n, ast.Call)) and not any(
            isinstance(n, (ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr)) for n in ast.walk(node)
        )

    def keep(self, node: ast.stmt) -> bool:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Pass)):
            return True
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            return True  # docstrings
        if isinstance(node, ast.Assign):
            return self.value_ok(node.value) and all(isinstance(t, (ast.Name, ast.Tuple)) for t in node.targets)
        if isinstance(node, ast.AnnAssign):
            return isinstance(node.target, ast.Name) and self.value_ok(node.value)
        if isinstance(node, ast.Try):
            # `try: import x / except ImportError: ...` guards
            blocks = [node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]]
            return all(self.keep(s) for block in blocks for s in block)
        if isinstance(node, ast.If) and not _is_main_guard(node):
            return self.value_ok(node.test) and all(self.keep(s) for s in [*node.body, *node.orelse])
        return False


def _is_main_guard(node: ast.If) -> bool:
    return "__name__" in {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *[d.lineno for d in decorators]])


def sanitize_module(text: str, filename: str = "kernel.py") -> tuple[str, list[tuple[int, int]]]:
    """The module with working statements blanked out, and the (first, last) line
    ranges blanked. A module that does not parse is returned unchanged."""
    try:
        tree = ast.parse(text, filename=filename)
    except SyntaxError:
        return text, []
    rules = _Definitions(tree)
    lines = text.splitlines(keepends=True)
    kept_lines: set[int] = set()
    dropped: list[tuple[int, int]] = []
    for node in tree.body:
        span = (_first_line(node), node.end_lineno or node.lineno)
        if rules.keep(node):
            kept_lines.update(range(span[0], span[1] + 1))
        else:
            dropped.append(span)
    blanked = []
    for first, last in dropped:
        lines_here = [n for n in range(first, last + 1) if n not in kept_lines]  # `a = 1; main()` keeps its line
        for n in lines_here:
            lines[n - 1] = "\n"
        if lines_here:
            blanked.append((lines_here[0], lines_here[-1]))
    return "".join(lines), blanked


def function_only_module(function_source: str, first_line: int | None) -> str:
    """A kernel module built from the function's source alone (the module file was not
    available): the usual Triton imports, then the function at its original line."""
    header = "import triton\nimport triton.language as tl\n"
    pad = max(0, (first_line or 0) - 1 - header.count("\n"))
    return header + "\n" * pad + function_source.rstrip() + "\n"
