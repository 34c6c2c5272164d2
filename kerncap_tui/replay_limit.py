"""How long one replay request of the workbench may take. A variant that never ends
must not freeze the live loop: past the limit its replay server is killed, the build is
reported failed, and the next request starts a fresh server (docs/tui.md)."""

from __future__ import annotations

import os
from pathlib import Path

from kerncap import api
from kerncap.errors import KerncapError

REPLAY_TIMEOUT_ENV = "KERNCAP_REPLAY_TIMEOUT"


def replay_timeout() -> float:
    """Seconds one replay request may take ($KERNCAP_REPLAY_TIMEOUT, else 300)."""
    text = os.environ.get(REPLAY_TIMEOUT_ENV, "")
    try:
        # else the one default of every front end (read here: the options import the engine)
        value = float(text) if text else api.options.REPLAY_TIMEOUT.default
    except ValueError:
        raise KerncapError(f"{REPLAY_TIMEOUT_ENV}={text!r} is not a number of seconds",
                           f"e.g. {REPLAY_TIMEOUT_ENV}=120") from None
    if not value > 0:
        raise KerncapError(f"{REPLAY_TIMEOUT_ENV}={text!r} must be more than 0 seconds", f"e.g. {REPLAY_TIMEOUT_ENV}=120")
    return value


def open_session(root: Path, **options):
    """The workbench's session on `root`, its replay requests bounded by replay_timeout()."""
    return api.open_session(root, replay_timeout=replay_timeout(), **options)
