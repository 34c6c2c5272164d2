"""The engine's import graph (docs/architecture.md): acyclic, layered, every module in a
declared layer, and the engine never imports the workbench. Every `import` counts, also
those inside functions: an import moved into a function hides a cycle from Python, not
from this test. The front ends (the CLI, the workbench, the MCP server) import nothing
of each other and reach the engine only through `kerncap.api` and a few leaf helpers,
and no module starts a module of a higher layer as a process (`python -m`, runpy).

Each rule is a function over a source tree; `test_each_planted_violation_is_caught`
copies the tree, plants the violations a review found passing the old version of this
file, and expects each rule to name them."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Lowest first; a module may import its own layer and the layers below it. A name ending
# in "." is a package (the module and everything under it); any other name is that module
# alone, so no layer catches a package nobody declared.
LAYERS = [
    ("foundation", ["kerncap", "kerncap.errors", "kerncap.core."]),
    ("reproducer", ["kerncap.reproducer."]),
    ("sources, triton", ["kerncap.sources.", "kerncap.triton."]),
    ("replay, recompile", ["kerncap.replay.", "kerncap.recompile."]),
    ("prune", ["kerncap.prune."]),
    ("capture", ["kerncap.capture."]),
    ("session", ["kerncap.session."]),
    ("fleet", ["kerncap.fleet."]),
    ("api", ["kerncap.api"]),
    ("front ends", ["kerncap.__main__", "kerncap.cli", "kerncap.commands.", "kerncap.frontends.", "kerncap_tui."]),
]
SEPARATE = "kerncap.pyhooks."  # runs inside the captured app's Python; imports nothing of kerncap
# The front ends, each its own: none imports another (a launcher below excepted).
FRONT_ENDS = {"cli": ["kerncap.__main__", "kerncap.cli", "kerncap.commands."], "mcp": ["kerncap.frontends."],
              "workbench": ["kerncap_tui."]}
# `kerncap tui` and `kerncap mcp` start the other front end: the only crossings.
LAUNCHERS = {("kerncap.commands.tui", "kerncap_tui.app"), ("kerncap.commands.mcp", "kerncap.frontends.mcp_server")}
# What a front end may import besides kerncap.api: leaf helpers that hold no engine state.
LEAF_HELPERS = ["kerncap", "kerncap.errors", "kerncap.core.units", "kerncap.core.dtypes", "kerncap.core.fsio"]


def _matches(module: str, name: str) -> bool:
    if name.endswith("."):
        return module == name[:-1] or module.startswith(name)
    return module == name


class Tree:
    """The modules of one source tree (the repository, or a copy with planted faults)."""

    def __init__(self, repo: Path) -> None:
        self.roots = {"kerncap": repo / "engine" / "kerncap", "kerncap_tui": repo / "kerncap_tui"}
        self.modules = self._modules()
        self.graph = {m: self.imports_of(m) for m in self.modules}

    def _modules(self) -> dict[str, Path]:
        out = {}
        for pkg, root in self.roots.items():
            for path in root.rglob("*.py"):
                rel = path.relative_to(root).with_suffix("")
                parts = [pkg, *rel.parts]
                if parts[-1] == "__init__":
                    parts.pop()
                if "demo" in parts[1:2] and len(parts) > 2:
                    continue  # the bundled reproducer's files are data
                out[".".join(parts)] = path
        return out

    def resolve(self, name: str) -> str | None:
        """The module of ours that `name` (a dotted import target) denotes, if any."""
        while name:
            if name in self.modules:
                return name
            name = name.rpartition(".")[0]
        return None

    def tree_of(self, module: str) -> ast.AST:
        path = self.modules[module]
        return ast.parse(path.read_text(), str(path))

    def imports_of(self, module: str) -> set[str]:
        path = self.modules[module]
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: list[str] = []
        for node in ast.walk(self.tree_of(module)):
            if isinstance(node, ast.Import):
                targets += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                for a in node.names:
                    # `from kerncap.x import y`: the module kerncap.x.y if there is one, else kerncap.x
                    targets.append(f"{base}.{a.name}" if f"{base}.{a.name}" in self.modules else base)
        return {hit for t in targets if (hit := self.resolve(t)) is not None and hit != module}

    def layer_of(self, module: str) -> int | None:
        """The layer declaring `module` (the most specific name wins), None when none does."""
        best = None
        for i, (_, names) in enumerate(LAYERS):
            for name in names:
                if _matches(module, name) and (best is None or len(name) > best[1]):
                    best = (i, len(name))
        return None if best is None else best[0]

    def separate(self, module: str) -> bool:
        return _matches(module, SEPARATE)


def front_end_of(module: str) -> str | None:
    return next((f for f, names in FRONT_ENDS.items() if any(_matches(module, n) for n in names)), None)


# -- the rules: each returns what breaks it ----------------------------------------------------


def undeclared(t: Tree) -> list[str]:
    return sorted(m for m in t.modules if not t.separate(m) and t.layer_of(m) is None)


def cycles(t: Tree) -> list[list[str]]:
    # Only edges between different modules; an import of a package __init__ by its own
    # submodule (Python initialises the package first) is one too.
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in t.graph.get(v, ()):
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

    for v in sorted(t.graph):
        if v not in index:
            strong(v)
    return out


def upward_imports(t: Tree) -> list[str]:
    wrong = []
    for m, deps in t.graph.items():
        if t.separate(m) or t.layer_of(m) is None:
            continue
        for d in deps:
            ld = t.layer_of(d)
            if ld is not None and ld > t.layer_of(m):
                wrong.append(f"{m} ({LAYERS[t.layer_of(m)][0]}) imports {d} ({LAYERS[ld][0]})")
    return sorted(wrong)


def engine_imports_workbench(t: Tree) -> list[str]:
    # `kerncap tui` starts the workbench: the CLI front end may, nothing below it.
    return sorted(f"{m} -> {d}" for m, deps in t.graph.items() for d in deps
                  if m.startswith("kerncap.") and d.startswith("kerncap_tui") and (m, d) not in LAUNCHERS)


def hooks_import_kerncap(t: Tree) -> list[str]:
    """pyhooks run inside the captured app's interpreter, where kerncap may not be importable."""
    return sorted(f"{m} -> {d}" for m, deps in t.graph.items() if t.separate(m) for d in deps if not t.separate(d))


