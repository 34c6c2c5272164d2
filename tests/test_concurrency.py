"""Several kerncap processes at once on one workspace and one store: stores, packs,
unpacks, lists, infos, recompiles and prunes of the same reproducers, all started
together. Every command succeeds or refuses with one message; afterwards every
reproducer reads back byte-exact, the store holds only valid objects and no temp
file is left anywhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from kerncap import api
from kerncap.core import fsio
from kerncap.reproducer.format import Capture, capture_chunks
from kerncap.reproducer.store import Store

ROOT = Path(__file__).resolve().parent.parent
AXPY = ROOT / "tests" / "fixtures" / "captures" / "axpy_small"
DEMO = ROOT / "kerncap_tui" / "demo" / "reproducer"


def start(*argv: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "engine"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "kerncap", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_many_processes_on_one_workspace(tmp_path):
    ws = tmp_path / "ws"
    repros = ws / "reproducers"
    for name, src in (("a", AXPY), ("b", AXPY), ("demo1", DEMO), ("demo2", DEMO)):
        shutil.copytree(src, repros / name)
    packed = api.pack(DEMO, tmp_path / "demo.kcap").path
    store = ws / "store"
    jobs = {
        "store a": start("store", str(repros / "a"), "--store", str(store)),
        "store a again": start("store", str(repros / "a"), "--store", str(store)),
        "store b": start("store", str(repros / "b"), "--store", str(store)),
        "store demo1": start("store", str(repros / "demo1"), "--store", str(store)),
        "unpack 1": start("unpack", str(packed), "-o", str(repros / "u1")),
        "unpack 2": start("unpack", str(packed), "-o", str(repros / "u2")),
        "pack demo2 1": start("pack", str(repros / "demo2"), "-o", str(tmp_path / "d2.kcap")),
        "pack demo2 2": start("pack", str(repros / "demo2"), "-o", str(tmp_path / "d2.kcap"), "--force"),
        "list": start("list", "--workspace", str(ws), "--json"),
        "info b": start("info", str(repros / "b"), "--verify", "--json"),
        "prune a 1": start("prune", str(repros / "a"), "--no-validate", "-o", str(tmp_path / "pa1")),
        "prune a 2": start("prune", str(repros / "a"), "--no-validate", "-o", str(tmp_path / "pa2")),
    }
    if shutil.which("nvcc"):  # two recompiles of one reproducer at once
        jobs["recompile demo2 1"] = start("recompile", str(repros / "demo2"))
        jobs["recompile demo2 2"] = start("recompile", str(repros / "demo2"))
    done = {name: (p.wait(timeout=120), *p.communicate()) for name, p in jobs.items()}
    failed = {n: err for n, (rc, _, err) in done.items() if rc != 0 and not n.startswith(("pack demo2", "prune a"))}
    assert failed == {}, failed
    # The one with --force always writes its file; the other writes it too or says it exists.
    # (Mutation caught: pack ignoring --force on an existing file.)
    assert done["pack demo2 2"][0] == 0, done["pack demo2 2"][2]
    rc, _, err = done["pack demo2 1"]
    assert rc == 0 or (rc == 3 and "already exists" in err), err
    # A prune runs, or says another one holds the reproducer; at least one runs, and finds
    # what a prune alone finds (axpy's two regions are both reachable: nothing written).
    # (Mutation caught: a prune refusing whenever the reproducer's lock file exists.)
    pruned = {name: done[name][0] == 0 for name in ("prune a 1", "prune a 2")}
    for name, ran in pruned.items():
        rc, out, err = done[name]
        assert ran or (rc == 3 and "another kerncap process is pruning" in err), err
        assert not ran or "kept the full reproducer (2 regions" in out, out
        assert not (tmp_path / f"pa{name[-1]}").exists()
    assert any(pruned.values()), done
    assert "Traceback" not in "".join(err for _, _, err in done.values())

    if "recompile demo2 1" in jobs:  # two recompiles at once: two variants, neither lost
        cubins = sorted(p.name for p in (repros / "demo2" / "variants").glob("*.cubin"))
        assert cubins == ["1.cubin", "2.cubin", "3.cubin", "4.cubin", "5.cubin"]
    # Everything reads back, from the store where it was moved there.
    for name in ("a", "b", "demo1", "demo2", "u1", "u2"):
        Capture.open(repros / name).verify()
    lengths = {h: n for repro in ("a", "b", "demo1") for h, n in capture_chunks(Capture.open(repros / repro))}
    assert {p.stem for p in Store(store).objects()} == set(lengths)
    for h, n in lengths.items():
        Store(store).get(h, n)  # decompresses and checks the hash
    api.unpack(tmp_path / "d2.kcap", tmp_path / "d2")
    Capture.open(tmp_path / "d2").verify()
    rows = json.loads(done["list"][1])
    assert all(r["error"] is None for r in rows), rows
    assert not [p for p in tmp_path.rglob("*") if fsio.is_leftover_name(p.name)]
