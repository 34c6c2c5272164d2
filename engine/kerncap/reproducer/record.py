"""reproducer.json: what the engine added to a capture (sources, notes, the prune
verdict), read against its schema (kerncap.reproducer.schemas.REPRODUCER_JSON)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kerncap.core.schema import check
from kerncap.reproducer.format import read_json
from kerncap.reproducer.schemas import REPRODUCER_JSON

RECORD = "reproducer.json"
MAX_RECORD_BYTES = 64 << 20


def read_record(reproducer: str | Path) -> dict[str, Any]:
    """The reproducer's record, checked; {} when it has none (a bare capture directory)."""
    path = Path(reproducer) / RECORD
    if not path.exists() and not path.is_symlink():
        return {}
    data = read_json(path, MAX_RECORD_BYTES, "", "restore it from a copy of the reproducer, or extract again")
    check(data, REPRODUCER_JSON, path, "restore it from a copy of the reproducer, or extract again")
    return data


def sources_kind(reproducer: str | Path) -> str | None:
    """"cuda", "triton", "none" — or None when the record names no sources."""
    return (read_record(reproducer).get("sources") or {}).get("kind")
