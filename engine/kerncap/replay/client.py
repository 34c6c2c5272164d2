"""ReplayClient: the engine's handle on a replay server process.

    with ReplayClient(capture_dir) as rc:
        r = rc.replay(cubin=None, iterations=20, warmup=3, flush_l2=False)
        v = rc.validate(cubin="variant.cubin")

The server (kerncap.replay.server) owns the CUDA context and the restored capture; it is
started on first use and restarted transparently on the next request after it died (a
faulting variant ends it with a sticky CUDA error). The request that hit the failure
raises KerncapError; requests are never retried behind the caller's back.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

import kerncap
from kerncap.core.child import ChildGone, ChildTimeout, JsonLinesChild
from kerncap.errors import AddressUnavailable, KerncapError
from kerncap.replay.protocol import error_to_exception
from kerncap.replay.results import ReplayResult, ValidationResult
from kerncap.reproducer.stored import MARKER, hydrate

STDERR_TAIL_LINES = 40
# Fresh servers to try when the captured address range is taken in one (see start()).
ADDRESS_ATTEMPTS = 3


# Seconds one request may take before the server is killed, in every front end (CLI, MCP,
# the workbench, check/sweep): a variant that never ends is killed the same way everywhere.
# options.REPLAY_TIMEOUT declares it; a timing (time_compare) gets its own max_seconds more.
DEFAULT_TIMEOUT = 300.0


class ServerTimeout(KerncapError):
    """The server did not answer within the client's timeout; it was killed."""


def default_server_command() -> list[str]:
    return [sys.executable, "-m", "kerncap.replay.server"]


