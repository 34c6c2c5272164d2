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

from kerncap.errors import KerncapError

BUNDLED = Path(__file__).resolve().parent / "reproducer"


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
    dest = Path(dest) if dest else Path(tempfile.mkdtemp(prefix="kerncap-demo-")) / "reproducer"
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    for shipped, real in (("dot-git", ".git"), ("dot-gitignore", ".gitignore")):
        if (dest / shipped).exists() and not (dest / real).exists():
            (dest / shipped).rename(dest / real)
    return dest
