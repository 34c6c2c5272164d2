"""Builders of hostile inputs for test_hostile.py and test_adversarial.py: synthetic
reproducers (a real H200 capture with a region of chosen chunks: labelled synthetic in
its provenance), crafted pack files, and the listing of a directory tree that the tests
compare before and after a command (nothing written outside the target)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import xxhash

from kerncap.reproducer.pack import _HEADER, INDEX_NAME, MAGIC, PACK_VERSION, _write_frame
from kerncap.reproducer.store import compress

ROOT = Path(__file__).resolve().parent.parent
AXPY = ROOT / "tests" / "fixtures" / "captures" / "axpy_small"
DEMO = ROOT / "kerncap_tui" / "demo" / "reproducer"


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "engine"), str(ROOT),
                                                         os.environ.get("PYTHONPATH", "")])}


def kerncap(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    """`python -m kerncap ARGV` in a process of its own (text output)."""
    return subprocess.run([sys.executable, "-m", "kerncap", *argv], capture_output=True, text=True, env=env(),
                          timeout=kwargs.pop("timeout", 120), **kwargs)


def synthetic_reproducer(dst: Path, chunks: list[bytes | None], chunk_size: int = 4096, *,
                         unreachable: int = 0) -> Path:
    """A copy of the axpy_small capture (real, H200: kernel, launch, cubin) whose regions
    are replaced by one synthetic region holding `chunks` (None: an elided zero chunk),
    pre and post alike, plus `unreachable` regions of one random chunk each that no
    argument points to (prune drops them); labelled synthetic in its provenance."""
    shutil.copytree(AXPY, dst)
    cap = dst / "capture"
    for blob in (cap / "blobs").iterdir():
        blob.unlink()
    m = json.loads((cap / "manifest.json").read_text())
    hashes = []
    for data in chunks:
        if data is None:
            hashes.append(None)
            continue
        assert len(data) == chunk_size
        h = xxhash.xxh64_hexdigest(data)
        (cap / "blobs" / f"{h}.bin").write_bytes(data)
        hashes.append(h)
    region = m["regions"][0]
    region.update(size=len(chunks) * chunk_size, pre=hashes, post=list(hashes), zero_fraction=0)
    m["regions"] = [region]
    for i in range(unreachable):
        data = os.urandom(chunk_size)
        h = xxhash.xxh64_hexdigest(data)
        (cap / "blobs" / f"{h}.bin").write_bytes(data)
        m["regions"].append({**region, "id": 100 + i, "base": 0x100000000 + i * (1 << 30), "size": chunk_size,
                             "pre": [h], "post": [h], "written": False})
    m["chunk_size"] = chunk_size
    m["provenance"]["synthetic"] = "issue 26 tests: the regions replaced by generated chunks"
    (cap / "manifest.json").write_text(json.dumps(m))
    return dst


def write_pack(path: Path, index: dict, frames: list[tuple[str, bytes]], version: int = PACK_VERSION) -> Path:
    """A pack file holding `index` and `frames` (name, zstd payload) as given."""
    with open(path, "wb") as f:
        f.write(_HEADER.pack(MAGIC, version))
        _write_frame(f, INDEX_NAME, compress(json.dumps(index).encode()))
        for name, payload in frames:  # names as bytes a hostile writer may choose (not UTF-8 too)
            raw = name.encode("utf-8", "surrogateescape")[:0xFFFF]
            f.write(struct.pack("<H", len(raw)) + raw + struct.pack("<Q", len(payload)) + payload)
    return path


def read_pack(path: Path) -> tuple[dict, list[tuple[str, bytes]]]:
    """(index, frames) of a pack file."""
    import zstandard as zstd

    data = path.read_bytes()
    at = _HEADER.size
    frames = []
    while at < len(data):
        (n,) = struct.unpack_from("<H", data, at)
        name = data[at + 2: at + 2 + n].decode()
        (size,) = struct.unpack_from("<Q", data, at + 2 + n)
        start = at + 2 + n + 8
        frames.append((name, data[start:start + size]))
        at = start + size
    index = json.loads(zstd.ZstdDecompressor().decompress(frames[0][1]))
    return index, frames[1:]


def listing(root: Path) -> dict[str, tuple]:
    """Every path under root with its kind, size and mode (links not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size if not p.is_dir() else 0)
    return out


# -- issue 47: what a reproducer's source/ can hold ----------------------------------------------------

SOURCE_SECRET = "KERNCAP_HOSTILE_SECRET"
# (kind, hostile?): how a source tree can make the compiler read outside the reproducer, or
# wait for ever, and the harmless look-alikes that must still build.
SOURCE_PLANTS = [("link out to a file", True), ("link out to a directory", True), ("fifo", True), ("socket", True),
                 ("absolute include", True), ("escaping include", True), ("computed include", True),
                 ("digraph include", True), ("spliced include", True), ("commented include", True),
                 ("link inside", False), ("toolkit include", False), ("include in a comment", False),
                 ("relative include inside", False)]


def plant_source(repro: Path, kind: str, where: str, secret: Path) -> Path:
    """Plant `kind` at source/<where>/ of the demo reproducer `repro` and include it from its
    translation unit (smooth/smooth.cu); `secret` is a file outside holding SOURCE_SECRET.
    Returns the planted path."""
    import socket

    d = repro / "source" / where
    d.mkdir(parents=True, exist_ok=True)
    path = d / "planted.h"
    rel = os.path.relpath(path, repro / "source" / "smooth")
    line = f'#include "{rel}"'
    if kind == "link out to a file":
        path.symlink_to(secret)
    elif kind == "link out to a directory":
        path = d / "ext"
        path.symlink_to(secret.parent)
        line = f'#include "{os.path.relpath(path, repro / "source" / "smooth")}/{secret.name}"'
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        cwd = os.getcwd()
        os.chdir(d)  # AF_UNIX paths are short
        try:
            s = socket.socket(socket.AF_UNIX)
            s.bind(path.name)
            s.close()
        finally:
            os.chdir(cwd)
    elif kind == "link inside":
        path.symlink_to(repro / "source" / "common" / "testapp.hpp")
    else:
        text = {"absolute include": f'#include "{secret}"',
                "escaping include": '#include "' + "../" * len(path.parts) + str(secret).lstrip("/") + '"',
                "computed include": f'#define PLANTED "{secret}"\n#include PLANTED',
                "digraph include": f"%:include <{secret}>",
                "spliced include": f'#  inc\\\nlude "{secret}"',
                "commented include": f'#/**/include/**/"{secret}"',
                "toolkit include": "#include <cuda_fp16.h>",
                "include in a comment": f'// #include "{secret}"\n/* #include "{secret}" */',
                "relative include inside":
                    f'#include "{os.path.relpath(repro / "source" / "common" / "testapp.hpp", d)}"'}[kind]
        path.write_text(text + "\n")
    tu = repro / "source" / "smooth" / "smooth.cu"
    tu.write_text(line + "\n" + tu.read_text())
    return path
