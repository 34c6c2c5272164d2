"""Writing a report file (baseline, JUnit XML) whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

from kerncap.errors import KerncapError


def write_atomic(path: str | os.PathLike, data: bytes, what: str, option: str) -> Path:
    """Write `data` to a temp file beside `path` and rename it into place; on failure one
    error naming `what` and the `option` that chose the path, and no temp file left."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise KerncapError(f"cannot write {what} {path} ({exc.strerror or exc})",
                           f"choose a writable {option} path") from None
    return path