class ReplayClient:
    def __init__(
        self,
        capture_dir: str | Path,
        *,
        device: int = 0,
        timeout: float | None = None,
        server_cmd: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        echo_log: bool = False,
        before_open: Sequence[dict[str, Any]] = (),
        sequence_order: str | None = None,
    ):
        """`timeout`: seconds to wait for one response (None: DEFAULT_TIMEOUT; math.inf: no
        limit; on expiry the server is killed). `echo_log`: copy the server's log to our stderr as it comes.
        `before_open`: requests sent to each new server before `open` (test hooks)."""
        self.capture_dir = Path(capture_dir)
        self.device = device
        self.timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        self.server_cmd = list(server_cmd or default_server_command())
        self.env = env
        self.echo_log = echo_log
        self.before_open = list(before_open)
        self.sequence_order = sequence_order  # a sequence capture: streams | serial | graph (docs/sequences.md)
        self.info: dict[str, Any] | None = None  # what `open` reported
        self.starts = 0  # servers started so far (restarts = starts - 1)
        self._child: JsonLinesChild | None = None
        self._log: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._next_id = 0
        self._lock = threading.RLock()

    # -- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> "ReplayClient":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        return self._child is not None and self._child.alive

    def start(self) -> dict[str, Any]:
        """Starts a server (if none is running) and opens the capture in it."""
        with self._lock:
            if self.alive and self.info is not None:
                return self.info
            self._hydrate()
            for attempt in range(1, ADDRESS_ATTEMPTS + 1):
                self._spawn()
                for req in self.before_open:
                    self._send(dict(req))
                try:
                    req = {"op": "open", "capture": str(self.capture_dir), "device": self.device}
                    if self.sequence_order:
                        req["sequence_order"] = self.sequence_order
                    self.info = self._send(req)
                    return self.info
                except AddressUnavailable as exc:
                    # Host mappings (the driver's own reservations among them) land at
                    # random addresses in each new process: a fresh server usually
                    # finds the captured range free.
                    self.close()
                    if attempt == ADDRESS_ATTEMPTS:
                        raise AddressUnavailable(f"{exc.message} (tried {attempt} fresh replay servers)",
                                                 exc.hint) from None
            raise AssertionError("unreachable")

    def _hydrate(self) -> None:
        """The native replay reads blob files: a reproducer whose payloads were moved to
        the store (`kerncap store`) gets them back first (a cheap check otherwise)."""
        root = self.capture_dir
        if (root / "capture" / MARKER).is_file() or (root / MARKER).is_file():
            hydrate(root)

    def close(self, wait: float = 10.0) -> None:
        """Asks the server to shut down; kills it after `wait` seconds (a wrapper such as
        ncu may need longer: it writes its report when the server exits)."""
        with self._lock:
            child, self._child = self._child, None
            self.info = None
            if child is not None:
                child.close({"id": -1, "op": "shutdown"}, wait)

    def kill(self) -> None:
        """Kill the server (and a tool wrapping it: its process group) now, from any
        thread, without waiting for a request in flight: it then fails as "replay server
        died" and the next request starts a fresh server. No lock: this is how a front end
        whose client went away ends a replay mid-request."""
        child = self._child
        if child is not None:
            child.kill()

    @property
    def server_pid(self) -> int | None:
        """The process id of the running server, if one runs."""
        child = self._child
        return child.pid if child is not None and child.alive else None

    def _spawn(self) -> None:
        self.close()
        env = dict(os.environ if self.env is None else self.env)
        # The server must import this very kerncap package, wherever it was found.
        package_parent = str(Path(kerncap.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
        try:
            child = JsonLinesChild(self.server_cmd, env=env, tail_lines=STDERR_TAIL_LINES, echo_stderr=self.echo_log)
        except OSError as exc:
            raise KerncapError(f"cannot start the replay server {self.server_cmd[0]}: {exc.strerror}",
                               "check the Python installation") from None
        self.starts += 1
        self._child = child
        # Each server has its own log: a reader still draining an old server's stderr
        # cannot mix its lines into the new one's.
        self._log = child.log

    @property
    def server_log(self) -> list[str]:
        """The last lines the current (or last) server wrote to stderr."""
        return list(self._log)

    # -- requests ------------------------------------------------------------------------
    def request(self, op: str, **args: Any) -> Any:
        """Sends one request (starting a server when none is alive) and returns its result."""
        with self._lock:
            if not self.alive or self.info is None:
                self.start()
            return self._send({"op": op, **args})

    def _send(self, req: dict[str, Any]) -> Any:
        child = self._child
        assert child is not None
        self._next_id += 1
        req["id"] = rid = self._next_id
        op = req["op"]
        limit = self.timeout
        if op == "time_compare":  # bounded by its own max_seconds, plus what a round may overrun
            limit = max(limit, float(req.get("max_seconds") or 0) + DEFAULT_TIMEOUT)
        try:
            child.send(req)
            while True:
                resp = child.receive(None if limit == float("inf") else limit)
                if resp.get("id") == rid:
                    break
        except ChildTimeout:
            self._child, self.info = None, None
            raise ServerTimeout(
                f"replay server did not answer {op} within {limit:g} s; killed it",
                "the kernel may hang (an endless loop in a variant?); raise the timeout if it is just slow",
            ) from None
        except ChildGone:
            raise self._died(op) from None
        if resp.get("ok"):
            return resp.get("result")
        if resp.get("fatal"):
            self._reap()
        raise error_to_exception(resp)

    def _reap(self) -> None:
        """The server said it is exiting: wait for it and forget it."""
        child, self._child, self.info = self._child, None, None
        if child is not None:
            child.reap(30)

    def _died(self, op: str) -> KerncapError:
        child = self._child
        self._reap()
        status = child.proc.returncode if child is not None else None
        tail = "\n".join(self._log) or "(no output)"
        exc = KerncapError(
            f"replay server died during {op} ({ChildGone(status).how()}); its last output:\n{tail}",
            "the next request starts a fresh server; if it dies again, the capture or the variant crashes it",
        )
        exc.kind = "died"
        return exc

    # -- API -----------------------------------------------------------------------------
    def replay(self, cubin: str | Path | None = None, iterations: int = 20, warmup: int = 3,
               flush_l2: bool = False, per_launch: bool = False, warm_l2: bool = False,
               timer: str = "events") -> ReplayResult:
        """`per_launch` (a sequence): each launch timed too (ReplayResult.launches)."""
        more: dict[str, Any] = {"per_launch": True} if per_launch else {}
        if warm_l2:
            more["warm_l2"] = True
        if timer != "events":
            more["timer"] = timer
        return ReplayResult.from_dict(self.request(
            "replay", cubin=_path(cubin), iterations=iterations, warmup=warmup, flush_l2=flush_l2, **more))

    def sequence_time(self, cubin: str | Path | None = None, iterations: int = 10, warmup: int = 2) -> dict[str, Any]:
        """A sequence's whole time and each launch's (kerncap.replay.sequence_replay.op_sequence_time)."""
        return self.request("sequence_time", cubin=_path(cubin), iterations=iterations, warmup=warmup)

    def localize(self, cubin: str | Path | None, tolerances: dict | None = None) -> dict[str, Any]:
        """The first launch of a sequence after which `cubin`'s state departs from the captured one."""
        return self.request("localize", cubin=_path(cubin), tolerances=tolerances or {})

    def validate(self, cubin: str | Path | None = None, atol: float | None = None, rtol: float | None = None,
                 dtype: str | None = None, dtypes: dict[int, str] | None = None) -> ValidationResult:
        """Byte-exact unless atol/rtol/dtype is given. `dtypes` maps region id -> dtype."""
        return ValidationResult.from_dict(self.request(
            "validate", cubin=_path(cubin), atol=atol, rtol=rtol, dtype=dtype,
            dtypes={str(k): v for k, v in (dtypes or {}).items()}))

    def compare_timing(self, cubins: Sequence[str | Path], *, rounds: int = 30, iterations: int = 10,
                       warmup: int = 2, flush_l2: bool = False, min_seconds: float = 0.0,
                       max_seconds: float = 300.0, confidence: float | None = None,
                       inputs: Sequence[Sequence[dict]] = (), warm_l2: bool = False, timer: str = "events"):
        """Interleaved timing of the captured cubin and `cubins`, with the speedup of each
        and its bootstrap interval (kerncap.replay.significance). `inputs`: the fills of the
        perturbed inputs the timed launches rotate over besides the captured one."""
        from kerncap.replay.significance import DEFAULT_CONFIDENCE, analyse

        raw = self.request("time_compare", cubins=[_path(c) for c in cubins], rounds=rounds, iterations=iterations,
                           warmup=warmup, flush_l2=flush_l2, min_seconds=min_seconds, max_seconds=max_seconds,
                           inputs=[list(f) for f in inputs], **({"warm_l2": True} if warm_l2 else {}),
                           **({"timer": timer} if timer != "events" else {}))
        return analyse(raw, confidence or DEFAULT_CONFIDENCE)

    def load_variant(self, cubin: str | Path) -> dict[str, int]:
        """Loads a variant (checks it fits the capture) and returns its function attributes."""
        return self.request("load_variant", cubin=_path(cubin))


def _path(cubin: str | Path | None) -> str | None:
    return None if cubin is None else str(Path(cubin).resolve())
