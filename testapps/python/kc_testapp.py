"""Shared by the Python test applications: the report file and the done marker.

The GPU tests need the device addresses of an app's tensors (they move on every run).
When KC_TESTAPP_REPORT names a file, an app writes them there as JSON *before* it
launches the target kernel, so the report exists even when the capturing process exits
right after the capture. When KC_TESTAPP_DONE names a file, the app creates it at its
normal end.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_report(**values) -> None:
    path = os.environ.get("KC_TESTAPP_REPORT")
    if not path:
        return
    out = {}
    for key, value in values.items():
        out[key] = value.data_ptr() if hasattr(value, "data_ptr") else value
    tmp = Path(path + ".tmp")
    tmp.write_text(json.dumps(out, indent=1, sort_keys=True))
    tmp.replace(path)


def mark_done() -> None:
    path = os.environ.get("KC_TESTAPP_DONE")
    if path:
        Path(path).touch()
