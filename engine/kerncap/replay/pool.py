"""Resident replay servers, one per reproducer, for front ends that serve many requests:
the MCP server (one agent's edit → validate → time loop) and the GPU workers of `check`
and `sweep`.

Opening a capture costs the VA reservations and the restore (seconds for big ones);
each later request on the same reproducer costs only the kernel. A pool keeps up to
`max_resident` servers (least recently used closed first, since each one holds its
capture in GPU memory), serializes requests per reproducer, and `kill_all()` ends every
server at once — also mid-request — when its owner goes away.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from kerncap.replay.client import ReplayClient

T = TypeVar("T")


class ReplayPool:
    def __init__(self, *, device: int = 0, max_resident: int = 4, timeout: float | None = None,
                 server_cmd: Sequence[str] | None = None):
        """`device`: the GPU ordinal every server opens its capture on. `timeout`: seconds a
        request may take before its server is killed (None: no limit). `server_cmd`: the
        replay server command (tests use a stand-in)."""
        if max_resident < 1:
            raise ValueError("max_resident must be >= 1")
        self.device = device
        self.max_resident = max_resident
        self.timeout = timeout
        self.server_cmd = list(server_cmd) if server_cmd else None
        self._clients: collections.OrderedDict[Path, ReplayClient] = collections.OrderedDict()
        self._locks: dict[Path, threading.Lock] = {}
        self._lock = threading.Lock()
        self._closed = False

    @staticmethod
    def key(reproducer: str | Path) -> Path:
        return Path(reproducer).resolve()

    def run(self, reproducer: str | Path, call: Callable[[ReplayClient], T]) -> T:
        """`call(client)` with this reproducer's resident client, one call at a time per
        reproducer (calls on different reproducers run side by side)."""
        key = self.key(reproducer)
        with self._lock:
            if self._closed:
                raise RuntimeError("the replay pool is closed")
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            return call(self._client(key))

    def _client(self, key: Path) -> ReplayClient:
        evicted = []
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = ReplayClient(key, device=self.device, timeout=self.timeout, server_cmd=self.server_cmd)
                self._clients[key] = client
                while len(self._clients) > self.max_resident:
                    old_key, old = self._clients.popitem(last=False)
                    evicted.append((old_key, old))
            self._clients.move_to_end(key)
        for old_key, old in evicted:
            # An evicted reproducer may be mid-request in another thread: wait for it.
            with self._locks.setdefault(old_key, threading.Lock()):
                old.close()
        return client

    def close(self, reproducer: str | Path) -> bool:
        """Shut this reproducer's server down (after its request in flight). True if one ran."""
        key = self.key(reproducer)
        with self._lock:
            client = self._clients.pop(key, None)
        if client is None:
            return False
        with self._locks.setdefault(key, threading.Lock()):
            client.close()
        return True

    def kill(self, reproducer: str | Path) -> None:
        """Kill this reproducer's server now, also mid-request (that request fails; the
        next one starts a fresh server)."""
        with self._lock:
            client = self._clients.get(self.key(reproducer))
        if client is not None:
            client.kill()

    @property
    def resident(self) -> list[Path]:
        """Reproducers with a server started, least recently used first."""
        with self._lock:
            return list(self._clients)

    def kill_all(self) -> None:
        """Kill every server now (requests in flight fail) and refuse new requests."""
        with self._lock:
            self._closed = True
            clients = list(self._clients.values())
            self._clients.clear()
        for c in clients:
            c.kill()  # without the clients' locks: close() would wait for the request in flight

    def close_all(self) -> None:
        """Shut every server down in order (each after its request in flight)."""
        with self._lock:
            self._closed = True
            items = list(self._clients.items())
            self._clients.clear()
        for key, client in items:
            with self._locks.setdefault(key, threading.Lock()):
                client.close()

    def __enter__(self) -> ReplayPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close_all()
