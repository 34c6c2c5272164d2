"""The figures the docs quote from bench/doc_figures.py are that script's output now
(issue 47: a typed demo pack size went stale)."""

from __future__ import annotations

import re
from pathlib import Path

from bench_module import load_bench

from kerncap.core.units import human_bytes

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_quotes_the_demo_pack_as_it_is():
    """The stored size exactly; the packed size within 1 %: a pack records where it was
    made and each file's mtime, so a clone elsewhere (CI's) compresses a few hundred
    bytes differently (51.9 KiB here, 52.1 KiB from another checkout of the same tree)."""
    figures = load_bench("doc_figures")
    d = figures.demo_pack()
    said = f"packs {human_bytes(d['stored'])} into {human_bytes(d['packed'])}"
    text = " ".join((ROOT / "README.md").read_text().split())
    m = re.search(r"packs (\S+ \S+) into ([\d.]+) KiB", text)
    assert m, f"README.md should say the demo {said} (python3 bench/doc_figures.py --only demo)"
    assert m.group(1) == human_bytes(d["stored"]), f"README.md should say the demo {said}"
    assert abs(float(m.group(2)) * 1024 - d["packed"]) <= 0.01 * d["packed"], \
        f"README.md should say the demo {said} (python3 bench/doc_figures.py --only demo)"
