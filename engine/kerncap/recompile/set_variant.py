"""One variant for every member of a reproducer set (`kerncap recompile SET`): the
set's edited source/ is copied over each member's and built once per distinct captured
cubin; <set>/variants/<n>.json names the cubin each member runs."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kerncap.core.confined import real_dir
from kerncap.core.fsio import make_dirs, write_atomic
from kerncap.errors import KerncapError
from kerncap.recompile import recompile
from kerncap.reproducer.format import Capture
from kerncap.reproducer.sets import MEMBER_OWN_FILES, SET_VARIANT_FORMAT, ReproducerSet
from kerncap.reproducer.variants import RecompileResult


@dataclass
class SetVariant:
    path: Path  # <set>/variants/<n>.json
    cubins: dict[int, Path]
    seconds: float
    builds: int  # compiler runs (members sharing a captured cubin share one build)
    results: list[RecompileResult] = field(default_factory=list)  # one per build

    @property
    def target(self) -> Path:
        """What a replay of the set names with --cubin."""
        return self.path

    def to_dict(self) -> dict[str, Any]:
        """`kerncap recompile SET --json`, MCP's `recompile` of a set."""
        return {"variant": str(self.path), "seconds": round(self.seconds, 3), "builds": self.builds,
                "cubins": {str(i): str(c) for i, c in self.cubins.items()},
                "commands": [r.command for r in self.results]}

    def text(self, verbose: bool = False) -> str:
        """Each build as `kerncap recompile` prints one, then the cubin each member runs."""
        lines = []
        for r in self.results:
            lines.append("$ " + shlex.join(r.command))
            if verbose or r.log.strip():
                lines.append(r.log.rstrip())
            lines += r.notes
        lines.append(f"{self.path}  ({self.builds} build(s), {self.seconds:.2f} s)")
        lines += [f"  member {i}: {c}" for i, c in self.cubins.items()]
        return "\n".join(lines)


def sync_source(s: ReproducerSet) -> None:
    """Copies the set's edited source over every member's source/ (files that describe
    a member's own launch stay the member's)."""
    if not s.source_dir.is_dir():
        raise KerncapError(f"{s.root} has no editable source ({s.source_dir} is missing)",
                           "extract with --source-dir (CUDA C++) or from a Triton app to get one")
    for m in s.members:
        dst_root = m.path / "source"
        for src in s.source_dir.rglob("*"):
            # A link is the same in every member (source/ was copied from one); never
            # write through one either: nothing outside the set is touched.
            if src.is_symlink() or src.is_dir() or src.name in MEMBER_OWN_FILES:
                continue
            # Every directory from the set down to dst checked: a linked source/ or
            # subdirectory of a member would carry the copy outside.
            rel = (dst_root / src.relative_to(s.source_dir)).relative_to(s.root)
            dst = real_dir(s.root, rel.parent, create=True) / rel.name
            if dst.is_symlink():
                dst.unlink()
            elif dst.is_file() and dst.read_bytes() == src.read_bytes():
                continue
            shutil.copy2(src, dst)


def recompile_set(s: ReproducerSet, config: str | None = None, *, trust: bool = False,
                  mode: str = "auto", split: bool = False) -> SetVariant:
    """Builds the set's source once per distinct captured cubin (members of one cubin
    share the build; Triton members with their own autotune configs get their own)
    and writes <set>/variants/<n>.json naming each member's cubin. `config`, `trust`
    and `mode` as for kerncap.recompile.recompile."""
    t0 = time.perf_counter()
    sync_source(s)
    built: dict[str, RecompileResult] = {}
    cubins: dict[int, Path] = {}
    for m in s.members:
        sha = Capture.open(m.path).kernel.get("module", {}).get("sha256") or str(m.index)
        if sha not in built:
            built[sha] = recompile(m.path, config, trust=trust, mode=mode, split=split)
        cubins[m.index] = Path(built[sha].cubin)
    make_dirs(s.variants_dir)
    n = max((int(p.stem) for p in s.variants_dir.glob("*.json") if p.stem.isdigit()), default=0) + 1
    path = s.variants_dir / f"{n}.json"
    record = {"format": SET_VARIANT_FORMAT, "config": config, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "cubins": {str(i): os.path.relpath(c, s.root) for i, c in cubins.items()}}
    write_atomic(path, json.dumps(record, indent=1) + "\n")
    return SetVariant(path, cubins, time.perf_counter() - t0, len(built), list(built.values()))
