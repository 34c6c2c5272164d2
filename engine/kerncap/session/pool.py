"""Open sessions, one per reproducer, for front ends that serve many requests: the MCP
server (an agent's edit → build → validate → time loop) and the GPU workers of `check`
and `sweep` (kerncap.fleet.tasks). The workbench holds its one session itself.

Opening a capture costs the VA reservations and the restore (seconds for big ones); each
later request on the same reproducer costs only the kernel. A pool keeps the replay
servers of up to `max_resident` sessions (least recently used closed first, since each
holds its capture in GPU memory), serializes requests per reproducer, and `kill_all()`
ends every server at once — also mid-request — when its owner goes away.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from kerncap.session.opening import open_session
from kerncap.session.session import Session

T = TypeVar("T")


class SessionPool:
    def __init__(self, *, device: int = 0, max_resident: int = 4, timeout: float | None = None,
                 server_cmd: Sequence[str] | None = None, compile_workers: bool = False):
        """`device`: the GPU ordinal every replay server opens its capture on. `timeout`:
        seconds a request may take before its server is killed (None: no limit).
        `server_cmd`: the replay server command (tests use a stand-in). `compile_workers`:
        sessions of Triton reproducers keep a resident compile worker."""
        if max_resident < 1:
            raise ValueError("max_resident must be >= 1")
        self.device = device
        self.max_resident = max_resident
        self.timeout = timeout
        self.server_cmd = list(server_cmd) if server_cmd else None
        self.compile_workers = compile_workers
        self._sessions: collections.OrderedDict[Path, Session] = collections.OrderedDict()
        self._locks: dict[Path, threading.Lock] = {}
        self._lock = threading.Lock()
        self._closed = False

    @staticmethod
    def key(reproducer: str | Path) -> Path:
        return Path(reproducer).resolve()

    def run(self, reproducer: str | Path, call: Callable[[Session], T]) -> T:
        """`call(session)` with this reproducer's open session, one call at a time per
        reproducer (calls on different reproducers run side by side)."""
        key = self.key(reproducer)
        with self._lock:
            if self._closed:
                raise RuntimeError("the session pool is closed")
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            return call(self._session(key))

    def _session(self, key: Path) -> Session:
        evicted = []
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                session = open_session(key, device=self.device, timeout=self.timeout, server_cmd=self.server_cmd,
                                       compile_worker=self.compile_workers)
                self._sessions[key] = session
                while len(self._sessions) > self.max_resident:
                    evicted.append(self._sessions.popitem(last=False))
            self._sessions.move_to_end(key)
        for old_key, old in evicted:
            # An evicted reproducer may be mid-request in another thread: wait for it.
            with self._locks.setdefault(old_key, threading.Lock()):
                old.close()
        return session

    def close(self, reproducer: str | Path) -> bool:
        """Close this reproducer's session (after its request in flight). True if its
        replay server ran."""
        key = self.key(reproducer)
        with self._lock:
            session = self._sessions.pop(key, None)
        if session is None:
            return False
        with self._locks.setdefault(key, threading.Lock()):
            ran = session.close_replay()
            session.close()
        return ran

    def kill(self, reproducer: str | Path) -> None:
        """Kill this reproducer's replay server now, also mid-request (that request fails;
        the next one starts a fresh server)."""
        with self._lock:
            session = self._sessions.get(self.key(reproducer))
        if session is not None:
            session.kill()

    @property
    def resident(self) -> list[Path]:
        """Reproducers with an open session, least recently used first."""
        with self._lock:
            return list(self._sessions)

    def kill_all(self) -> None:
        """Kill every replay server now (requests in flight fail) and refuse new requests."""
        with self._lock:
            self._closed = True
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for s in sessions:
            s.kill()  # without the sessions' locks: close() would wait for the request in flight
            s.close()

    def close_all(self) -> None:
        """Close every session in order (each after its request in flight)."""
        with self._lock:
            self._closed = True
            items = list(self._sessions.items())
            self._sessions.clear()
        for key, session in items:
            with self._locks.setdefault(key, threading.Lock()):
                session.close()

    def __enter__(self) -> SessionPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close_all()