def front_ends_cross(t: Tree) -> list[str]:
    """A front end imports no other front end (only the launchers start one)."""
    bad = []
    for m, deps in t.graph.items():
        mine = front_end_of(m)
        for d in deps:
            other = front_end_of(d)
            if mine and other and other != mine and (m, d) not in LAUNCHERS:
                bad.append(f"{m} ({mine}) -> {d} ({other})")
    return sorted(bad)


def front_ends_reach_past_the_api(t: Tree) -> list[str]:
    """Below the front ends, a front end imports kerncap.api and the leaf helpers only."""
    bad = []
    for m, deps in t.graph.items():
        if front_end_of(m) is None:
            continue
        for d in deps:
            if front_end_of(d) is None and d != "kerncap.api" and not any(_matches(d, h) for h in LEAF_HELPERS):
                bad.append(f"{m} -> {d}")
    return sorted(bad)


_DASH_M = re.compile(r"-m\s+(kerncap[\w.]*)")


def launches(t: Tree) -> list[str]:
    """No module starts another layer's module as a process or through runpy: a launch is
    an import the graph cannot see. `python -m X` of the module's own layer is fine (the
    replay server, the Triton worker); runpy is never needed."""
    bad = []
    for m in t.modules:
        if t.separate(m):
            continue
        started = []
        for node in ast.walk(t.tree_of(m)):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
                if "runpy" in names:
                    bad.append(f"{m} imports runpy")
            elif isinstance(node, (ast.List, ast.Tuple)):
                items = node.elts
                for a, b in zip(items, items[1:]):
                    if isinstance(a, ast.Constant) and a.value == "-m" and isinstance(b, ast.Constant) \
                            and isinstance(b.value, str):
                        started.append(b.value)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" not in node.value:
                started += _DASH_M.findall(node.value)  # "python -m kerncap_tui" in a command string
        for target in started:
            hit = t.resolve(target)
            if hit is None:
                continue
            lm, lt = t.layer_of(m), t.layer_of(hit)
            if (m, hit) in LAUNCHERS:
                continue
            if lt is None or lm is None or lt != lm or front_end_of(hit) not in (None, front_end_of(m)):
                bad.append(f"{m} starts {hit} as a process")
    return sorted(set(bad))


