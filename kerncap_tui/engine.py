"""The workbench's replay: one resident replay server per open reproducer, and what a
build reports. Every engine call of the workbench goes through `kerncap.api`."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from kerncap import api
from kerncap.errors import KerncapError, NativeUnavailable

REPLAY_ITERATIONS = 20


def needs_gpu(exc: BaseException) -> bool:
    """True when the failure means "no GPU / no replay core here" rather than a bug."""
    return isinstance(exc, NativeUnavailable)


@dataclass
class Outcome:
    median_ms: float | None
    min_ms: float | None
    spread_pct: float | None
    validation: str          # pass | fail | error | skipped
    detail: str              # one line for the log


class ResidentReplay:
    """One ReplayClient kept open for the app's lifetime (the replay server process owns
    the CUDA context and the VA reservations, which are expensive to redo per build).
    Calls are serialized: a cancelled build may still be finishing when the next starts."""

    def __init__(self, reproducer: Path) -> None:
        self.reproducer = reproducer
        self._client: api.ReplayClient | None = None
        self._lock = threading.Lock()

    def _open(self) -> api.ReplayClient:
        if self._client is None:
            client = api.ReplayClient(self.reproducer)
            client.start()
            self._client = client
        return self._client

    def run(self, cubin: Path | None, validate: bool = True) -> Outcome:
        with self._lock:
            rc = self._open()
            t = rc.replay(cubin=cubin, iterations=REPLAY_ITERATIONS)
            validation, detail = "skipped", ""
            if validate:
                try:
                    v = rc.validate(cubin=cubin)
                    validation = "pass" if v.passed else "fail"
                    if not v.passed:
                        detail = f"{len(v.failures)} region(s) differ from the captured post-state"
                except NativeUnavailable:
                    raise
                except KerncapError as exc:
                    validation, detail = "error", exc.message
            return Outcome(t.median_ms, t.min_ms, t.spread_pct, validation, detail)

    def close(self) -> None:
        # Not under the lock: on hangup the server must go now, even mid-replay (that
        # worker then fails and its result is dropped).
        client, self._client = self._client, None
        if client is not None:
            client.close()

