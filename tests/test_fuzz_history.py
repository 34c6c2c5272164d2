"""Fuzzing history.json (kerncap.reproducer.history), the variant history that travels
with a reproducer: mutations of the demo's real history drawn from its schema (as
tests/test_fuzz.py does for the other files). Every reader — the model the workbench,
`kerncap build` and MCP's build load, `kerncap check`'s best variant and cases,
`kerncap list`'s row — ends in a result or a KerncapError, follows no cubin out of the
reproducer and writes nothing. Counted with the other fuzz cases (tests/conftest.py)."""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import strategies as st
from test_fuzz import DEMO, assert_only_kerncap_errors, counted, fuzz, listing, mutate, no_hang, rewrite

from kerncap.fleet.check import cases_of
from kerncap.reproducer.history import HISTORY_FILE, History, best_variant, summary
from kerncap.reproducer.listing import describe_reproducer
from kerncap.reproducer.schemas import HISTORY_JSON

HISTORY = json.loads((DEMO / HISTORY_FILE).read_text())


@pytest.fixture(scope="module")
def reproducer(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz-history") / "demo"
    shutil.copytree(DEMO, root)
    return root


@fuzz(700, data=st.data())
def test_fuzz_history_json(reproducer, data):
    doc = mutate(data, HISTORY, HISTORY_JSON)
    rewrite(reproducer / HISTORY_FILE, json.dumps(doc))
    before = listing(reproducer)
    with no_hang():
        got = assert_only_kerncap_errors(History.load, reproducer)
        if isinstance(got, History):
            assert all(isinstance(v.id, int) and v.label for v in got.variants)
            got.best_significant()
            for v in got.variants:
                got.speedup(v)
        best = assert_only_kerncap_errors(best_variant, reproducer)
        if best is not None and not isinstance(best, Exception):
            assert (reproducer / best.cubin).resolve().is_relative_to(reproducer.resolve())
        for label, cubin in cases_of(reproducer):
            assert cubin is None or (reproducer / cubin).resolve().is_relative_to(reproducer.resolve()), label
        assert isinstance(summary(reproducer), dict)
        row = describe_reproducer(reproducer)
        assert row["validation"] is None or isinstance(row["validation"], str)
    assert listing(reproducer) == before
    counted("history.json")
