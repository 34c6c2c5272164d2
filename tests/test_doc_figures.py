"""The figures the docs quote from bench/doc_figures.py are that script's output now
(issue 47: a typed demo pack size went stale)."""

from __future__ import annotations

from pathlib import Path

from bench_module import load_bench

from kerncap.core.units import human_bytes

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_quotes_the_demo_pack_as_it_is():
    figures = load_bench("doc_figures")
    d = figures.demo_pack()
    quoted = f"packs {human_bytes(d['stored'])} into {human_bytes(d['packed'])}"
    text = " ".join((ROOT / "README.md").read_text().split())
    assert quoted in text, f"README.md should say the demo {quoted} (python3 bench/doc_figures.py --only demo)"

