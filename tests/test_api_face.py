"""kerncap.api is a thin, lazy face (issues 45 and 47): importing it imports none of the
engine, every name it exports resolves to the engine object its TYPE_CHECKING block
names, and it stays small."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

from kerncap import api

API = Path(api.__file__)
MAX_LINES = 275  # 931 before issue 45's thin face; only shrinks
MAX_NAMES = 141  # 179 before
# What a front end's first import of the API may bring of kerncap: leaf helpers only.
LIGHT = {"kerncap", "kerncap.api", "kerncap.errors", "kerncap.core", "kerncap.core.units", "kerncap.core.dtypes",
         "kerncap.core.fsio"}
HEAVY = ("numpy", "zstandard", "mcp", "git", "dask", "elftools", "pydantic")


def _lazy_block() -> list[ast.ImportFrom]:
    tree = ast.parse(API.read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING")
    return block.body


def test_every_exported_name_is_the_engine_object_its_import_names():
    names = set()
    for stmt in _lazy_block():
        module = importlib.import_module(stmt.module)
        for alias in stmt.names:
            bound = alias.asname or alias.name
            assert bound not in names, f"{bound} is imported twice"
            names.add(bound)
            assert getattr(api, bound) is getattr(module, alias.name), bound
    own = {n for n, v in vars(api).items() if getattr(v, "__module__", None) == "kerncap.api" and n[0] != "_"}
    assert not names & own, f"defined and imported: {names & own}"
    assert set(api.__all__) == names | own | {"PathLike"}
    assert len(api.__all__) <= MAX_NAMES, f"{len(api.__all__)} names (at most {MAX_NAMES}): move verbs to Session"


def test_an_unknown_name_is_an_attribute_error():
    try:
        api.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("api.no_such_name resolved")


def test_importing_the_api_the_workbench_and_the_commands_imports_no_engine():
    """The workbench's first frame waits for its imports (bench/first_frame.py), and every
    `kerncap COMMAND` for the command modules': the engine and the heavy libraries are
    imported when the reproducer is opened, or by the one command that runs."""
    probe = ("import sys, kerncap_tui.app, kerncap.cli\n"
             "kerncap.cli.commands()\n"
             "print(' '.join(sorted(m for m in sys.modules if m.startswith('kerncap.') or m == 'kerncap')))\n"
             f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    engine, heavy = (out.splitlines() + ["", ""])[:2]
    front = {"kerncap.cli", "kerncap.commands", "kerncap.frontends", "kerncap.frontends.render",
             "kerncap.frontends.verbs"}
    loaded = {m for m in engine.split() if m not in front and not m.startswith("kerncap.commands.")}
    assert loaded <= LIGHT, sorted(loaded - LIGHT)
    assert heavy == "", heavy


def test_the_api_is_a_thin_face():
    lines = len(API.read_text().splitlines())
    assert lines <= MAX_LINES, f"kerncap/api.py has {lines} lines (at most {MAX_LINES}): put logic in its layer"
