"""Running the replay under a CUDA developer tool (Nsight Compute, compute-sanitizer).

The tool wraps a fresh replay server process (`ncu … python -m kerncap.replay.server`),
so it sees exactly what the replay does: the restore, the captured (or variant) cubin
loaded at the captured addresses, and the launches one request makes. The server leads
its own process group (ReplayClient), so a timeout or a cancel kills the tool and the
server together. Where the tool's files go: next to the variant in the reproducer.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from kerncap.core.fsio import write_atomic
from kerncap.errors import KerncapError
from kerncap.reproducer.format import Capture, read_json
from kerncap.replay import va_guards
from kerncap.replay.client import ReplayClient, ServerTimeout, default_server_command

# Where a CUDA toolkit lives when neither PATH nor CUDA_HOME says (tests replace it).
DEFAULT_CUDA_HOMES: tuple[str, ...] = ("/usr/local/cuda",)
VARIANTS_DIR = "variants"
BASELINE_STEM = "baseline"
MAX_RESULT_BYTES = 64 << 20


class Cancelled(KerncapError):
    """The user cancelled a tool run (the tool and its replay server were killed)."""


class ToolTimeout(KerncapError):
    """The tool (or the kernel under it) did not finish in time; both were killed."""


def find_tool(name: str, what: str) -> Path:
    """`name` on PATH, else in $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin."""
    found = shutil.which(name)
    if found:
        return Path(found)
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *DEFAULT_CUDA_HOMES]
    looked = []
    for home in homes:
        if not home:
            continue
        candidate = Path(home) / "bin" / name
        looked.append(str(candidate.parent))
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise KerncapError(
        f"{what} ({name}) not found on PATH or in {', '.join(dict.fromkeys(looked)) or 'a CUDA toolkit'}",
        f"{name} ships with the CUDA toolkit: put its bin/ on PATH or set CUDA_HOME to the toolkit",
    )


def artifact_stem(root: Path, cubin: str | Path | None) -> Path:
    """Where a variant's tool outputs go, without suffix: next to a variant inside the
    reproducer (variants/3.cubin -> variants/3), variants/<stem> for one outside it,
    variants/baseline for the captured cubin. variants/ is kept out of the history's git."""
    if cubin is None:
        return root / VARIANTS_DIR / BASELINE_STEM
    c = Path(cubin).resolve()
    if c.is_relative_to(root):
        return c.with_suffix("")
    return root / VARIANTS_DIR / c.stem


def cubin_label(root: Path, cubin: str | Path | None) -> str:
    """'captured cubin' or the variant's path relative to the reproducer when inside it."""
    if cubin is None:
        return "captured cubin"
    c = Path(cubin).resolve()
    return str(c.relative_to(root)) if c.is_relative_to(root) else str(c)


def save_result(path: Path, data: dict) -> None:
    """A tool's result as JSON beside the variant, atomically."""
    write_atomic(path, json.dumps(data, indent=1) + "\n")


def load_result(path: Path, from_dict):
    """A stored result, or None when there is none or it cannot be read (it is then as if
    the tool had not run: the workbench shows no value, the CLI runs the tool again). It
    travels with the reproducer: only a regular file of bounded size is read."""
    if not path.exists():
        return None
    try:
        return from_dict(read_json(path, MAX_RESULT_BYTES, "", ""))
    except (KerncapError, ValueError, TypeError, KeyError, AttributeError):
        return None


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join("    | " + line for line in tail) or "(empty log)"


class Cancellation:
    """A cancel button for a tool run, pressed from any thread (the workbench's)."""

    def __init__(self) -> None:
        self.cancelled = False
        self._run: ToolRun | None = None
        self._lock = threading.Lock()

    def bind(self, run: "ToolRun | None") -> None:
        with self._lock:
            self._run = run
            cancelled = self.cancelled
        if cancelled and run is not None:
            run.kill()

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            run = self._run
        if run is not None:
            run.kill()

    def check(self, what: str) -> None:
        if self.cancelled:
            raise Cancelled(f"{what} cancelled", None)


class ToolRun:
    """One replay server started under `wrapper` (the tool's command line, ending where
    the server's command begins), bounded by `timeout` seconds from start to exit."""

    def __init__(self, capture_dir: str | Path, wrapper: Sequence[str], *, what: str, timeout: float,
                 device: int = 0, cancel: Cancellation | None = None, capture: Capture | None = None):
        self.what = what
        self.timeout = float(timeout)
        self.cancel = cancel or Cancellation()
        self.started = time.monotonic()
        # A tool may reserve address space of its own when it initialises CUDA; guard
        # pages around the capture's spans keep it off them (replay/va_guards.py).
        env = {**os.environ, va_guards.ENV: va_guards.guard_env(capture or capture_dir)}
        self.client = ReplayClient(capture_dir, device=device, timeout=self.timeout, env=env,
                                   server_cmd=[*wrapper, *default_server_command()])
        self.cancel.bind(self)

    def left(self) -> float:
        return max(1.0, self.timeout - (time.monotonic() - self.started))

    def request(self, op: str, **args: Any) -> Any:
        """Sends one request (opening the capture first); a cancel or a timeout kills the
        tool and the server and raises Cancelled / ToolTimeout."""
        self.cancel.check(self.what)
        try:
            self.client.timeout = self.left()
            return self.client.request(op, **args)
        except ServerTimeout:
            raise ToolTimeout(
                f"{self.what} did not finish within {self.timeout:g} s; killed it and its replay server",
                "a kernel that never ends (an endless loop in a variant?) hangs under the tool too; "
                "if it is just slow under the tool, raise --timeout",
            ) from None
        except KerncapError:
            if self.cancel.cancelled:
                raise Cancelled(f"{self.what} cancelled; the tool and its replay server were killed") from None
            raise

    def finish(self) -> None:
        """Shuts the server down and waits (within the time left) for the tool to exit:
        the tool writes its report as the server ends. Raises Cancelled if cancelled."""
        try:
            self.client.close(wait=self.left())
        finally:
            self.cancel.bind(None)
        self.cancel.check(self.what)

    def kill(self) -> None:
        self.client.kill()
