"""A resident Triton compile worker: a process that keeps Triton, the kernel module's
imports (torch, the app's helpers) and Triton's per-process state warm, so a save in
the workbench costs only the compile of the edited kernel.

A cold `kerncap recompile` of a Triton reproducer pays, before compiling anything,
for importing Triton and whatever source/kernel.py imports (torch: seconds) and for
Triton's first compile in a process (backend and MLIR set-up, libdevice, the ptxas
version probe). The worker pays those once, when the reproducer is opened: it compiles
the kernel as it is (which also leaves it in Triton's on-disk cache), then answers
recompile requests. It runs in its own process so that the compile does not hold the
workbench's GIL (Triton lowers the kernel in Python) and a kernel module that crashes
at import takes only the worker down; the next request starts a new one.

    w = CompileWorker(reproducer); w.start()      # returns at once; warms up in the child
    result = w.recompile()                        # kerncap.recompile.RecompileResult
    w.close()

Protocol: JSON lines (kerncap.core.child, as the replay server's). The child writes
{"event": "ready", ...} after the warm-up, then one reply per request ({"op":
"recompile", "config": ...} or {"op": "quit"}): {"ok": true, "result": {...}} or
{"ok": false, "message", "hint"}. The worker leads its own process group: killing it
(a hang, closing the workbench) also kills what a kernel module started.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from kerncap.core.child import ChildGone, ChildTimeout, JsonLinesChild, decode, encode, protocol_channel
from kerncap.errors import KerncapError
from kerncap.reproducer.record import sources_kind
from kerncap.reproducer.variants import RecompileResult

STDERR_LINES = 200
WARMUP_TIMEOUT_S = 600.0  # importing torch from a cold disk plus a first compile
REQUEST_TIMEOUT_S = 600.0


def is_triton_reproducer(reproducer: Path) -> bool:
    try:
        return sources_kind(reproducer) == "triton"
    except KerncapError:  # a damaged reproducer.json: recompile names it
        return False


class CompileWorker:
    def __init__(self, reproducer: Path, python: str = sys.executable):
        self.reproducer = Path(reproducer).resolve()
        self.python = python
        self.warmup: dict | None = None  # the "ready" event: {"ok", "seconds", "message"?}
        self._child: JsonLinesChild | None = None
        self._lock = threading.Lock()

    @property
    def _proc(self):
        """The worker process (Popen), if one was started."""
        return self._child.proc if self._child is not None else None

    # -- lifetime ------------------------------------------------------------------------
    def start(self) -> None:
        """Spawns the worker (it warms up on its own); idempotent."""
        with self._lock:
            self._spawn()

    def _spawn(self) -> None:
        if self._child is not None and self._child.alive:
            return
        import kerncap

        env = dict(os.environ)
        engine = str(Path(kerncap.__file__).resolve().parents[1])
        env["PYTHONPATH"] = engine + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        self.warmup = None
        try:
            self._child = JsonLinesChild([self.python, "-m", "kerncap.triton.worker", str(self.reproducer)], env=env,
                                         tail_lines=STDERR_LINES)
        except OSError as exc:
            raise KerncapError(f"cannot start the Triton compile worker ({self.python}): {exc.strerror}",
                               "check the Python environment") from None

    def close(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.close({"op": "quit"}, wait=5)

    def __enter__(self) -> "CompileWorker":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def wait_ready(self) -> dict:
        """Blocks until the warm-up is over; its outcome ({"ok", "seconds", "message"?})."""
        with self._lock:
            self._spawn()
            if self.warmup is None:
                self.warmup = self._read(WARMUP_TIMEOUT_S, "warming up")
            return self.warmup

    # -- requests ------------------------------------------------------------------------
    def recompile(self, config: str | None = None):
        """Like kerncap.recompile.recompile on this reproducer, in the warm worker. Waits
        for the warm-up when it is still running."""
        with self._lock:
            self._spawn()
            if self.warmup is None:
                self.warmup = self._read(WARMUP_TIMEOUT_S, "warming up")  # the ready event
            try:
                self._child.send({"op": "recompile", "config": config})
            except ChildGone:
                raise self._died() from None
            reply = self._read(REQUEST_TIMEOUT_S, "recompiling")
        if not reply.get("ok"):
            raise KerncapError(reply.get("message", "the Triton compile worker failed"), reply.get("hint"))
        r = reply["result"]
        return RecompileResult(cubin=Path(r["cubin"]), seconds=r["seconds"], command=r["command"], log=r["log"],
                               mode=r.get("mode", "triton"), phases=r.get("phases", {}), notes=r.get("notes", []),
                               summary=r.get("summary", ""))

    def _read(self, timeout: float, doing: str) -> dict:
        """The child's next message; kills it when nothing comes within `timeout`."""
        try:
            return self._child.receive(timeout)
        except ChildTimeout:
            self._child = None  # killed (its process group): the next request starts a new worker
            raise KerncapError(f"the Triton compile worker did not answer within {timeout:.0f} s ({doing})",
                               "save again to start a new one; `kerncap recompile DIR` shows what hangs") from None
        except ChildGone:
            raise self._died() from None

    def _died(self) -> KerncapError:
        child, self._child = self._child, None
        code = None
        tail = ""
        if child is not None:
            child.reap(5)
            code = child.proc.returncode
            tail = "\n".join(list(child.log)[-20:])
        return KerncapError(f"the Triton compile worker exited (status {code})" + (f":\n{tail}" if tail else ""),
                            "save again to start a new one; `kerncap recompile DIR` shows the error directly")


# -- the child ------------------------------------------------------------------------------


def _warm(root: Path) -> dict:
    """Compile the kernel as it is now: imports Triton and the kernel module's imports,
    sets Triton up, and leaves this source in its cache."""
    from kerncap.triton import pinned

    start = time.perf_counter()
    try:
        spec = pinned.load_spec(root)
        pinned.compile_pinned(root, spec)
    except KerncapError as exc:  # e.g. the source has an error right now: the worker still serves
        return {"ok": False, "seconds": time.perf_counter() - start, "message": exc.message}
    return {"ok": True, "seconds": time.perf_counter() - start}


def serve(root: Path) -> int:
    channel = protocol_channel()  # whatever the kernel module prints goes to stderr, not into the protocol

    def send(message: dict) -> None:
        channel.write(encode(message))
        channel.flush()

    send({"event": "ready", **_warm(root)})
    from kerncap.triton.recompile import recompile

    for line in sys.stdin:
        try:
            request = decode(line)
        except ValueError:
            send({"ok": False, "message": f"bad request {line.strip()[:200]!r}"})
            continue
        if request.get("op") == "quit":
            return 0
        try:
            r = recompile(root, request.get("config"))
            send({"ok": True, "result": {"cubin": str(r.cubin), "seconds": r.seconds, "command": r.command,
                                         "log": r.log, "mode": getattr(r, "mode", "triton"),
                                         "phases": getattr(r, "phases", {}), "notes": getattr(r, "notes", []),
                                         "summary": getattr(r, "summary", "")}})
        except KerncapError as exc:
            send({"ok": False, "message": exc.message, "hint": exc.hint})
        except Exception as exc:  # noqa: BLE001 - a bug must not kill the worker silently
            send({"ok": False, "message": f"recompile failed: {type(exc).__name__}: {exc}",
                  "hint": "run `kerncap recompile DIR` for the full error"})
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m kerncap.triton.worker REPRODUCER", file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(serve(Path(sys.argv[1])))
