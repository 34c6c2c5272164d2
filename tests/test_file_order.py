"""The order test files reach pytest-xdist's workers (tests/conftest.py): slowest first,
by tests/file_costs.json, so that no slow file is handed out last."""

from __future__ import annotations

import json

from conftest import FILE_COSTS, slowest_files_first


def test_the_slowest_files_go_first_and_each_keeps_its_order():
    ids = ["a.py::1", "b.py::1", "a.py::2", "c.py::1", "d.py::1", "b.py::2", "e.py::1"]
    costs = {"a.py": 1.0, "b.py": 9.0, "c.py": 5.0, "d.py": 5.0}  # e.py unlisted: the median, 5.0
    order = [ids[i] for i in slowest_files_first(ids, costs)]
    assert order == ["b.py::1", "b.py::2", "c.py::1", "d.py::1", "e.py::1", "a.py::1", "a.py::2"]
    # no costs: each file's tests together, the files in the order they came
    assert [ids[i] for i in slowest_files_first(ids, {})] == \
        ["a.py::1", "a.py::2", "b.py::1", "b.py::2", "c.py::1", "d.py::1", "e.py::1"]


def test_the_costs_name_test_files_of_this_tree():
    costs = json.loads(FILE_COSTS.read_text())
    assert costs and all(v >= 0 for v in costs.values())
    here = FILE_COSTS.parent.parent
    listed = [f for f in costs if (here / f).is_file()]
    assert len(listed) >= 0.9 * len(costs), sorted(set(costs) - set(listed))
