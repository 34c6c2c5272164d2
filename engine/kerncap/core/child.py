"""The one child-process protocol: JSON objects, one per line, over a child's stdin and
stdout; its stderr is kept as a tail of lines for error messages. The replay server
(kerncap.replay.client / server) and the Triton compile worker (kerncap.triton.worker)
both speak it.

Parent side, `JsonLinesChild`: the child leads its own process group (a wrapper such as
ncu or compute-sanitizer and what it starts are killed together), stdout is read by a
thread into a queue so a reply can be awaited with a timeout, and a line that is not
JSON (a stray print that reached the channel anyway) is logged, not fatal.

Child side, `protocol_channel()`: the protocol gets a private copy of fd 1 and fd 1 then
points at stderr, so prints from Python or native code cannot corrupt the channel.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any, TextIO

STDERR_DRAIN_S = 5.0  # how long a dead child's stderr may take to reach EOF (a grandchild may hold it)


def encode(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":")) + "\n"


def decode(line: str) -> dict[str, Any]:
    obj = json.loads(line)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


class ChildGone(Exception):
    """The child exited (or its pipe broke); `returncode` as Popen reports it."""

    def __init__(self, returncode: int | None) -> None:
        super().__init__(returncode)
        self.returncode = returncode

    def how(self) -> str:
        status = self.returncode
        return f"killed by signal {-status}" if status is not None and status < 0 else f"exit status {status}"


class ChildTimeout(Exception):
    """No line came within the timeout; the child was killed."""


class JsonLinesChild:
    """One running child process speaking JSON lines."""

    def __init__(self, argv: Sequence[str], *, env: dict[str, str] | None = None, tail_lines: int = 40,
                 echo_stderr: bool = False) -> None:
        self.argv = list(argv)
        self.log: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._echo = echo_stderr
        # Its own process group (session): killpg() reaches a tool wrapping the child and
        # the process it started; bufsize=1: a reply is readable as soon as it is written.
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, text=True, bufsize=1, errors="replace", start_new_session=True)
        threading.Thread(target=self._pump_stdout, daemon=True, name="kerncap-child-stdout").start()
        self._stderr_reader = threading.Thread(target=self._pump_stderr, daemon=True, name="kerncap-child-stderr")
        self._stderr_reader.start()

    def _pump_stdout(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)  # EOF: the child is gone

    def _pump_stderr(self) -> None:
        for line in self.proc.stderr:
            self.log.append(line.rstrip("\n"))
            if self._echo:
                sys.stderr.write(line)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, obj: dict[str, Any]) -> None:
        """One request; ChildGone when the child can no longer read."""
        try:
            self.proc.stdin.write(encode(obj))
            self.proc.stdin.flush()
        except (OSError, ValueError):
            raise ChildGone(self.proc.poll()) from None

    def receive(self, timeout: float | None = None) -> dict[str, Any]:
        """The child's next JSON object. ChildTimeout (the child is killed) when none comes
        within `timeout` seconds; ChildGone at its end of output."""
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                self.kill()
                raise ChildTimeout() from None
            if line is None:
                self.reap(30)
                raise ChildGone(self.proc.returncode)
            try:
                return decode(line)
            except ValueError:
                self.log.append(f"(unexpected output) {line.rstrip()}")

    def reap(self, wait: float) -> None:
        """Wait for an exiting child (killed after `wait` s) and for its last words on stderr."""
        try:
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.kill()
        # Without this join a message built from the log can miss the child's last lines.
        self._stderr_reader.join(timeout=STDERR_DRAIN_S)

    def close(self, goodbye: dict[str, Any] | None, wait: float = 10.0) -> None:
        """Send `goodbye` (if any), close stdin and wait `wait` s for the child to exit;
        then kill its process group."""
        if self.proc.poll() is not None:
            return
        try:
            if goodbye is not None:
                self.proc.stdin.write(encode(goodbye))
                self.proc.stdin.flush()
            self.proc.stdin.close()
            self.proc.wait(timeout=wait)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self.kill()

    def kill(self) -> None:
        """SIGKILL to the child's process group now (from any thread), then reap it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # unkillable (D state): nothing more to do here
            pass


def protocol_channel() -> TextIO:
    """In the child: a private line-buffered copy of stdout for the protocol; fd 1 (and
    sys.stdout) then write to stderr."""
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out
