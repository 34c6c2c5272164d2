"""Opening a session: a reproducer or a reproducer set, whichever the path holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kerncap.reproducer.sets import is_set
from kerncap.session.session import Session
from kerncap.session.sets import SetSession


def open_session(path: str | Path, **options: Any) -> Session | SetSession:
    """A session on the reproducer, or on the reproducer set, at `path` (`options`:
    device, timeout, server_cmd; compile_worker for a single reproducer)."""
    if is_set(path):
        return SetSession(path, **{k: v for k, v in options.items() if k in ("device", "timeout", "server_cmd")})
    return Session(path, **options)
