"""The repository's import graph (docs/architecture.md): acyclic (module by module and
package by package), layered, every module in a declared layer and every top-level
directory with Python declared, and the engine never imports the workbench. Every
`import` counts, also those inside functions: an import moved into a function hides a
cycle from Python, not from this test. The front ends (the CLI, the workbench, the MCP
server, the benchmarks, and any top-level package not declared otherwise) import nothing
of each other, reach the engine only through `kerncap.api` and a few leaf helpers and
none of their private names, and never run the `kerncap` command; no module looks a
module up by name (importlib, __import__, pkgutil, runpy) or starts a module of another
layer as a process (`python -m`, `-mX`). In `native/`, capture and replay include only
themselves and common, common only itself.

Each rule is a function over a source tree; `test_each_planted_violation_is_caught`
copies the tree, plants the violations reviews found passing earlier versions of this
file (issues 28 and 45), and expects each rule to name them."""

from __future__ import annotations

import ast
import fnmatch
import functools
import os
import re
import shutil
from pathlib import Path, PurePosixPath

import pytest

REPO = Path(__file__).resolve().parent.parent

# Every top-level directory holding Python, and what it is. engine/<pkg>/ is the
# installed package <pkg> (pyproject's wheel.packages); only kerncap is declared there.
TOP_LEVEL = {
    "kerncap": "the engine (engine/kerncap), its CLI and MCP front ends",
    "kerncap_tui": "the workbench (a front end)",
    "screenshots": "the workbench's screenshot script (part of the workbench front end)",
    "bench": "the benchmarks (a front end)",
    "tests": "the tests: may import anything; nothing imports them",
    "testapps": "the apps kerncap captures: import nothing of kerncap",
}
EXEMPT = {"tests"}  # registered (so an import of them is seen), not checked

# Lowest first; a module may import its own layer and the layers below it. A name ending
# in "." is a package (the module and everything under it); any other name is that module
# alone, so no layer catches a package nobody declared.
LAYERS = [
    ("foundation", ["kerncap", "kerncap.errors", "kerncap.core."]),
    ("reproducer", ["kerncap.reproducer."]),
    ("sources, triton", ["kerncap.sources.", "kerncap.triton."]),
    ("recompile", ["kerncap.recompile."]),
    ("replay", ["kerncap.replay."]),
    ("prune", ["kerncap.prune."]),
    ("capture", ["kerncap.capture."]),
    ("session", ["kerncap.session."]),
    ("fleet", ["kerncap.fleet."]),
    ("api", ["kerncap.api"]),
    ("front ends", ["kerncap.__main__", "kerncap.cli", "kerncap.commands.", "kerncap.frontends.", "kerncap_tui.",
                    "screenshots.", "bench."]),
]
SEPARATE = "kerncap.pyhooks."  # runs inside the captured app's Python; imports nothing of kerncap
# The front ends, each its own: none imports another (a launcher below excepted). A module
# of an undeclared top-level package counts as a front end of its own.
FRONT_ENDS = {"cli": ["kerncap.__main__", "kerncap.cli", "kerncap.commands."], "mcp": ["kerncap.frontends."],
              "workbench": ["kerncap_tui.", "screenshots."], "bench": ["bench."]}
# What every front end may import of the front-end layer: the renderer of the request
# records' options (argparse, MCP tool schemas) and the declaration of the verbs on an open
# reproducer it renders (the CLI's commands, MCP's tools). They are a front end of their
# own (they reach the engine through kerncap.api only) that imports no other front end.
SHARED = {"rendering": ["kerncap.frontends.render", "kerncap.frontends.verbs"]}
# `kerncap tui` and `kerncap mcp` start the other front end: the only crossings.
LAUNCHERS = {("kerncap.commands.tui", "kerncap_tui.app"), ("kerncap.commands.mcp", "kerncap.frontends.mcp_server")}
# What a front end may import besides kerncap.api: leaf helpers that hold no engine state.
LEAF_HELPERS = ["kerncap", "kerncap.errors", "kerncap.core.units", "kerncap.core.dtypes", "kerncap.core.fsio"]
# The benchmarks measure pieces below the API (a replay client, an extraction, the
# workbench's app): these, and only these, they may import. The list only shrinks
# (test_bench_reaches_are_all_used); a new reach goes through kerncap.api.
BENCH_REACHES = {
    "kerncap.capture.extract", "kerncap.capture.profile", "kerncap.core.native", "kerncap.prune.pruner",
    "kerncap.recompile", "kerncap.replay.client", "kerncap.replay.ncu", "kerncap.reproducer.format",
    "kerncap.reproducer.store", "kerncap.reproducer.stored", "kerncap.sources", "kerncap.sources.cubin",
    "kerncap.sources.includes", "kerncap.triton.worker", "kerncap_tui.app", "kerncap_tui.demo",
    "kerncap_tui.widgets.mismatch_pane",
}
# Modules that may run the `kerncap` command: the CLI itself, and the benchmarks that time
# what a user types.
CLI_RUNNERS = ["kerncap.__main__", "kerncap.cli", "kerncap.commands.", "bench."]
# Lookups by name that are not of our modules.
NAME_LOOKUPS = {"kerncap.triton.values": "resolves the *app's* Triton JIT globals by name",
                "kerncap.triton.pinned": "loads a reproducer's source/kernel.py by path"}
