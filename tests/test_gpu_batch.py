"""tests/gpu/batch.sh with no argument runs the whole GPU suite: every tests/gpu/test_*.py
in exactly one shard (or alone after them), so a new GPU test file cannot be left out."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_default_batch_names_every_gpu_test_file_once():
    text = (ROOT / "tests" / "gpu" / "batch.sh").read_text()
    default = text[text.index('if [ $# -eq 0 ]; then'):text.index("run_shard() {")]
    named = Counter(re.findall(r"tests/gpu/(test_\w+\.py)", default))
    files = {p.name for p in (ROOT / "tests" / "gpu").glob("test_*.py")}
    assert set(named) == files, f"missing: {sorted(files - set(named))}, unknown: {sorted(set(named) - files)}"
    assert [f for f, n in named.items() if n > 1] == []
