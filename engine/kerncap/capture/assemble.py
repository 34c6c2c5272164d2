"""Turning a run's capture directories into reproducers: shared by `extract` (one
capture) and reproducer sets (one capture per member, kerncap.capture.set_extract).

The interposer writes `capture/` (one dispatch) or `capture-<N>/` per dispatch of a set
into the run directory; each is moved into a staged reproducer with its sources, its
Triton record, reproducer.json and launches.json, and the stage is renamed to the
output at the end."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from kerncap import __version__
from kerncap.core.stack import capture_provenance
from kerncap.errors import KerncapError
from kerncap.reproducer.format import Capture
from kerncap.recompile.selfcontained import finish_sources
from kerncap.reproducer.launches import AppLaunches
from kerncap.sources import attach_sources
from kerncap.triton import attach_triton


def captured_dirs(run_dir: Path) -> list[Path]:
    """The complete capture directories of a run: `capture`, or a set's `capture-<N>`
    (by dispatch)."""
    found = [d for d in run_dir.glob("capture*") if (d / "manifest.json").is_file()
             and (d.name == "capture" or (d.name.startswith("capture-") and d.name[8:].isdigit()))]
    return sorted(found, key=lambda d: int(d.name[8:]) if d.name != "capture" else -1)


def build_reproducer(
    stage: Path, capture_dir: Path, run_dir: Path, kernel: str, match: str, dispatch: int, command: list[str],
    source_dir, build_dir, env: dict[str, str] | None = None, procs: list[dict] | None = None,
    triton_records: bool = True,
) -> dict[str, Any]:
    """Turns one capture directory of the run into a reproducer at `stage`: moves the
    capture in, attaches sources and the Triton record, writes reproducer.json and the
    app's launch counts (launches.json); returns the reproducer.json record. `triton_records`:
    pair the capture's kernel with the Python hook's Triton records (a sequence's first
    launch is not what they describe)."""
    stage.mkdir(parents=True)
    os.rename(capture_dir, stage / "capture")
    capture = Capture.open(stage)
    notes: list[str] = []

    sources = None
    if source_dir is not None:
        sources = _attach(attach_sources, notes, stage, capture, Path(source_dir),
                          Path(build_dir) if build_dir is not None else None)
        if sources and sources.get("kind") == "cuda":  # headers from outside --source-dir, the extraction's record
            finished = _attach(finish_sources, notes, stage)
            if finished:
                sources["notes"] = [*sources.get("notes", []), *finished["notes"]]
    triton = None
    if triton_records and any(run_dir.glob("triton-*.json")):
        triton = _attach(attach_triton, notes, stage, capture, run_dir)

    record: dict[str, Any] = {
        "kerncap_version": __version__,
        "kernel": capture.kernel.get("name"),
        "demangled": capture.kernel.get("demangled"),
        "match": {"pattern": kernel, "mode": match},
        "dispatch": dispatch,
        "command": command,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        # A Triton kernel's sources are the hook's snapshot, whatever --source-dir found.
        "sources": triton if triton else sources,
        "triton": triton,
        "provenance": _provenance(command, capture, env, notes),
        "notes": notes,
    }
    tmp = stage / ".reproducer.json.tmp"
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, stage / "reproducer.json")
    if procs:
        kernel_name = capture.kernel.get("demangled") or capture.kernel.get("name") or ""
        launches = AppLaunches.from_reports(procs, kernel_name, command)
        if launches.kernels:  # an older capture library reports no kernels_seen
            launches.save(stage)
    return record


def replace_output(stage: Path, output: Path, force: bool) -> None:
    """Moves the finished `stage` to `output` (checked empty before the run)."""
    if output.exists():
        if force:
            shutil.rmtree(output)
        else:
            output.rmdir()  # checked empty before the run; fails loudly if filled since
    os.rename(stage, output)


def _provenance(command: list[str], capture: Capture, env: dict[str, str] | None, notes: list[str]) -> dict | None:
    """The stack of the run (kerncap.core.stack); a failure to read it is a note, never the capture's loss."""
    try:
        return capture_provenance(command, capture.provenance.get("gpu") or {}, env)
    except Exception as exc:  # noqa: BLE001 - provenance is informative; the capture is complete
        notes.append(f"provenance not recorded ({type(exc).__name__}: {exc})")
        return None


def _attach(step, notes: list[str], *args) -> dict | None:
    """Call an attach step; its failure is a note, never the loss of the capture."""
    try:
        return step(*args)
    except KerncapError as exc:
        notes.append(f"{step.__name__}: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""))
    except Exception as exc:  # a bug there must not cost the user the capture
        notes.append(f"{step.__name__} failed ({type(exc).__name__}: {exc}); the capture itself is complete")
    return None
