"""Copying a kernel's sources into a reproducer (`<reproducer>/source/`), never
touching the original tree."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from kerncap.errors import KerncapError
from kerncap.sources.discover import SourcesNotFound, discover
from kerncap.sources.names import library_reason

BUILD_JSON = "build.json"


def capture_arch(capture) -> int | None:
    cc = (capture.provenance.get("gpu") or {}).get("cc")
    if isinstance(cc, (list, tuple)) and len(cc) == 2:
        return int(cc[0]) * 10 + int(cc[1])
    return None


def attach_sources(reproducer_dir: Path, capture, source_dir: Path, build_dir: Path | None) -> dict:
    """Discover the captured kernel's sources and copy them into `reproducer_dir/source`.

    Returns the report ({"kind": "cuda", ...}) or {"kind": "none", "reason": ...}.
    """
    reproducer_dir = Path(reproducer_dir)
    kernel = capture.kernel["name"]
    if capture.manifest.get("triton"):
        return {"kind": "none", "reason": f"{kernel} is a Triton kernel: its sources come with the Triton capture"}
    arch = capture_arch(capture)
    try:
        captured_cubin = capture.cubin_path.read_bytes()
    except (OSError, KeyError):
        captured_cubin = None
    try:
        found = discover(kernel, Path(source_dir), Path(build_dir) if build_dir else None, arch=arch, captured_cubin=captured_cubin)
    except SourcesNotFound as exc:
        reason = exc.message
        why = library_reason(kernel, capture.kernel.get("demangled"))
        if why and why not in reason:
            reason += f" ({why})"
        return {"kind": "none", "reason": reason}

    dest = reproducer_dir / "source"
    if dest.exists() and any(dest.iterdir()):
        raise KerncapError(f"{dest} already holds sources (maybe edited)", "extract into a new --output directory, or move the old source/ away")
    for f in found.files:
        target = dest / found.rel(f)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)
    report = found.report()
    build = {
        "kernel": kernel,
        "compile_command": report["compile_command"],
        "compile_command_origin": report["compile_command_origin"],
        "cwd": str(found.cwd),
        "source_root": str(found.source_root),
        "arch": f"sm_{arch}" if arch else None,
        "tu": report["translation_unit"],
        "include_dirs": [found.rel(d) for d in found.include_dirs],
        "method": found.method,
        "confidence": found.confidence,
        "files": report["files"],
        "notes": report["notes"],
    }
    tmp = dest / f".{BUILD_JSON}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(build, indent=2) + "\n")
    tmp.replace(dest / BUILD_JSON)
    return {k: report[k] for k in ("kind", "translation_unit", "files", "compile_command", "method", "confidence", "notes")} | {
        "line_table_files": report["line_table_files"],
        "source_root": str(found.source_root),
    }