# native/: what each component may include (common is included by both, never the other way).
NATIVE = {"capture": {"capture", "common"}, "replay": {"replay", "common"}, "common": {"common"}}


def _matches(module: str, name: str) -> bool:
    if name.endswith("."):
        return module == name[:-1] or module.startswith(name)
    return module == name


def _top(module: str) -> str:
    return module.partition(".")[0]


@functools.lru_cache(maxsize=None)
def _parse(text: str) -> ast.AST:
    return ast.parse(text)  # keyed by text: the planted copies reuse the repository's parses


@functools.lru_cache(maxsize=None)
def _raw_imports(text: str) -> tuple[tuple[str | None, int, tuple[str, ...]], ...]:
    """Every import statement of a source as (module, level, names), module None for a plain
    `import`: walked once per text, as parsed once. The planted copies rebuild the import
    graph 42 times, and the walk was 90 % of a rebuild (issue 44)."""
    out = []
    for node in ast.walk(_parse(text)):
        if isinstance(node, ast.Import):
            out.append((None, 0, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.ImportFrom):
            out.append((node.module or "", node.level, tuple(a.name for a in node.names)))
    return tuple(out)


def _ignore_patterns(repo: Path) -> list[str]:
    path = repo / ".gitignore"
    lines = path.read_text().splitlines() if path.is_file() else []
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith(("#", "!"))]


def _ignored(rel: PurePosixPath, patterns: list[str], directory: bool = False) -> bool:
    """What git would not track: .gitignore's patterns (anchored ones on a path prefix,
    the others on any component), dot-directories and __pycache__."""
    parts = rel.parts
    if any(p.startswith(".") or p == "__pycache__" for p in parts):
        return True
    for pat in patterns:
        dir_only, anchored = pat.endswith("/"), "/" in pat.rstrip("/")
        core = pat.strip("/")
        ends = range(1, len(parts) + (1 if directory or not dir_only else 0))
        for k in ends:
            if anchored and fnmatch.fnmatch("/".join(parts[:k]), core):
                return True
            if not anchored and fnmatch.fnmatch(parts[k - 1], core):
                return True
    return False


def _files(root: Path, patterns: list[str], suffix: str) -> list[Path]:
    """The files under `root` ending in `suffix` that git would track (ignored directories
    are not entered: build/ and bench/old-*/ hold whole other trees)."""
    out = []
    for here, dirs, files in os.walk(root):
        rel = PurePosixPath(Path(here).relative_to(root).as_posix())
        dirs[:] = sorted(d for d in dirs if not _ignored(rel / d, patterns, directory=True))
        out += [Path(here, f) for f in sorted(files) if f.endswith(suffix) and not _ignored(rel / f, patterns)]
    return out


class Tree:
    """The modules of one source tree (the repository, or a copy with planted faults)."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.modules = self._modules()
        self.graph = {m: self.imports_of(m) for m in self.modules if _top(m) not in EXEMPT}

    def _modules(self) -> dict[str, Path]:
        out = {}
        patterns = _ignore_patterns(self.repo)
        for path in _files(self.repo, patterns, ".py"):
            rel = PurePosixPath(path.relative_to(self.repo).as_posix())
            parts = list(rel.with_suffix("").parts)
            if parts[0] == "engine":  # engine/<pkg>/...: the installed package <pkg>
                parts = parts[1:]
            if len(parts) < 2 and parts[0] != "__init__":
                parts = ["<top>", *parts]  # a script at the top (of the repository or engine/)
            if parts[-1] == "__init__":
                parts.pop()
            if parts[:2] == ["kerncap_tui", "demo"] and len(parts) > 2:
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
        return _parse(self.modules[module].read_text())

    def imports_of(self, module: str) -> set[str]:
        path = self.modules[module]
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: list[str] = []
        for base, level, names in _raw_imports(path.read_text()):
            if base is None:  # `import a, b`
                targets += names
                continue
            if level:
                anchor = package.split(".")[: len(package.split(".")) - level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for name in names:
                # `from kerncap.x import y`: the module kerncap.x.y if there is one, else kerncap.x
                targets.append(f"{base}.{name}" if f"{base}.{name}" in self.modules else base)
        out = set()
        for target in targets:
            # a script's plain `import common` is its sibling (bench/common.py)
            sibling = f"{package}.{target}"
            if _top(module) not in ("kerncap", "kerncap_tui") and f"{package}.{target.partition('.')[0]}" in self.modules:
                target = sibling
            hit = self.resolve(target)
            if hit is not None and hit != module:
                out.add(hit)
        return out

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

    def checked(self) -> list[str]:
        """The modules the rules hold to: not the tests, not the captured apps, not pyhooks."""
        return [m for m in self.graph if _top(m) != "testapps" and not self.separate(m)]


def front_end_of(module: str) -> str | None:
    hit = next((f for f, names in [*SHARED.items(), *FRONT_ENDS.items()] if any(_matches(module, n) for n in names)),
               None)
    if hit is None and _top(module) not in TOP_LEVEL:
        return _top(module)  # an undeclared top-level package: a front end of its own
    return hit


def package_of(module: str) -> str:
    """kerncap's packages and top-level modules (kerncap.replay, kerncap.api), else the
    top-level package (kerncap_tui, bench)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "kerncap" else parts[0]


