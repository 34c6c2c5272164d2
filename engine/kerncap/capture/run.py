"""Running the user's app under the capture library.

The app runs in its own process group (its own session) so that everything it spawns
(torch.compile workers, MPI-style launchers) can be stopped together once the capture
is on disk, on --timeout, or on Ctrl-C; descendants in other sessions (torchrun's
workers) are followed through /proc and stopped too (kerncap.capture.jobs). Its output is
streamed through while it runs; the tail of its stderr is kept for error messages.

Every CUDA process of the app writes `proc-<pid>.json` (and, when profiling,
`profile-<pid>.json`) into the run directory (docs/capture-format.md).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kerncap.capture.jobs import ProcessTree, StopReport, enable_subreaper, signal_name
from kerncap.core.native import PACKAGE_DIR, entry_library, inject_library
from kerncap.errors import KerncapError, UsageError

PYHOOKS_DIR = PACKAGE_DIR / "pyhooks"
STDERR_TAIL_LINES = 50
_TAIL_BYTES = 64 * 1024

# Receives ("stdout" | "stderr", raw bytes) as the app writes them.
OutputSink = Callable[[str, bytes], None]


@dataclass
class AppOutcome:
    command: list[str]
    returncode: int | None  # None only if the process could not be reaped
    seconds: float
    timed_out: bool = False
    stopped: bool = False  # we ended it because stop_when() said the work was done
    stderr_tail: list[str] = field(default_factory=list)
    stop: StopReport = field(default_factory=StopReport)  # what ending the app's processes took

    @property
    def failed(self) -> bool:
        return not self.stopped and not self.timed_out and self.returncode != 0

    def describe_exit(self) -> str:
        """'exited with status 3' / 'was killed by signal SIGSEGV (11)'."""
        rc = self.returncode
        if rc is None:
            return "did not exit"
        if rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = "signal"
            return f"was killed by signal {name} ({-rc})"
        return f"exited with status {rc}"

    def stderr_excerpt(self, lines: int = 20) -> str:
        tail = self.stderr_tail[-lines:]
        if not tail:
            return "(the app wrote nothing to stderr)"
        return "\n".join("    | " + line for line in tail)


def command_text(command: Sequence[str]) -> str:
    return shlex.join(command)


def check_command(command: Sequence[str], *, cwd: str | os.PathLike | None, env: dict[str, str]) -> None:
    """Fail before creating anything if the app cannot be started."""
    if not command:
        raise UsageError(
            "no app command given",
            "put the app's command after `--` (kerncap profile -- python app.py) or pass --cmd \"python app.py\"",
        )
    exe = command[0]
    if os.sep in exe:
        path = Path(cwd or ".") / exe
        if not path.exists():
            raise KerncapError(f"command not found: {exe} (looked at {path.resolve()})", "check the path of the app")
        if path.is_dir() or not os.access(path, os.X_OK):
            raise KerncapError(f"command is not executable: {path.resolve()}", f"chmod +x {exe}, or run it through its interpreter")
        return
    if shutil.which(exe, path=env.get("PATH", os.defpath)) is None:
        raise KerncapError(
            f"command not found: {exe} (not on PATH)",
            "check the spelling, activate the app's environment, or give the full path",
        )


def app_environment(
    command: Sequence[str], *, mode: str, run_dir: Path, settings: dict[str, str], env: dict[str, str] | None = None
) -> dict[str, str]:
    """The captured app's environment: the current one, `env` on top, then kerncap's variables."""
    out = dict(os.environ)
    out.update(env or {})
    out["CUDA_INJECTION64_PATH"] = str(inject_library())
    out["KERNCAP_MODE"] = mode
    out["KERNCAP_OUT"] = str(Path(run_dir).resolve())
    out["KERNCAP_COMMAND"] = json.dumps(list(command))
    out.update(settings)
    if mode == "capture":
        # The native side reads the path it is told (unset there means cupti), so the
        # resolved default is always written down.
        out["KERNCAP_INTERCEPT"] = check_intercept(out)
        if out["KERNCAP_INTERCEPT"] == "entry":
            out["LD_PRELOAD"] = preload_entry_points(out.get("LD_PRELOAD"))
    # CUDA_MODULE_LOADING is left as the user has it (the driver's default is lazy). Forcing
    # EAGER, DESIGN fact 3's fallback, loaded every libtorch kernel at start-up: +4.3 s on
    # a 6 s PyTorch app on the H200 (bench/overhead.py); the interposer pairs lazily
    # loaded modules with the launch that loads them instead (docs/interposer.md).
    if (PYHOOKS_DIR / "sitecustomize.py").is_file():
        existing = out.get("PYTHONPATH")
        out["PYTHONPATH"] = str(PYHOOKS_DIR) + (os.pathsep + existing if existing else "")
    return out


# How driver calls reach kerncap (KERNCAP_INTERCEPT, extract --intercept); docs/interposer.md.
# Unset: entry where libkerncap_entry.so was built (a graph launch costs ~100 ns more
# than without kerncap instead of ~630 ns through CUPTI, docs/facts.md §26), else cupti.
INTERCEPT_PATHS = ("entry", "cupti")


def check_intercept(env: dict[str, str]) -> str:
    """The interception path `env` asks for, or the default; a value kerncap does not
    know is refused (a typo must not silently pick another path)."""
    intercept = env.get("KERNCAP_INTERCEPT", "")
    if intercept and intercept not in INTERCEPT_PATHS:
        raise UsageError(
            f"KERNCAP_INTERCEPT={intercept!r} is not an interception path kerncap knows",
            "use entry (interposed driver entry points, the default) or cupti (CUPTI callbacks), or unset it",
        )
    built = entry_library() is not None
    if intercept == "entry" and not built:
        raise KerncapError(
            "KERNCAP_INTERCEPT=entry, but libkerncap_entry.so was not built",
            "reinstall kerncap with the CUDA toolkit (pip install .), or use KERNCAP_INTERCEPT=cupti",
        )
    return intercept or ("entry" if built else "cupti")


def preload_entry_points(existing: str | None) -> str:
    """LD_PRELOAD with libkerncap_entry.so first (check_intercept said it was built):
    driver calls then reach kerncap through wrapped entry points instead of a CUPTI
    subscriber (docs/interposer.md)."""
    return str(entry_library()) + (":" + existing if existing else "")


def default_sink(stream: str, data: bytes) -> None:
    """The default app output: the app's stdout and stderr go to ours, as it writes them."""
    target = sys.stdout if stream == "stdout" else sys.stderr
    buffer = getattr(target, "buffer", None)
    try:
        if buffer is not None:
            buffer.write(data)
            buffer.flush()
        else:
            target.write(data.decode(errors="replace"))
            target.flush()
    except (OSError, ValueError):
        pass  # our own stdout closed (e.g. piped into `head`): keep running the app


