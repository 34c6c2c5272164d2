"""The mutation check's list stays applicable: a refactor that moves a mutated snippet
must update tests/mutations.py in the same change, or the check (run in .ci/run) stops
with "the snippet occurs 0 times" after the whole suite passed."""

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("kerncap_mutations", REPO / "tests" / "mutations.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, mod)  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _mutations():
    return _module().MUTATIONS


def test_every_mutation_applies_once_and_names_tests_that_exist():
    stale = []
    for m in _mutations():
        count = (REPO / m.path).read_text().count(m.old)
        if count != 1:
            stale.append(f"{m.name}: its snippet occurs {count} times in {m.path}")
        for arg in m.tests:
            if arg.startswith("tests/") and not (REPO / arg.split("::")[0]).exists():
                stale.append(f"{m.name}: names {arg}, which does not exist")
    assert not stale, "\n".join(stale)


def test_mutation_names_are_unique():
    names = [m.name for m in _mutations()]
    assert len(names) == len(set(names))


def test_tests_that_only_skip_here_give_no_verdict():
    """CI has no nvcc and no native build: a mutation whose tests all skip there would pass
    unmutated and mutated alike and read as MISSED, failing CI for a machine's reason. Only
    a summary that counts a passed test lets a mutation be judged."""
    ran = _module()._ran
    assert ran("3 passed in 1.2s") and ran("1 failed, 2 passed, 4 deselected in 0.9s")
    assert ran("2 passed, 10 skipped in 0.4s")
    assert not ran("10 skipped in 0.3s") and not ran("12 deselected in 0.2s")
    assert not ran("no tests ran in 0.1s") and not ran("1 skipped, 3 deselected in 0.2s")