def lookups_by_name(t: Tree, root: str) -> list[str]:
    """No importlib / __import__ of our own modules by string: the graph above sees only
    real imports, and a typo must fail at import time, not on first use."""
    bad = []
    for m, path in t.modules.items():
        if not (m == root or m.startswith(root + ".")) or t.separate(m):
            continue
        text = path.read_text()
        if "import_module(" in text or "__import__(" in text:
            bad.append(m)
    allowed = {"kerncap.triton.values"}  # resolves the *app's* Triton JIT globals by name
    return sorted(set(bad) - allowed)


RULES = {
    "undeclared": undeclared, "cycles": cycles, "upward": upward_imports, "workbench": engine_imports_workbench,
    "hooks": hooks_import_kerncap, "front-ends-cross": front_ends_cross, "past-the-api": front_ends_reach_past_the_api,
    "launches": launches,
}

TREE = Tree(REPO)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_repository_keeps_every_rule(rule):
    assert RULES[rule](TREE) == []


@pytest.mark.parametrize("root", ["kerncap", "kerncap_tui"])
def test_no_lookups_by_module_name(root):
    assert lookups_by_name(TREE, root) == []


# Each fault once passed this file's previous version (issue 28); the rules must name it.
PLANTS = [
    ("front-ends-cross", "kerncap_tui/planted.py", "from kerncap.commands import replay\n", "kerncap_tui.planted"),
    ("past-the-api", "kerncap_tui/planted.py", "from kerncap.core import stack\n", "kerncap.core.stack"),
    ("launches", "engine/kerncap/replay/planted.py", "import runpy\nrunpy.run_module('kerncap_tui')\n",
     "imports runpy"),
    ("launches", "engine/kerncap/replay/planted.py",
     "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'kerncap_tui'])\n", "starts kerncap_tui"),
    ("launches", "engine/kerncap/fleet/planted.py", "import os\nos.system('python -m kerncap_tui /tmp/r')\n",
     "starts kerncap_tui"),
    ("undeclared", "engine/kerncap/newthing/__init__.py", '"""a package no layer names"""\n', "kerncap.newthing"),
    ("undeclared", "engine/kerncap/newthing/mod.py", "from kerncap import errors\n", "kerncap.newthing.mod"),
    ("upward", "engine/kerncap/replay/planted.py", "from kerncap.session import session\n", "kerncap.session"),
]


@pytest.fixture(scope="module")
def copy_of_the_tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("planted")
    for part in ("engine/kerncap", "kerncap_tui"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__", "demo"))
    return root


@pytest.mark.parametrize("rule,path,text,named", PLANTS, ids=[f"{r}:{p}" for r, p, _, _ in PLANTS])
def test_each_planted_violation_is_caught(copy_of_the_tree, rule, path, text, named):
    planted = copy_of_the_tree / path
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(text)
    try:
        tree = Tree(copy_of_the_tree)
        found = RULES[rule](tree)
        assert any(named in str(x) for x in found), (rule, found)
    finally:
        planted.unlink()
        if planted.parent.name == "newthing" and not any(planted.parent.iterdir()):
            planted.parent.rmdir()