def run_app(
    command: Sequence[str],
    *,
    env: dict[str, str],
    cwd: str | os.PathLike | None = None,
    timeout: float | None = None,
    stop_when: Callable[[], bool] | None = None,
    output: OutputSink | None = None,
    timeout_signals: Sequence[int] = (signal.SIGTERM,),
    grace: float = 5.0,
    linger: float = 3.0,
    poll: float = 0.05,
) -> AppOutcome:
    """Run `command` to completion, or until `stop_when()` is true, or until `timeout`.

    The whole process group is stopped when we stop the app: each signal of
    `timeout_signals` (on timeout) or SIGTERM (after stop_when), `grace` seconds
    apart, then SIGKILL. Processes left in the group after the app's main process
    exits get `linger` seconds to finish (they may still be writing their reports).
    """
    sink = output or default_sink
    enable_subreaper()  # orphaned descendants of the app stay findable (kerncap.capture.jobs)
    start = time.monotonic()
    proc = _start(command, cwd, env)
    pgid = proc.pid  # start_new_session: the child leads its own group
    tree = ProcessTree(proc.pid)
    stop = StopReport()
    pumps = _OutputPumps(proc, sink)
    timed_out = stopped = False
    try:
        while proc.poll() is None:
            tree.scan()
            if stop_when is not None and stop_when():
                stopped = True
                _stop_group(proc, pgid, (signal.SIGTERM,), grace, tree, stop)
                break
            if timeout is not None and time.monotonic() - start > timeout:
                timed_out = True
                _stop_group(proc, pgid, timeout_signals, grace, tree, stop)
                break
            time.sleep(poll)
        else:
            # The main process ended. Once the work is done nothing else is needed;
            # otherwise let stragglers finish writing their reports first.
            stopped = stop_when is not None and stop_when()
            if not stopped:
                _wait_group_empty(proc, pgid, linger, tree)
            _stop_group(proc, pgid, (signal.SIGTERM,), grace, tree, stop)
    except BaseException:  # Ctrl-C or an error in stop_when: never leave the app running
        _stop_group(proc, pgid, (signal.SIGTERM,), min(grace, 2.0), tree, stop)
        raise
    finally:
        tree.reap()
        pumps.join()

    lines = pumps.stderr_lines()
    return AppOutcome(
        command=list(command),
        returncode=proc.returncode,
        seconds=time.monotonic() - start,
        timed_out=timed_out,
        stopped=stopped,
        stderr_tail=lines[-STDERR_TAIL_LINES:],
        stop=stop,
    )