# -- the rules: each returns what breaks it ----------------------------------------------------


def undeclared(t: Tree) -> list[str]:
    tops = sorted({f"top-level package {_top(m)}" for m in t.modules if _top(m) not in TOP_LEVEL})
    mods = [m for m in t.modules if _top(m) not in EXEMPT | {"testapps"} and not t.separate(m) and t.layer_of(m) is None]
    return tops + sorted(mods)


def _strong_components(graph: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def cycles(t: Tree) -> list[list[str]]:
    # Only edges between different modules; an import of a package __init__ by its own
    # submodule (Python initialises the package first) is one too.
    return _strong_components(t.graph)


def package_cycles(t: Tree) -> list[list[str]]:
    """Packages importing each other in a ring, also when no module cycle does (replay
    used recompile's module ids, recompile replay's C++ type parser): two layers declared
    as one hide it from `upward`."""
    graph: dict[str, set[str]] = {}
    for m, deps in t.graph.items():
        graph.setdefault(package_of(m), set()).update(package_of(d) for d in deps if package_of(d) != package_of(m))
    return _strong_components(graph)


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
                  if _top(m) == "kerncap" and _top(d) == "kerncap_tui" and (m, d) not in LAUNCHERS)


def imports_outsiders(t: Tree) -> list[str]:
    """Nothing imports the captured apps or the benchmarks from outside them, nor the tests
    (whose GPU helpers the benchmarks share), and the captured apps import nothing of
    kerncap but its hooks."""
    bad = [f"{m} -> {d}" for m, deps in t.graph.items() for d in deps if _top(d) != _top(m)
           and (_top(d) in ("testapps", "bench") or (_top(d) == "tests" and _top(m) != "bench"))]
    bad += [f"{m} -> {d}" for m, deps in t.graph.items() if _top(m) == "testapps" for d in deps
            if _top(d) == "kerncap" and not t.separate(d)]
    return sorted(bad)


def hooks_import_kerncap(t: Tree) -> list[str]:
    """pyhooks run inside the captured app's interpreter, where kerncap may not be importable."""
    return sorted(f"{m} -> {d}" for m, deps in t.graph.items() if t.separate(m) for d in deps if not t.separate(d))


def _bench_may(m: str, d: str) -> bool:
    return front_end_of(m) == "bench" and d in BENCH_REACHES


def front_ends_cross(t: Tree) -> list[str]:
    """A front end imports no other front end (only the launchers start one)."""
    bad = []
    for m in t.checked():
        mine = front_end_of(m)
        for d in t.graph[m]:
            other = front_end_of(d)
            if mine and other and other != mine and other not in SHARED and (m, d) not in LAUNCHERS \
                    and not _bench_may(m, d):
                bad.append(f"{m} ({mine}) -> {d} ({other})")
    return sorted(bad)


