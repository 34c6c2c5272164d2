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
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

import kerncap
from kerncap.errors import AddressUnavailable, KerncapError
from kerncap.replay.protocol import decode, encode, error_to_exception
from kerncap.replay.results import ReplayResult, ValidationResult
from kerncap.reproducer.stored import MARKER, hydrate

STDERR_TAIL_LINES = 40
STDERR_DRAIN_S = 5.0  # how long a dead server's stderr may take to reach EOF (a child may hold it)
# Fresh servers to try when the captured address range is taken in one (see start()).
ADDRESS_ATTEMPTS = 3


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
    ):
        """`timeout`: seconds to wait for one response (None: no limit; on expiry the server
        is killed). `echo_log`: copy the server's log to our stderr as it comes.
        `before_open`: requests sent to each new server before `open` (test hooks)."""
        self.capture_dir = Path(capture_dir)
        self.device = device
        self.timeout = timeout
        self.server_cmd = list(server_cmd or default_server_command())
        self.env = env
        self.echo_log = echo_log
        self.before_open = list(before_open)
        self.info: dict[str, Any] | None = None  # what `open` reported
        self.starts = 0  # servers started so far (restarts = starts - 1)
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue[str | None] | None = None
        self._log: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._stderr_reader: threading.Thread | None = None
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
        return self._proc is not None and self._proc.poll() is None

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
                    self.info = self._send({"op": "open", "capture": str(self.capture_dir), "device": self.device})
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
            proc, self._proc = self._proc, None
            self.info = None
            if proc is None:
                return
            if proc.poll() is None:
                try:
                    proc.stdin.write(encode({"id": -1, "op": "shutdown"}))
                    proc.stdin.flush()
                    proc.stdin.close()
                    proc.wait(timeout=wait)
                except (OSError, ValueError, subprocess.TimeoutExpired):
                    _kill_group(proc)

    def kill(self) -> None:
        """Kill the server (and a tool wrapping it: its process group) now, from any
        thread, without waiting for a request in flight: it then fails as "replay server
        died" and the next request starts a fresh server. No lock: this is how a front end
        whose client went away ends a replay mid-request."""
        proc = self._proc
        if proc is not None:
            _kill_group(proc)

    @property
    def server_pid(self) -> int | None:
        """The process id of the running server, if one runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _spawn(self) -> None:
        self.close()
        env = dict(os.environ if self.env is None else self.env)
        # The server must import this very kerncap package, wherever it was found.
        package_parent = str(Path(kerncap.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
        try:
            # Its own process group: a wrapper (ncu, compute-sanitizer) and the server it
            # starts are killed together (_kill_group).
            proc = subprocess.Popen(self.server_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env, text=True, bufsize=1,
                                    start_new_session=True)
        except OSError as exc:
            raise KerncapError(f"cannot start the replay server {self.server_cmd[0]}: {exc.strerror}",
                               "check the Python installation") from None
        self.starts += 1
        self._proc = proc
        # Each server gets its own log: a reader still draining an old server's stderr
        # cannot mix its lines into the new one's.
        self._log = log = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._lines = lines = queue.Queue()
        threading.Thread(target=self._pump_stdout, args=(proc, lines), daemon=True).start()
        self._stderr_reader = threading.Thread(target=self._pump_stderr, args=(proc, log), daemon=True)
        self._stderr_reader.start()

    @staticmethod
    def _pump_stdout(proc: subprocess.Popen, lines: queue.Queue) -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)  # EOF: the server is gone

    def _pump_stderr(self, proc: subprocess.Popen, log: collections.deque) -> None:
        for line in proc.stderr:
            log.append(line.rstrip("\n"))
            if self.echo_log:
                sys.stderr.write(line)

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
        proc, lines = self._proc, self._lines
        assert proc is not None and lines is not None
        self._next_id += 1
        req["id"] = rid = self._next_id
        op = req["op"]
        try:
            proc.stdin.write(encode(req))
            proc.stdin.flush()
        except (OSError, ValueError):
            raise self._died(op) from None
        while True:
            try:
                line = lines.get(timeout=self.timeout)
            except queue.Empty:
                _kill_group(proc)
                self._proc, self.info = None, None
                raise ServerTimeout(
                    f"replay server did not answer {op} within {self.timeout:g} s; killed it",
                    "the kernel may hang (an endless loop in a variant?); raise the timeout if it is just slow",
                ) from None
            if line is None:
                raise self._died(op)
            try:
                resp = decode(line)
            except ValueError:
                self._log.append(f"(unexpected output) {line.rstrip()}")
                continue
            if resp.get("id") == rid:
                break
        if resp.get("ok"):
            return resp.get("result")
        if resp.get("fatal"):
            self._reap()
        raise error_to_exception(resp)

    def _reap(self) -> None:
        """The server said it is exiting: wait for it and forget it."""
        proc, self._proc, self.info = self._proc, None, None
        if proc is not None:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _kill_group(proc)

    def _died(self, op: str) -> KerncapError:
        proc, reader = self._proc, self._stderr_reader
        self._reap()
        if reader is not None:
            # The server has exited; its last words may still be in the pipe. Without this
            # join the message was built before the reader got them (a test failed 1 in 3).
            reader.join(timeout=STDERR_DRAIN_S)
        status = proc.returncode if proc is not None else None
        how = f"killed by signal {-status}" if status is not None and status < 0 else f"exit status {status}"
        tail = "\n".join(self._log) or "(no output)"
        exc = KerncapError(
            f"replay server died during {op} ({how}); its last output:\n{tail}",
            "the next request starts a fresh server; if it dies again, the capture or the variant crashes it",
        )
        exc.kind = "died"
        return exc

    # -- API -----------------------------------------------------------------------------
    def replay(self, cubin: str | Path | None = None, iterations: int = 20, warmup: int = 3,
               flush_l2: bool = False) -> ReplayResult:
        return ReplayResult.from_dict(self.request(
            "replay", cubin=_path(cubin), iterations=iterations, warmup=warmup, flush_l2=flush_l2))

    def validate(self, cubin: str | Path | None = None, atol: float | None = None, rtol: float | None = None,
                 dtype: str | None = None, dtypes: dict[int, str] | None = None) -> ValidationResult:
        """Byte-exact unless atol/rtol/dtype is given. `dtypes` maps region id -> dtype."""
        return ValidationResult.from_dict(self.request(
            "validate", cubin=_path(cubin), atol=atol, rtol=rtol, dtype=dtype,
            dtypes={str(k): v for k, v in (dtypes or {}).items()}))

    def compare_timing(self, cubins: Sequence[str | Path], *, rounds: int = 30, iterations: int = 10,
                       warmup: int = 2, flush_l2: bool = False, min_seconds: float = 0.0,
                       max_seconds: float = 300.0, confidence: float | None = None):
        """Interleaved timing of the captured cubin and `cubins`, with the speedup of each
        and its bootstrap interval (kerncap.replay.significance)."""
        from kerncap.replay.significance import DEFAULT_CONFIDENCE, analyse

        raw = self.request("time_compare", cubins=[_path(c) for c in cubins], rounds=rounds, iterations=iterations,
                           warmup=warmup, flush_l2=flush_l2, min_seconds=min_seconds, max_seconds=max_seconds)
        return analyse(raw, confidence or DEFAULT_CONFIDENCE)

    def load_variant(self, cubin: str | Path) -> dict[str, int]:
        """Loads a variant (checks it fits the capture) and returns its function attributes."""
        return self.request("load_variant", cubin=_path(cubin))


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to the server's process group (it leads one), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # unkillable (D state): nothing more to do here
        pass


def _path(cubin: str | Path | None) -> str | None:
    return None if cubin is None else str(Path(cubin).resolve())
