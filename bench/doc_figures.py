"""Figures the docs cite, computed from this checkout instead of typed (issue 47: typed
test counts and the demo's pack size went stale):

    python3 bench/doc_figures.py                # both
    python3 bench/doc_figures.py --only tests   # the suite's size: collects, runs nothing
    python3 bench/doc_figures.py --only demo    # the bundled demo packed (CPU only, ~1 s)

`tests` collects the whole suite once (no test runs) and counts its tests by marker:
CPU tests (what `python -m pytest` runs; pyproject's addopts deselect the rest), GPU
(`-m gpu`) and native (`-m native`). Skips are decided when a test runs, so they are
not counted here; a run's summary line gives them. `demo` packs
kerncap_tui/demo/reproducer into a temporary file and prints what `kerncap pack` says
(README.md quotes it; tests/test_doc_figures.py keeps that quote true)."""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "kerncap_tui" / "demo" / "reproducer"
sys.path[:0] = [str(ROOT / "engine")]  # this checkout's kerncap, installed or not


def count_tests() -> dict[str, int]:
    """{"cpu": n, "gpu": n, "native": n, "total": n} of the suite as collected now."""
    import pytest

    class Count:
        def __init__(self):
            self.counts = {"cpu": 0, "gpu": 0, "native": 0}

        def pytest_collection_modifyitems(self, items):
            for item in items:
                marks = {m.name for m in item.iter_markers()}
                self.counts["gpu" if "gpu" in marks else "native" if "native" in marks else "cpu"] += 1

    counter = Count()
    said = io.StringIO()
    with contextlib.redirect_stdout(said):  # pytest's listing of every test is not the figure
        status = pytest.main(["--collect-only", "-qq", "-o", "addopts=", "-p", "no:cacheprovider",
                              str(ROOT / "tests")], plugins=[counter])
    if status not in (0, 5):
        raise SystemExit(f"doc_figures: collecting the tests failed (pytest status {status}):\n"
                         f"{said.getvalue()[-3000:]}")
    return {**counter.counts, "total": sum(counter.counts.values())}


def demo_pack() -> dict[str, float]:
    from kerncap import api

    with tempfile.TemporaryDirectory() as tmp:
        packed = api.pack(DEMO, Path(tmp) / "demo.kcap")
    return {"stored": packed.stored, "packed": packed.packed, "ratio": packed.ratio}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="tests,demo", help="tests, demo, or both (comma-separated)")
    only = set(ap.parse_args().only.split(","))
    lines = []
    if "demo" in only:
        from kerncap.core.units import human_bytes

        d = demo_pack()
        lines.append(f"demo pack: {human_bytes(d['stored'])} stored -> {human_bytes(d['packed'])} packed "
                     f"({d['ratio']:.1f}x)")
    if "tests" in only:
        c = count_tests()
        lines.append(f"tests: {c['cpu']} CPU (python -m pytest), {c['gpu']} GPU (-m gpu), "
                     f"{c['native']} native (-m native); {c['total']} in all")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
