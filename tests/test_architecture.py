"""The engine's import graph (docs/architecture.md): acyclic, layered, and the engine
never imports the workbench. Every `import` counts, also those inside functions: an
import moved into a function hides a cycle from Python, not from this test."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOTS = {"kerncap": REPO / "engine" / "kerncap", "kerncap_tui": REPO / "kerncap_tui"}

# Lowest first; a module may import its own layer and the layers below it.
LAYERS = [
    ("foundation", ["kerncap", "kerncap.errors", "kerncap.core"]),
    ("reproducer", ["kerncap.reproducer"]),
    ("sources, triton", ["kerncap.sources", "kerncap.triton"]),
    ("replay, recompile", ["kerncap.replay", "kerncap.recompile"]),
    ("prune", ["kerncap.prune"]),
    ("capture", ["kerncap.capture"]),
    ("fleet", ["kerncap.fleet"]),
    ("api", ["kerncap.api"]),
    ("front ends", ["kerncap.__main__", "kerncap.cli", "kerncap.commands", "kerncap.frontends", "kerncap_tui"]),
]


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, root in ROOTS.items():
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            parts = [pkg, *rel.parts]
            if parts[-1] == "__init__":
                parts.pop()
            if "demo" in parts[1:2] and len(parts) > 2:
                continue  # the bundled reproducer's files are data
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module of ours that `name` (a dotted import target) denotes, if any."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str) -> set[str]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for a in node.names:
                # `from kerncap.x import y`: the module kerncap.x.y if there is one, else kerncap.x
                targets.append(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
    return {hit for t in targets if (hit := _resolve(t)) is not None and hit != module}


GRAPH = {m: imports_of(m) for m in MODULES}


def layer_of(module: str) -> int:
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if module == p or module.startswith(p + "."):
                if best is None or len(p) > best[1]:
                    best = (i, len(p))
    assert best is not None, f"{module} belongs to no layer of tests/test_architecture.py"
    return best[0]


def test_every_module_has_a_layer():
    for m in MODULES:
        if m.startswith("kerncap.pyhooks"):
            continue
        layer_of(m)


def _cycles() -> list[list[str]]:
    # Only edges between different modules; an import of a package __init__ by its own
    # submodule (Python initialises the package first) is one too.
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in GRAPH.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            strong(v)
    return out


def test_import_graph_is_acyclic():
    assert _cycles() == [], "import cycles (each list is one strongly connected set of modules)"


def test_layers_import_only_downwards():
    wrong = []
    for m, deps in GRAPH.items():
        if m.startswith("kerncap.pyhooks"):
            continue
        for d in deps:
            if layer_of(d) > layer_of(m):
                wrong.append(f"{m} ({LAYERS[layer_of(m)][0]}) imports {d} ({LAYERS[layer_of(d)][0]})")
    assert wrong == []


def test_engine_never_imports_the_workbench():
    # `kerncap tui` starts the workbench: the CLI front end may, nothing below it.
    bad = [f"{m} -> {d}" for m, deps in GRAPH.items() for d in deps
           if m.startswith("kerncap.") and d.startswith("kerncap_tui") and m != "kerncap.commands.tui"]
    assert bad == []


def test_capture_hooks_are_self_contained():
    """pyhooks run inside the captured app's interpreter, where kerncap may not be importable."""
    bad = [f"{m} -> {d}" for m, deps in GRAPH.items() if m.startswith("kerncap.pyhooks")
           for d in deps if not d.startswith("kerncap.pyhooks")]
    assert bad == []
def test_front_ends_reach_the_engine_only_through_the_api():
    allowed = ("kerncap.api", "kerncap.errors", "kerncap.core", "kerncap.cli", "kerncap.commands", "kerncap.frontends",
               "kerncap_tui")
    bad = []
    for m, deps in GRAPH.items():
        if layer_of(m) != len(LAYERS) - 1:
            continue
        for d in deps:
            if d != "kerncap" and not any(d == a or d.startswith(a + ".") for a in allowed):
                bad.append(f"{m} -> {d}")
    assert bad == []


@pytest.mark.parametrize("root", sorted(ROOTS))
def test_no_lookups_by_module_name(root):
    """No importlib / __import__ of our own modules by string: the graph above sees
    only real imports, and a typo must fail at import time, not on first use."""
    bad = []
    for m, path in MODULES.items():
        if not (m == root or m.startswith(root + ".")) or m.startswith("kerncap.pyhooks"):
            continue
        text = path.read_text()
        if "import_module(" in text or "__import__(" in text:
            bad.append(m)
    allowed = {"kerncap.triton.values"}  # resolves the *app's* Triton JIT globals by name
    assert sorted(set(bad) - allowed) == []