def front_ends_reach_past_the_api(t: Tree) -> list[str]:
    """Below the front ends, a front end imports kerncap.api and the leaf helpers only."""
    bad = []
    for m in t.checked():
        if front_end_of(m) is None:
            continue
        for d in t.graph[m]:
            if _top(d) == "kerncap" and front_end_of(d) is None and d != "kerncap.api" \
                    and not any(_matches(d, h) for h in LEAF_HELPERS) and not _bench_may(m, d):
                bad.append(f"{m} -> {d}")
    return sorted(bad)


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_names(t: Tree) -> list[str]:
    """A front end uses no private name of the engine: not `from kerncap.api import _pool`,
    not `api._pool` (the API's typed functions are the contract; a private name is not)."""
    bad = []
    for m in t.checked():
        if front_end_of(m) is None:
            continue
        bound: dict[str, str] = {}  # a local name -> the engine module it is
        tree = t.tree_of(m)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        bound[a.asname] = a.name
                    else:
                        bound[a.name.partition(".")[0]] = a.name.partition(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    target = f"{node.module}.{a.name}"
                    owner = t.resolve(node.module)
                    if owner is None or front_end_of(owner) == front_end_of(m):
                        continue
                    if _private(a.name):
                        bad.append(f"{m} imports {target}")
                    elif t.resolve(target) == target:
                        bound[a.asname or a.name] = target
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                base = _dotted(node.value)
                if base is None:
                    continue
                head, _, rest = base.partition(".")
                if head not in bound:
                    continue
                full = ".".join([bound[head], *([rest] if rest else [])])
                owner = t.resolve(full)
                if owner is not None and front_end_of(owner) != front_end_of(m):
                    bad.append(f"{m} uses {full}.{node.attr}")
    return sorted(set(bad))


_DASH_M = re.compile(r"(?<![\w-])-m\s*(kerncap[\w.]*)")


def launches(t: Tree) -> list[str]:
    """No module starts another layer's module as a process or through runpy: a launch is
    an import the graph cannot see. `python -m X` (or `-mX`) of the module's own layer is
    fine (the replay server, the Triton worker); runpy is never needed."""
    bad = []
    for m in t.checked():
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
                started += _DASH_M.findall(node.value)  # "python -m kerncap_tui", "-mkerncap_tui"
        for target in started:
            hit = t.resolve(target)
            if hit is None:
                continue
            lm, lt = t.layer_of(m), t.layer_of(hit)
            if (m, hit) in LAUNCHERS or (hit == "kerncap" and any(_matches(m, n) for n in CLI_RUNNERS)):
                continue
            if lt is None or lm is None or lt != lm or front_end_of(hit) not in (None, front_end_of(m)):
                bad.append(f"{m} starts {hit} as a process")
    return sorted(set(bad))


_SPAWNERS = {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput", "system", "popen",
             "create_subprocess_exec", "create_subprocess_shell", "split", "which", "JsonLinesChild",
             *(f"{p}{s}" for p in ("exec", "spawn") for s in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe"))}


def _is_kerncap_command(value: object) -> bool:
    return isinstance(value, str) and bool(value.split()) and PurePosixPath(value.split()[0]).name == "kerncap"


def runs_the_cli(t: Tree) -> list[str]:
    """Only the CLI runs the `kerncap` command (and the benchmarks, which time it): a
    front end calls the engine's API, never the command line (`kerncap build`, `python -m
    kerncap`: the latter is also a launch)."""
    commands = {m.rpartition(".")[2] for m in t.modules if m.startswith("kerncap.commands.")}
    bad = set()
    for m in t.checked():
        if any(_matches(m, n) for n in CLI_RUNNERS):
            continue
        for node in ast.walk(t.tree_of(m)):
            if isinstance(node, ast.Call):
                name = (_dotted(node.func) or "").rpartition(".")[2]
                first = node.args[0] if node.args else None
                if name in _SPAWNERS and first is not None:
                    if isinstance(first, (ast.List, ast.Tuple)) and first.elts:
                        first = first.elts[0]
                    if isinstance(first, ast.JoinedStr) and first.values:
                        first = first.values[0]
                    if isinstance(first, ast.Constant) and _is_kerncap_command(first.value):
                        bad.add(f"{m} runs the kerncap command ({name})")
            elif isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) >= 2:
                a, b = node.elts[:2]
                if isinstance(a, ast.Constant) and _is_kerncap_command(a.value) and isinstance(b, ast.Constant) \
                        and isinstance(b.value, str) and (b.value in commands or b.value.startswith("-")):
                    bad.add(f"{m} runs the kerncap command ({a.value} {b.value})")
    return sorted(bad)


_LOOKUP_NAMES = {"import_module", "__import__", "resolve_name", "spec_from_file_location", "SourceFileLoader",
                 "load_module", "exec_module"}


def lookups_by_name(t: Tree) -> list[str]:
    """No importlib / __import__ / pkgutil lookup of a module by string, however it is
    spelled (`from importlib import import_module as im`, `getattr(b, "__import__")`):
    the graph sees only real imports, and a typo must fail at import time, not on first use."""
    bad = set()
    for m in t.checked():
        if m in NAME_LOOKUPS:
            continue
        for node in ast.walk(t.tree_of(m)):
            found = None
            if isinstance(node, ast.alias):
                found = node.name.rpartition(".")[2]
            elif isinstance(node, ast.Attribute):
                found = node.attr
            elif isinstance(node, ast.Name):
                found = node.id
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                found = node.value
            if found in _LOOKUP_NAMES:
                bad.add(f"{m} ({found})")
    return sorted(bad)


_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
_NATIVE_SOURCES = {".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".inc", ".inl"}
_CMAKE_DIR = re.compile(r"(?:\.\./|native/|_DIR\}/)(capture|replay|common)\b")


def _native_component(native: Path, path: Path) -> str:
    try:
        return path.resolve().relative_to(native.resolve()).parts[0]
    except ValueError:
        return "outside native/"


def native_includes(t: Tree) -> list[str]:
    """capture/ and replay/ include their own files and common/'s, common/ only its own:
    `#include "../capture/x.hpp"`, a header only another component has (found through an
    include path that reaches it), or a CMake path into another component all break it."""
    native = t.repo / "native"
    bad = []
    for comp, allowed in NATIVE.items():
        for path in sorted((native / comp).rglob("*")):
            rel = path.relative_to(t.repo).as_posix()
            if not path.is_file():
                continue
            if path.suffix in _NATIVE_SOURCES:
                for name in _INCLUDE.findall(path.read_text(errors="replace")):
                    # where the compiler would look: beside the file, common/ (kc_common's
                    # public directory), then native/ and the other components
                    places = [path.parent, native / "common", native, *(native / c for c in NATIVE)]
                    hit = next((p / name for p in places if (p / name).is_file()), None)
                    if hit is not None and (owner := _native_component(native, hit)) not in allowed:
                        bad.append(f"{rel} includes {name} ({owner})")
            elif path.name == "CMakeLists.txt" or path.suffix == ".cmake":
                for line in path.read_text(errors="replace").splitlines():
                    for other in _CMAKE_DIR.findall(line.split("#", 1)[0]):
                        if other not in allowed:
                            bad.append(f"{rel} reaches {other}/: {line.strip()}")
    top = native / "CMakeLists.txt"
    if top.is_file():  # kc_common's include directories are common/ only
        for line in top.read_text().splitlines():
            if "include_directories" in line and re.search(r"/(capture|replay)\b", line.split("#", 1)[0]):
                bad.append(f"native/CMakeLists.txt: {line.strip()}")
    return sorted(bad)


MAX_FUNCTION_LINES = 80
# Python functions longer than MAX_FUNCTION_LINES (ast: end_lineno - lineno + 1) that are
# still to be split along their seams. The list only shrinks
# (test_allow_lists_only_name_offenders); a new long function fails `long-functions`.
LONG_FUNCTIONS: set[str] = set()  # none left (issue 45: 13 at the start)


def _long_functions(t: Tree) -> list[str]:
    out = []
    for m in t.modules:
        if _top(m) in ("tests", "testapps") or t.separate(m):
            continue
        for node in ast.walk(t.tree_of(m)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                out.append(f"{m}:{node.name}")
    return sorted(out)


def long_functions(t: Tree) -> list[str]:
    """No Python function of the engine, the workbench or the benchmarks over
    MAX_FUNCTION_LINES lines, but those LONG_FUNCTIONS still names."""
    return [f for f in _long_functions(t) if f not in LONG_FUNCTIONS]


# C++ and CUDA functions of native/ (its unit tests aside) over MAX_FUNCTION_LINES lines.
# Eight were listed when the rule came (Snapshotter::run 128 lines, Session::load_state 118,
# LaunchSampler::begin 112, Mapper::map 111, map_pass 110, LaunchSampler::calibrate 99,
# record_graph_launch 95, Session::compare 94); each was split into named steps (issue 45),
# so none may pass the limit now.
NATIVE_LONG_FUNCTIONS: dict[str, int] = {}
# A definition at column 0 (`T name(…` or `T Class::name(…`), its body up to the brace that
# closes it; declarations, macros and types are not functions.
_NATIVE_DEF = re.compile(r'^(?:static |inline |extern "C" |__global__ |__device__ )*[A-Za-z_][\w:<>,\s*&]*?'
                         r'\s[*&]*(?P<name>[A-Za-z_~][\w:~]*)\((?!.*;\s*$)')


def _native_long_functions(t: Tree) -> dict[str, int]:
    out = {}
    for path in sorted((t.repo / "native").rglob("*")):
        if path.suffix not in _NATIVE_SOURCES or "test" in path.relative_to(t.repo).parts or not path.is_file():
            continue
        lines = path.read_text(errors="replace").splitlines()
        i = 0
        while i < len(lines):
            m = _NATIVE_DEF.match(lines[i])
            if m and not lines[i].startswith(("#", "//", "namespace", "struct", "class", "enum", "using", "typedef")):
                j = i
                while j < len(lines) and "{" not in lines[j] and ";" not in lines[j]:
                    j += 1
                if j < len(lines) and lines[j].rstrip().endswith("{"):
                    depth, k = 0, j
                    for k in range(j, len(lines)):
                        depth += lines[k].count("{") - lines[k].count("}")
                        if depth == 0:
                            break
                    if k - i + 1 > MAX_FUNCTION_LINES:
                        out[f"{path.relative_to(t.repo).as_posix()}:{m['name']}"] = k - i + 1
                    i = k
            i += 1
    return out


def native_long_functions(t: Tree) -> list[str]:
    """No native function over MAX_FUNCTION_LINES lines, but those NATIVE_LONG_FUNCTIONS
    names, each no longer than it was."""
    return sorted(f"{f}: {n} lines" for f, n in _native_long_functions(t).items()
                  if n > NATIVE_LONG_FUNCTIONS.get(f, MAX_FUNCTION_LINES))


# The shape of an open reproducer (one dispatch, a sequence, a set) is the session's to
# test: a front end asks it for a verb and the shape refuses what it cannot do.
SHAPE_CHECKS = {"is_set", "is_sequence"}
# Front-end modules that still test shapes, with how many tests each makes (24 in 7
# modules when the rule came, 22, then 16 in 4 once info, extract's text, a sequence's
# recompile, a set's --sanitize and whose sources a call reaches were the engine's to
# decide, then none once the session said where a workbench save lands and what it
# builds, a set's validation report said "set" itself, a set's replay and recompile
# results printed themselves, and MCP took any reproducer or set at the path, each verb
# refusing a set itself); the counts only shrink (test_allow_lists_only_name_offenders).
SHAPE_CHECKERS: dict[str, int] = {}


def _shape_checks(t: Tree) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in t.checked():
        if front_end_of(m) is None:
            continue
        n = 0
        for node in ast.walk(t.tree_of(m)):
            if isinstance(node, ast.Attribute) and node.attr in SHAPE_CHECKS \
                    and (_dotted(node.value) or "").rpartition(".")[2] == "api":
                n += 1  # api.is_set(p), kerncap.api.is_sequence(p); not an anyio Event's is_set()
            elif isinstance(node, ast.Name) and node.id in SHAPE_CHECKS:
                n += 1
            elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) \
                    and node.left.attr == "sequence" and any(isinstance(o, (ast.Is, ast.IsNot)) for o in node.ops):
                n += 1  # `x.sequence is None`
        if n:
            counts[m] = n
    return counts


def shape_checks(t: Tree) -> list[str]:
    """A front end tests no reproducer's shape (is_set, is_sequence, `.sequence is None`)
    beyond what SHAPE_CHECKERS still allows it."""
    return sorted(f"{m} tests shapes {n} time(s)" for m, n in _shape_checks(t).items()
                  if n > SHAPE_CHECKERS.get(m, 0))


RULES = {
    "undeclared": undeclared, "cycles": cycles, "package-cycles": package_cycles, "upward": upward_imports,
    "workbench": engine_imports_workbench, "outsiders": imports_outsiders, "hooks": hooks_import_kerncap,
    "front-ends-cross": front_ends_cross, "past-the-api": front_ends_reach_past_the_api,
    "private-names": private_names, "launches": launches, "runs-the-cli": runs_the_cli,
    "lookups": lookups_by_name, "native-includes": native_includes, "long-functions": long_functions,
    "native-long-functions": native_long_functions, "shape-checks": shape_checks,
}

TREE = Tree(REPO)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_repository_keeps_every_rule(rule):
    assert RULES[rule](TREE) == []


def test_bench_reaches_are_all_used():
    """An entry no benchmark needs any more leaves the list (it only shrinks)."""
    used = {d for m, deps in TREE.graph.items() if front_end_of(m) == "bench" for d in deps}
    assert sorted(BENCH_REACHES - used) == []


def test_allow_lists_only_name_offenders():
    """LONG_FUNCTIONS and SHAPE_CHECKERS only shrink: an entry whose function was split, or
    a count above what the module still does, must leave the list with the fix."""
    assert sorted(set(LONG_FUNCTIONS) - set(_long_functions(TREE))) == []
    native = _native_long_functions(TREE)
    assert {f: n for f, n in NATIVE_LONG_FUNCTIONS.items() if native.get(f) != n} == {}
    found = _shape_checks(TREE)
    assert {m: n for m, n in SHAPE_CHECKERS.items() if found.get(m, 0) != n} == {}


def test_every_checked_package_is_found():
    """The tree the rules read holds what they are about (a wrong root would pass them all)."""
    tops = {_top(m) for m in TREE.modules}
    assert {"kerncap", "kerncap_tui", "bench", "tests"} <= tops
    assert "kerncap.api" in TREE.graph and "kerncap.replay.region_types" in TREE.graph
    assert (REPO / "native" / "replay").is_dir() and (REPO / "native" / "capture").is_dir()


# Each fault once passed a previous version of this file (issues 28 and 45); the rules must
# name it. A plant at an existing path is appended to it (and the file restored).
PLANTS = [
    # issue 45: a native function past the limit (the rule once read Python only)
    ("native-long-functions", "native/capture/planted.cpp",
     "int planted_long(int x) {\n" + "  x += 1;\n" * 85 + "  return x;\n}\n", "planted.cpp:planted_long: 88 lines"),
    ("front-ends-cross", "kerncap_tui/planted.py", "from kerncap.commands import replay\n", "kerncap_tui.planted"),
    ("past-the-api", "kerncap_tui/planted.py", "from kerncap.core import stack\n", "kerncap.core.stack"),
    # the shared renderer is no back door: it imports no front end and nothing below the API
    ("front-ends-cross", "engine/kerncap/frontends/render.py", "from kerncap.commands import replay\n",
     "kerncap.frontends.render (rendering) -> kerncap.commands.replay (cli)"),
    ("past-the-api", "engine/kerncap/frontends/render.py", "from kerncap.session import options\n",
     "kerncap.frontends.render -> kerncap.session.options"),
    ("launches", "engine/kerncap/replay/planted.py", "import runpy\nrunpy.run_module('kerncap_tui')\n",
     "imports runpy"),
    ("launches", "engine/kerncap/replay/planted.py",
     "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'kerncap_tui'])\n", "starts kerncap_tui"),
    ("launches", "engine/kerncap/fleet/planted.py", "import os\nos.system('python -m kerncap_tui /tmp/r')\n",
     "starts kerncap_tui"),
    ("undeclared", "engine/kerncap/newthing/__init__.py", '"""a package no layer names"""\n', "kerncap.newthing"),
    ("undeclared", "engine/kerncap/newthing/mod.py", "from kerncap import errors\n", "kerncap.newthing.mod"),
    ("upward", "engine/kerncap/replay/planted.py", "from kerncap.session import session\n", "kerncap.session"),
    # issue 45 (1): an aliased import_module, and its other spellings
    ("lookups", "engine/kerncap/replay/planted.py",
     "from importlib import import_module as im\nim('kerncap_tui.app')\n", "kerncap.replay.planted"),
    ("lookups", "engine/kerncap/replay/planted.py", "import importlib as il\nil.import_module('kerncap_tui.app')\n",
     "kerncap.replay.planted"),
    ("lookups", "engine/kerncap/replay/planted.py", "import builtins\ngetattr(builtins, '__import__')('kerncap_tui')\n",
     "kerncap.replay.planted"),
    ("lookups", "kerncap_tui/planted.py", "import pkgutil\npkgutil.resolve_name('kerncap.session.session:Session')\n",
     "kerncap_tui.planted"),
    # (2) -mkerncap_tui and "-m kerncap_tui" as one argument
    ("launches", "engine/kerncap/replay/planted.py",
     "import subprocess, sys\nsubprocess.run([sys.executable, '-mkerncap_tui'])\n", "starts kerncap_tui"),
    ("launches", "engine/kerncap/replay/planted.py",
     "import subprocess, sys\nsubprocess.run([sys.executable, '-m kerncap_tui'])\n", "starts kerncap_tui"),
    ("launches", "engine/kerncap/fleet/planted.py", "import os\nos.system(f'python -mkerncap_tui {1}')\n",
     "starts kerncap_tui"),
    # (3) the workbench running the kerncap command
    ("runs-the-cli", "kerncap_tui/planted.py", "import subprocess\nsubprocess.run(['kerncap', 'build', '/tmp/r'])\n",
     "kerncap_tui.planted"),
    ("runs-the-cli", "kerncap_tui/planted.py", "import subprocess\ncmd = ['/usr/bin/kerncap', '--json', 'info']\n",
     "kerncap_tui.planted"),
    ("runs-the-cli", "kerncap_tui/planted.py", "import os\nos.system('kerncap build /tmp/r')\n", "kerncap_tui.planted"),
    ("runs-the-cli", "kerncap_tui/planted.py", "import shutil\nexe = shutil.which('kerncap')\n", "kerncap_tui.planted"),
    ("launches", "kerncap_tui/planted.py",
     "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'kerncap', 'build'])\n", "starts kerncap as"),
    # (4) a front end using a private name of the engine
    ("private-names", "kerncap_tui/planted.py", "from kerncap.api import _pool\n", "kerncap.api._pool"),
    ("private-names", "kerncap_tui/planted.py", "from kerncap import api\napi._pool.run()\n", "kerncap.api._pool"),
    ("private-names", "kerncap_tui/planted.py", "import kerncap.api as a\nx = a._pool\n", "kerncap.api._pool"),
    ("private-names", "kerncap_tui/planted.py", "import kerncap.api\nx = kerncap.api._pool\n", "kerncap.api._pool"),
    # (5) a new top-level package (or a benchmark) importing the session
    ("undeclared", "newpkg/mod.py", "from kerncap.session import session\n", "top-level package newpkg"),
    ("past-the-api", "newpkg/mod.py", "from kerncap.session import session\n", "newpkg.mod -> kerncap.session"),
    ("past-the-api", "engine/kerncap_extra/__init__.py", "from kerncap.session import session\n",
     "kerncap_extra -> kerncap.session"),
    ("past-the-api", "bench/planted.py", "from kerncap.session import session\n", "bench.planted -> kerncap.session"),
    ("outsiders", "engine/kerncap/replay/planted.py", "from bench import common\n", "bench.common"),
    # (6) native: replay including capture, common including replay, an include path into capture
    ("native-includes", "native/replay/planted.cpp", '#include "../capture/config.hpp"\n',
     "native/replay/planted.cpp includes ../capture/config.hpp (capture)"),
    ("native-includes", "native/replay/planted.cpp", '#include "snapshot.hpp"\n', "(capture)"),
    ("native-includes", "native/common/planted.hpp", '#include "session.hpp"\n', "(replay)"),
    ("native-includes", "native/replay/CMakeLists.txt",
     "target_include_directories(_replay PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/../capture)\n", "reaches capture/"),
    # replay and recompile are two layers now, and no two packages import each other
    ("upward", "engine/kerncap/recompile/planted.py", "from kerncap.replay import region_types\n",
     "kerncap.replay.region_types (replay)"),
    ("package-cycles", "engine/kerncap/reproducer/planted.py", "from kerncap.sources import names\n",
     "kerncap.sources"),
    # (issue 45, step 3) a long function anywhere but the tests, and a front end testing shapes
    ("long-functions", "engine/kerncap/replay/planted.py", "def long():\n" + "    x = 1\n" * 80,
     "kerncap.replay.planted:long"),
    ("long-functions", "bench/planted.py", "async def long():\n" + "    x = 1\n" * 80, "bench.planted:long"),
    ("shape-checks", "kerncap_tui/planted.py", "from kerncap import api\napi.is_set('x')\n", "kerncap_tui.planted"),
    ("shape-checks", "engine/kerncap/commands/planted.py", "def f(cap):\n    return cap.sequence is None\n",
     "kerncap.commands.planted"),
    ("shape-checks", "engine/kerncap/commands/info.py", "def g(p):\n    return api.is_sequence(p)\n",
     "kerncap.commands.info tests shapes 1"),
]


def _source_or_dir(path: str, names: list[str]) -> set[str]:
    keep = {".py", ".gitignore", "CMakeLists.txt", *_NATIVE_SOURCES, ".cmake"}
    return {n for n in names if n in ("__pycache__", "demo", "results", "build") or n.startswith("old-")
            or ("." in n and not any(n.endswith(k) for k in keep) and not Path(path, n).is_dir())}


@pytest.fixture(scope="module")
def copy_of_the_tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("planted")
    for part in ("engine/kerncap", "kerncap_tui", "bench", "screenshots", "native"):
        shutil.copytree(REPO / part, root / part, ignore=_source_or_dir)
    shutil.copy(REPO / ".gitignore", root / ".gitignore")
    (root / "kerncap_tui" / "demo").mkdir()
    shutil.copy(REPO / "kerncap_tui" / "demo" / "__init__.py", root / "kerncap_tui" / "demo" / "__init__.py")
    return root


@pytest.mark.parametrize("rule,path,text,named", PLANTS, ids=[f"{r}:{p}" for r, p, _, _ in PLANTS])
def test_each_planted_violation_is_caught(copy_of_the_tree, rule, path, text, named):
    planted = copy_of_the_tree / path
    before = planted.read_text() if planted.exists() else None
    made = [p for p in reversed(planted.parents) if p.is_relative_to(copy_of_the_tree) and not p.exists()]
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text((before or "") + text)
    try:
        found = RULES[rule](Tree(copy_of_the_tree))
        assert any(named in str(x) for x in found), (rule, found)
    finally:
        if before is None:
            planted.unlink()
        else:
            planted.write_text(before)
        for d in reversed(made):
            d.rmdir()


def test_the_copy_keeps_every_rule(copy_of_the_tree):
    """The plants are the only faults: the copy itself passes (so a plant is what is named)."""
    tree = Tree(copy_of_the_tree)
    assert {rule: found for rule in RULES if (found := RULES[rule](tree))} == {}
