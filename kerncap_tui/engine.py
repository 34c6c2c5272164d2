"""The workbench's only door into the engine. Engine modules are imported lazily (the
replay core loads libcuda only when used), and a missing part becomes a KerncapError
that says what is missing, never an ImportError traceback."""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from pathlib import Path

from kerncap.errors import KerncapError, NativeUnavailable

REPLAY_ITERATIONS = 20


def engine_module(name: str):
    try:
        return importlib.import_module(f"kerncap.{name}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("kerncap"):
            raise KerncapError(
                f"kerncap.{name} is not part of this kerncap build",
                "update kerncap (pip install -U kerncap) to use this action",
            ) from None
        raise


def needs_gpu(exc: BaseException) -> bool:
    """True when the failure means "no GPU / no replay core here" rather than a bug."""
    return isinstance(exc, NativeUnavailable)


def load_profile(path: Path):
    return engine_module("profile").ProfileResult.load(path)


def extract(kernel: str, command: list[str], output: Path, dispatch: int):
    return engine_module("extract").extract(kernel, command, output=output, dispatch=dispatch)


def recompile(reproducer: Path):
    return engine_module("recompile").recompile(reproducer)


def open_set(path: Path):
    """The reproducer set at `path` (kerncap.sets.ReproducerSet), or None for anything else."""
    sets = engine_module("sets")
    return sets.ReproducerSet.open(path) if sets.is_set(path) else None


def recompile_set(s):
    return engine_module("sets").recompile_set(s)


def run_set(s, variant: Path | None):
    """Validate and time every member of a set (with `variant`: against the baseline)."""
    return engine_module("sets").run_set(s, variant=variant, validate=True, iterations=REPLAY_ITERATIONS)


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
        self._client = None
        self._lock = threading.Lock()

    def _open(self):
        if self._client is None:
            cls = engine_module("replay.client").ReplayClient
            client = cls(self.reproducer)
            client.__enter__()
            self._client = client
        return self._client

    def run(self, cubin: Path | None, validate: bool = True) -> Outcome:
        with self._lock:
            rc = self._open()
            kwargs = {"cubin": cubin} if cubin is not None else {}
            t = rc.replay(iterations=REPLAY_ITERATIONS, **kwargs)
            validation, detail = "skipped", ""
            if validate:
                try:
                    v = rc.validate(**kwargs)
                    validation = "pass" if v.passed else "fail"
                    if not v.passed:
                        bad = [r for r in v.regions if not _region_passed(r)]
                        detail = f"{len(bad)} region(s) differ from the captured post-state"
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
            client.__exit__(None, None, None)


def _region_passed(region) -> bool:
    if isinstance(region, dict):
        return bool(region.get("passed", region.get("match", False)))
    return bool(getattr(region, "passed", getattr(region, "match", False)))
