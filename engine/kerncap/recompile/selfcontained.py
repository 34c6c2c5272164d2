"""Finishing an extracted reproducer's sources (docs/sources.md, "Self-contained
reproducers"): after kerncap.sources.attach copied the files of `--source-dir`, the
headers the translation unit includes from outside it (as the preprocessor's dependency
list shows: the local nvcc's `-M` with the recorded flags) are copied too, except the
CUDA toolkit's and the system's, and the recorded include directories that found them are
replaced by the copies, so a packed reproducer recompiles elsewhere reading no path
outside itself. Then the extraction is recorded (kerncap.recompile.provenance).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from kerncap.errors import KerncapError
from kerncap.recompile import provenance
from kerncap.recompile.cuda import _load_build, arch_flag, device_flags
from kerncap.recompile.trust import (SYSTEM_INCLUDE_DIRS, _INCLUDE_DIR_FLAGS, local_nvcc, split, tool_env,
                                     without_options)
from kerncap.reproducer.format import Capture
from kerncap.sources.attach import BUILD_JSON

OUTSIDE = "outside"  # source/outside/<n>-<name>/: the copies of one outside include directory
MAX_COPIED_BYTES = 256 << 20
_DEPS_TIMEOUT_S = 300


def finish_sources(reproducer: Path) -> dict:
    """Copy the outside headers into `reproducer`/source, rewrite build.json and record
    the extraction; returns {"outside_headers": n, "notes": [...]}."""
    reproducer = Path(reproducer)
    build = _load_build(reproducer)
    notes: list[str] = []
    copied = 0
    try:
        copied = _copy_outside_headers(reproducer, build, notes)
    except KerncapError as exc:
        notes.append(f"headers outside --source-dir not copied: {exc.message}")
    try:
        build["origin"] = provenance.record(reproducer, build)
    except OSError as exc:  # the reproducer stays usable; recompile then treats it as anyone's
        notes.append(f"the extraction was not recorded in {provenance.state_dir()} ({exc.strerror or exc}): "
                     "recompile treats this reproducer as one from someone else")
    path = reproducer / "source" / BUILD_JSON
    tmp = path.with_name(f".{BUILD_JSON}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(build, indent=2) + "\n")
    tmp.replace(path)
    return {"outside_headers": copied, "notes": notes}


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _dependencies(nvcc: str, flags: list[str], tu: Path, cwd: Path, reproducer: Path) -> list[str]:
    """The files the preprocessor reads for `tu` (make rule of `nvcc -M`)."""
    try:
        proc = subprocess.run([nvcc, *flags, "-M", str(tu)], cwd=cwd, env=tool_env(reproducer), capture_output=True,
                              text=True, errors="surrogateescape", timeout=_DEPS_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KerncapError(f"nvcc -M did not run ({exc})") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise KerncapError(f"nvcc -M failed ({last[:200]})")
    text = proc.stdout.replace("\\\n", " ")
    _, _, rest = text.partition(": ")
    words, current, i = [], "", 0
    while i < len(rest):  # "a\ b" is one path with a space
        c = rest[i]
        if c == "\\" and i + 1 < len(rest) and rest[i + 1] == " ":
            current += " "
            i += 2
            continue
        if c.isspace():
            if current:
                words.append(current)
            current = ""
        else:
            current += c
        i += 1
    if current:
        words.append(current)
    # as the compiler found them: "/app/src/../include/x.h" through CMake's -I/app/src/../include
    return [os.path.normpath(os.path.join(cwd, w)) for w in words]


def _copy_outside_headers(reproducer: Path, build: dict, notes: list[str]) -> int:
    argv = list(build["compile_command"])
    source_root = Path(build.get("source_root") or "/nonexistent")
    cwd = Path(build["cwd"])
    tu = source_root / build["tu"]
    if not cwd.is_dir() or not tu.is_file():
        raise KerncapError(f"the original compile ({cwd}, {tu}) is not there to list its headers")
    capture = Capture.open(reproducer)
    nvcc = local_nvcc(argv[0], reproducer)
    flags = device_flags(argv, tu, cwd)
    deps = _dependencies(nvcc, [*flags, f"-arch={arch_flag(build, capture, argv)}"], tu, cwd, reproducer)
    skip = [os.path.realpath(d) for d in (*SYSTEM_INCLUDE_DIRS, str(Path(os.path.realpath(nvcc)).parent.parent))]
    root = os.path.realpath(source_root)
    outside = [d for d in deps if not _within(os.path.realpath(d), root)
               and not any(_within(os.path.realpath(d), s) for s in skip) and not d.startswith("/usr/lib/llvm-")]
    if not outside:
        return 0
    # The recorded include directories, in order, as the compiler searched them.
    searched = [(text, value, os.path.normpath(value if os.path.isabs(value) else os.path.join(cwd, value)))
                for name, value, text in split(argv[1:]) if name in _INCLUDE_DIR_FLAGS and value]
    dest = reproducer / "source"
    copies: dict[str, str] = {}  # flag text -> its copy's directory, relative to source/
    total = 0
    for header in outside:
        holder = next((s for s in searched if _within(header, s[2])), None)
        if holder is None:
            notes.append(f"{header} is read from outside --source-dir by a path no include directory gives "
                         "(a relative #include): not copied; recompile reads the original")
            continue
        rel_dir = copies.get(holder[0])
        if rel_dir is None:
            rel_dir = f"{OUTSIDE}/{len(copies)}-{Path(holder[2]).name or 'root'}"
            copies[holder[0]] = rel_dir
        target = dest / rel_dir / os.path.relpath(header, holder[2])
        total += os.path.getsize(header)
        if total > MAX_COPIED_BYTES:
            raise KerncapError(f"the headers outside --source-dir exceed {MAX_COPIED_BYTES >> 20} MiB")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(header, target)
        build.setdefault("files", []).append(str(target.relative_to(dest)))
    # The include directories, in the recorded order: the copies replace the outside ones.
    in_tree = list(build.get("include_dirs", []))
    order: list[str] = []
    for text, _, path in searched:
        if text in copies:
            order.append(copies[text])
        elif _within(os.path.realpath(path), root):
            rel = os.path.relpath(os.path.realpath(path), root)
            if rel in in_tree and rel not in order:
                order.append(rel)
    build["include_dirs"] = order + [d for d in in_tree if d not in order]
    build["compile_command"] = without_options(argv, set(copies))
    build["outside_include_dirs"] = {copies[t]: p for t, _, p in searched if t in copies}
    notes.append(f"{sum(1 for f in build['files'] if f.startswith(OUTSIDE + '/'))} header(s) from outside "
                 f"--source-dir copied into source/{OUTSIDE}/")
    return len(outside)
