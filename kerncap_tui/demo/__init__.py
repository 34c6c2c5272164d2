"""The bundled demo reproducer that `kerncap-tui` opens when given no directory.

`demo_path()` is the one place the app, the tests and the screenshot script take the
demo from. The bundled data lives in `kerncap_tui/demo/reproducer/` (a real H200 capture
with its source and recorded variants); `KERNCAP_TUI_DEMO` points elsewhere for
development. The variant history's git repository is shipped as `dot-git/` and its
ignore file as `dot-gitignore`, because a nested `.git` cannot be committed and a nested
`.gitignore` would keep the capture's payloads out of kerncap's own repository;
`materialize()` renames both back in a scratch copy, so the installed package is never
written to.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from kerncap.core.fsio import pid_alive
from kerncap.errors import KerncapError

BUNDLED = Path(__file__).resolve().parent / "reproducer"
SCRATCH_PREFIX = "kerncap-demo-"  # <tmp>/kerncap-demo-<pid>-XXXX/reproducer


def demo_path() -> Path:
    override = os.environ.get("KERNCAP_TUI_DEMO")
    return Path(override) if override else BUNDLED


def available() -> bool:
    return (demo_path() / "capture" / "manifest.json").is_file()


def materialize(dest: Path | None = None) -> Path:
    """Copy the demo into a writable scratch directory and return it."""
    src = demo_path()
    if not (src / "capture" / "manifest.json").is_file():
        raise KerncapError(
            f"the bundled demo capture is missing ({src})",
            "open a reproducer instead: kerncap-tui DIR (or set KERNCAP_TUI_DEMO to a reproducer directory)",
        )
    if dest is None:
        discard_stale()
        dest = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")) / "reproducer"
    dest = Path(dest)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    for shipped, real in (("dot-git", ".git"), ("dot-gitignore", ".gitignore")):
        if (dest / shipped).exists() and not (dest / real).exists():
            (dest / shipped).rename(dest / real)
    return dest


def discard(copy: Path) -> None:
    """Remove a scratch copy made by materialize() (the workbench does on exit)."""
    scratch = Path(copy).parent
    if scratch.name.startswith(SCRATCH_PREFIX) and Path(copy).name == "reproducer":
        shutil.rmtree(scratch, ignore_errors=True)


def discard_stale() -> None:
    """Remove the scratch copies of workbenches that ended without cleaning up (killed)."""
    for scratch in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        pid = scratch.name[len(SCRATCH_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(scratch, ignore_errors=True)

