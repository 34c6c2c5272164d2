"""The replay server: `python -m kerncap.replay.server`.

Owns the CUDA context of one replay. Reads JSON-line requests on stdin and writes
JSON-line responses on stdout (kerncap.replay.protocol); logs go to stderr. It runs in
its own process because the captured virtual addresses must be reserved before
anything else in the process takes them, and because a faulting variant leaves a
sticky CUDA error that only a new process clears: after such an error the server
answers with `"fatal": true` and exits.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import traceback
from typing import Any, Callable, TextIO

from kerncap.core.child import protocol_channel
from kerncap.core.native import report_to_capture_library
from kerncap.errors import AddressUnavailable, CaptureFormatError, KerncapError, NativeUnavailable
from kerncap.replay import mismatch_ops, sequence_ops, session_ops, va_guards
from kerncap.replay.native_session import NativeSession
from kerncap.replay.protocol import HINTS, decode, encode

log = logging.getLogger("kerncap.replay.server")

# Errors after which the context is unusable (CUDA's sticky errors).
STICKY_CUDA_ERRORS = {
    700,  # ILLEGAL_ADDRESS
    702,  # LAUNCH_TIMEOUT
    709,  # CONTEXT_IS_DESTROYED
    710,  # ASSERT
    714,  # HARDWARE_STACK_ERROR
    715,  # ILLEGAL_INSTRUCTION
    716,  # MISALIGNED_ADDRESS
    717,  # INVALID_ADDRESS_SPACE
    718,  # INVALID_PC
    719,  # LAUNCH_FAILED
    999,  # UNKNOWN
}


class Server:
    def __init__(self, out: TextIO):
        self.out = out
        self.session = None  # NativeSession once opened
        self.ops: dict[str, Callable[[dict[str, Any]], Any]] = {
            "open": self.op_open,
            "info": lambda req: self.opened().info(),
            "load_variant": lambda req: self.opened().load(req.get("cubin")),
            "replay": self.op_replay,
            "validate": self.op_validate,
            # repeated, perturbed and interleaved runs (kerncap.replay.session_ops)
            "reference": lambda req: session_ops.op_reference(self.opened(), req),
            "check": lambda req: mismatch_ops.op_check(self.opened(), req),  # session_ops.op_check + reports
            "time_compare": lambda req: session_ops.op_time_compare(self.opened(), req),
            "_debug_read": lambda req: session_ops.op_read(self.opened(), req),
            # where a variant differs, and its bytes (kerncap.replay.mismatch_ops)
            "mismatch_map": lambda req: mismatch_ops.op_mismatch_map(self.opened(), req),
            "dump": lambda req: mismatch_ops.op_dump(self.opened(), req),
            # sequences (kerncap.replay.sequence_replay)
            "sequence_time": lambda req: sequence_ops.op_sequence_time(self.opened(), req),
            "localize": lambda req: sequence_ops.op_localize(self.opened(), req),
            "shutdown": lambda req: {},
            "_debug_block_host": self.op_debug_block_host,
        }

    # -- operations ---------------------------------------------------------------------
    def opened(self):
        if self.session is None:
            raise KerncapError("the replay server has no capture open", "send an `open` request first")
        return self.session

    def op_open(self, req: dict[str, Any]) -> dict[str, Any]:
        if self.session is not None:
            raise KerncapError("the replay server already has a capture open", "start a new server per capture")
        self.session = NativeSession(req["capture"], device=int(req.get("device", 0)),
                                     sequence_order=str(req.get("sequence_order") or "streams"))
        return self.session.info()

    def op_replay(self, req: dict[str, Any]) -> dict[str, Any]:
        ns = self.opened()
        result = ns.replay(req.get("cubin"), int(req.get("iterations", 20)), int(req.get("warmup", 3)),
                           bool(req.get("flush_l2", False)), check=bool(req.get("check", True)),
                           warm_l2=bool(req.get("warm_l2", False)), timer=session_ops.timer_of(req))
        if req.get("per_launch") and ns.capture.sequence is not None:
            result.launches = sequence_ops.op_sequence_time(
                ns, {"cubin": req.get("cubin"), "iterations": min(int(req.get("iterations", 20)), 20),
                     "warmup": int(req.get("warmup", 3))})["launches"]
        return result.to_dict()

    def op_validate(self, req: dict[str, Any]) -> dict[str, Any]:
        return self.opened().validate(req.get("cubin"), req.get("atol"), req.get("rtol"), req.get("dtype"),
                                      {int(k): v for k, v in (req.get("dtypes") or {}).items()}).to_dict()

    def op_debug_block_host(self, req: dict[str, Any]) -> dict[str, Any]:
        """Test hook: map [base, base+size) PROT_NONE on the host before `open`, so that the
        span reservation there fails (the driver then places it elsewhere: docs/replay.md) and its
        error path can be checked."""
        if self.session is not None:
            raise KerncapError("_debug_block_host must come before open")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        PROT_NONE, MAP_PRIVATE, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE = 0, 0x02, 0x20, 0x100000
        got = libc.mmap(req["base"], req["size"], PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0)
        if got in (None, ctypes.c_void_p(-1).value) or got != req["base"]:
            raise KerncapError(f"mmap at {req['base']:#x} failed: {os.strerror(ctypes.get_errno())}")
        return {"base": got}

    # -- errors -------------------------------------------------------------------------
    def classify(self, exc: BaseException, op: str) -> dict[str, Any]:
        """The error response for `exc`; "fatal" when this process must not go on."""
        core = sys.modules.get("kerncap._replay")
        fatal = op == "open"  # a half-opened capture is no use: start afresh
        kind, hint, code = "internal", None, None
        message = str(exc)
        if isinstance(exc, KerncapError):
            kind = ("capture" if isinstance(exc, CaptureFormatError)
                    else "native" if isinstance(exc, NativeUnavailable)
                    else "address" if isinstance(exc, AddressUnavailable) else "input")
            message, hint = exc.message, exc.hint
        elif core is not None and isinstance(exc, core.ReplayError):
            message, kind = exc.args
            fatal = fatal or kind in ("no_gpu", "address")
        elif core is not None and isinstance(exc, core.CudaError):
            message, code = exc.args
            kind = "cuda"
            fatal = fatal or code in STICKY_CUDA_ERRORS or not self.healthy()
            context = self.fault_context()
            if context:
                message += "." + context
                hint = ("the cause is in the capture, not in the kernel's code: see `kerncap info` for what it "
                        "could not capture" if self.session.current_key == self.session.captured_key else None)
            if fatal and op != "open":
                message += " (sticky: this replay process is finished; the next request starts a new one)"
        else:
            log.error("internal error in %s:\n%s", op, "".join(traceback.format_exception(exc)))
            message = f"replay server internal error in {op}: {type(exc).__name__}: {exc}"
            fatal = True
        return {"ok": False, "error": message, "hint": hint or HINTS.get(kind), "kind": kind, "fatal": fatal,
                "code": code}

    def fault_context(self) -> str:
        try:
            return self.session.fault_context() if self.session is not None else ""
        except Exception:  # noqa: BLE001 - an explanation must never hide the error itself
            return ""

    def healthy(self) -> bool:
        if self.session is None:
            return True
        try:
            problem = self.session.session.health()
        except Exception:  # noqa: BLE001 - a failing health check is itself the answer
            return False
        if problem:
            log.error("context unusable: %s", problem)
        return not problem

    # -- loop ---------------------------------------------------------------------------
    def send(self, obj: dict[str, Any]) -> None:
        self.out.write(encode(obj))
        self.out.flush()

    def serve(self, lines) -> int:
        for line in lines:
            if not line.strip():
                continue
            try:
                req = decode(line)
            except ValueError as exc:
                self.send({"id": None, "ok": False, "error": f"malformed request: {exc}", "kind": "input",
                           "fatal": False})
                continue
            rid, op = req.get("id"), req.get("op")
            handler = self.ops.get(op)
            if handler is None:
                self.send({"id": rid, "ok": False, "error": f"unknown op {op!r}", "kind": "input", "fatal": False})
                continue
            try:
                result = handler(req)
            except BaseException as exc:  # noqa: BLE001 - every failure becomes a response
                resp = self.classify(exc, op)
                self.send({"id": rid, **resp})
                if resp["fatal"] or isinstance(exc, KeyboardInterrupt):
                    log.error("exiting after fatal error in %s: %s", op, resp["error"])
                    return 3
                continue
            self.send({"id": rid, "ok": True, "result": result})
            if op == "shutdown":
                return 0
        return 0


def main() -> None:
    # Stray prints (from Python or from native code) go to stderr, not into the channel.
    out = protocol_channel()
    logging.basicConfig(level=os.environ.get("KERNCAP_REPLAY_LOG", "INFO"), stream=sys.stderr,
                        format="kerncap-replay[%(process)d]: %(message)s")
    # Before anything initialises CUDA (a tool wrapping this process reserves inside cuInit).
    guards = va_guards.place_from_env()
    if guards:
        log.debug("guard pages at %s", ", ".join(hex(g) for g in guards))
    status = Server(out).serve(sys.stdin)
    out.flush()
    if report_to_capture_library():
        log.debug("reported to the kerncap profile or capture around this server")
    elif os.environ.get("KERNCAP_MODE"):
        log.debug("KERNCAP_MODE is set but kerncap's capture library is not loaded in this server")
    # Skip interpreter teardown: after a sticky error, releasing CUDA objects can hang,
    # and the driver releases everything at process exit anyway.
    os._exit(status)


if __name__ == "__main__":
    main()