def _ignore_sigint(_signum, _frame) -> None:
    pass


def apps_take_sigint() -> None:
    """An app kerncap starts must stop on the SIGINT kerncap sends it (a timeout's first
    signal: the app writes what it holds, its profile among it). A background job of a
    script has SIGINT ignored (the shell sets SIG_IGN), and exec keeps an ignored signal,
    so the app would ignore kerncap's SIGINT too and die of the SIGTERM after it with its
    profile unwritten. A handler that does nothing still ignores SIGINT here, and exec
    resets it to the default in the app (which leads a session of its own: no terminal's
    Ctrl-C reaches it). Only the main thread may set it: the front ends call this as they
    start, `_start` again when it runs there."""
    try:
        if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
            signal.signal(signal.SIGINT, _ignore_sigint)
    except ValueError:
        pass  # not the main thread


def _start(command: Sequence[str], cwd, env: dict[str, str]) -> subprocess.Popen:
    """The app, leading a process group of its own, its output on pipes."""
    if threading.current_thread() is threading.main_thread():
        apps_take_sigint()
    try:
        return subprocess.Popen(list(command), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except FileNotFoundError:
        raise KerncapError(f"command not found: {command[0]}", "check the spelling or give the full path") from None
    except PermissionError:
        raise KerncapError(f"command is not executable: {command[0]}", "check its permissions") from None
    except OSError as exc:
        raise KerncapError(f"could not start {command[0]}: {exc.strerror or exc}", "check the command") from None


class _OutputPumps:
    """Threads passing the app's stdout and stderr to `sink` as they come, keeping the
    tail of stderr for the error messages."""

    def __init__(self, proc: subprocess.Popen, sink: OutputSink) -> None:
        self._sink = sink
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._pump, args=(proc.stdout, "stdout"), daemon=True),
                         threading.Thread(target=self._pump, args=(proc.stderr, "stderr"), daemon=True)]
        for t in self._threads:
            t.start()

    def _pump(self, stream, name: str) -> None:
        fd = stream.fileno()
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            self._sink(name, data)
            if name == "stderr":
                with self._lock:
                    self._tail.extend(data)
                    del self._tail[:-_TAIL_BYTES]
        stream.close()

    def join(self) -> None:
        for t in self._threads:
            t.join(timeout=2.0)

    def stderr_lines(self) -> list[str]:
        with self._lock:
            text = bytes(self._tail).decode(errors="replace")
        return [line.rstrip("\r") for line in text.splitlines()]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _app_alive(proc: subprocess.Popen, pgid: int, tree: ProcessTree) -> bool:
    proc.poll()  # reap the leader so its zombie does not count
    tree.reap()
    if proc.returncode is not None:
        _reap_group(pgid)
    return _group_alive(pgid) or bool(tree.alive())


