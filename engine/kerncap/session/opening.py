"""Opening a session: a reproducer or a reproducer set, whichever the path holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kerncap.reproducer.sets import is_set
from kerncap.session.session import Session
from kerncap.session.sets import SetSession


def holds_reproducer(path: str | Path) -> bool:
    """Whether `path` holds what open_session opens: a reproducer (or its capture/, a
    sequence's among them) or a reproducer set (a cheap look: opening says what is wrong)."""
    p = Path(path)
    return is_set(p) or (p / "capture").is_dir() or (p / "manifest.json").is_file()


def open_session(path: str | Path, **options: Any) -> Session | SetSession:
    """A session on the reproducer, or on the reproducer set, at `path` (`options`:
    device, timeout, server_cmd; compile_worker for a single reproducer)."""
    if is_set(path):
        return SetSession(path, **{k: v for k, v in options.items() if k in ("device", "timeout", "server_cmd")})
    return Session(path, **options)