def _reap_group(pgid: int) -> None:
    """Collects the app's processes that ended as kerncap's children: orphans re-parented
    to kerncap (the subreaper) before a scan saw them, which the tree does not know. Their
    zombies kept the group alive, so a run whose stragglers had finished still waited out
    `linger`, then `grace` and the SIGKILL's 2 s (12 s of a test's 12.2). Only once the
    leader is reaped: its exit status is Popen's to collect."""
    while True:
        try:
            pid, _ = os.waitpid(-pgid, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _wait_group_empty(proc: subprocess.Popen, pgid: int, seconds: float, tree: ProcessTree) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        if not _app_alive(proc, pgid, tree):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def _stop_group(proc: subprocess.Popen, pgid: int, signals: Sequence[int], grace: float, tree: ProcessTree,
                report: StopReport) -> None:
    """Each of `signals`, `grace` seconds apart, to the app's group and every descendant
    kerncap saw (kerncap.capture.jobs), then SIGKILL; `report` says what it took."""
    tree.scan(force=True)
    if not report.processes:
        report.processes = len(tree.alive())
    for sig in signals:
        if not _app_alive(proc, pgid, tree):
            return
        report.signals.append(signal_name(sig))
        _signal_group(pgid, sig)
        tree.signal(sig)
        if _wait_group_empty(proc, pgid, grace, tree):
            return
    tree.scan(force=True)
    report.killed = len(tree.alive())
    report.signals.append("SIGKILL")
    _signal_group(pgid, signal.SIGKILL)
    tree.signal(signal.SIGKILL)
    _wait_group_empty(proc, pgid, 2.0, tree)
    try:
        proc.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        pass
    report.leftover = tree.alive()


# -- per-process reports in the run directory -----------------------------------------

_REPORT_NAME = re.compile(r"^(proc|profile|triton|buckets|apply)-(\d+)\.json$")


def read_reports(run_dir: Path, kind: str) -> list[dict]:
    """All `<kind>-<pid>.json` files of the run directory (kind: proc, profile, triton, buckets).

    The interposer writes them atomically, so a file is either absent or complete;
    one that does not parse is reported by name.
    """
    reports = []
    for path in sorted(Path(run_dir).iterdir()):
        m = _REPORT_NAME.match(path.name)
        if not m or m.group(1) != kind:
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise KerncapError(
                f"{path.name} in the run directory is not valid JSON ({exc})",
                "the capture library and this kerncap may come from different builds; reinstall kerncap",
            ) from None
        if not isinstance(data, dict):
            raise KerncapError(f"{path.name} in the run directory is not a JSON object", "reinstall kerncap")
        data.setdefault("pid", int(m.group(2)))
        reports.append(data)
    return reports


def report_errors(reports: list[dict], kind: str | None = None) -> list[tuple[int, dict]]:
    """(pid, error) for every error of the given kind recorded by any process."""
    found = []
    for report in reports:
        for error in report.get("errors") or []:
            if isinstance(error, dict) and (kind is None or error.get("kind") == kind):
                found.append((report.get("pid", 0), error))
    return found


def cupti_subscriber_error(found: list[tuple[int, dict]], what: str) -> KerncapError:
    """The error for a process whose CUPTI subscription failed (one subscriber per process)."""
    pid, error = found[0]
    detail = error.get("message") or "cuptiSubscribe failed"
    return KerncapError(
        f"{what}: process {pid} already has another CUPTI subscriber ({detail})",
        "only one CUPTI client may run per process: disable torch.profiler / torch.autograd.profiler, "
        "Nsight Systems or Nsight Compute, DCGM profiling or any other CUPTI tool for this run",
    )


def resolve_app_command(after_dashes: Sequence[str], cmd_string: str | None) -> list[str]:
    """The app's argv from `-- CMD…` or from `--cmd "CMD…"` (shell-style quoting)."""
    if cmd_string is not None and after_dashes:
        raise UsageError("give the app's command either after `--` or with --cmd, not both")
    if cmd_string is not None:
        try:
            argv = shlex.split(cmd_string)
        except ValueError as exc:
            raise UsageError(f"--cmd {cmd_string!r} cannot be split into arguments ({exc})", "check the quoting") from None
    else:
        argv = list(after_dashes)
    if not argv:
        raise UsageError(
            "no app command given",
            "put the app's command after `--` (kerncap profile -- python app.py) or pass --cmd \"python app.py\"",
        )
    return argv
