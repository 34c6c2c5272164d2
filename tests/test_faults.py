"""Faults: a read-only location, a full disk or a permission error is one message
naming the path (exit status 3), and the cleanup after it never hides it. The
permission tests run as an unprivileged user even when the suite runs as root
(tests/unprivileged.py)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from unprivileged import cli_unprivileged, run_unprivileged, shared_tmp

from kerncap import api
from kerncap.core import fsio
from kerncap.errors import KerncapError

ROOT = Path(__file__).resolve().parent.parent
AXPY = ROOT / "tests" / "fixtures" / "captures" / "axpy_small"
DEMO = ROOT / "kerncap_tui" / "demo" / "reproducer"


@pytest.fixture
def area():
    """<area>/repro (a readable reproducer) and <area>/ro (a directory nobody may write)."""
    base = shared_tmp()
    shutil.copytree(AXPY, base / "repro")
    shutil.copytree(DEMO, base / "demo")
    for d, _, files in os.walk(base):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(Path(d) / f, 0o644)
    (base / "ro").mkdir(mode=0o555)
    (base / "ro").chmod(0o555)
    yield base
    for d, _, _ in os.walk(base):
        os.chmod(d, 0o755)
    shutil.rmtree(base, ignore_errors=True)


def no_temp_files(root: Path) -> bool:
    return not [p for p in root.rglob("*") if fsio.is_leftover_name(p.name)]


def test_pack_into_a_read_only_directory(area):
    rc, out, err = cli_unprivileged(["pack", str(area / "repro"), "-o", str(area / "ro" / "r.kcap")])
    assert rc == 3 and f"kerncap pack: error: cannot write {area / 'ro' / 'r.kcap'}: Permission denied" in err
    assert "hint: you may not write there" in err and "Traceback" not in err
    assert list((area / "ro").iterdir()) == []


def test_unpack_into_a_read_only_directory(area):
    packed = api.pack(area / "repro", area / "r.kcap").path
    packed.chmod(0o644)
    rc, _, err = cli_unprivileged(["unpack", str(packed), "-o", str(area / "ro" / "x")])
    assert rc == 3 and "Permission denied" in err and str(area / "ro") in err and "Traceback" not in err
    assert list((area / "ro").iterdir()) == []


def test_recompile_in_a_read_only_reproducer(area):
    for d, _, _ in os.walk(area / "demo"):
        os.chmod(d, 0o555)
    rc, _, err = cli_unprivileged(["recompile", str(area / "demo")], env={"KERNCAP_NVCC": "/bin/true"})
    assert rc == 3 and f"cannot write into {area / 'demo' / 'variants'}: Permission denied" in err, err
    assert "Traceback" not in err


def test_store_into_a_read_only_store_keeps_the_reproducer(area):
    before = sorted(p.name for p in (area / "repro" / "capture" / "blobs").iterdir())
    rc, _, err = cli_unprivileged(["store", str(area / "repro"), "--store", str(area / "ro" / "store")])
    assert rc == 3 and "Permission denied" in err and str(area / "ro" / "store") in err
    assert sorted(p.name for p in (area / "repro" / "capture" / "blobs").iterdir()) == before


def test_extract_into_a_read_only_directory_starts_nothing(area):
    lib = area / "lib.so"
    lib.write_bytes(b"")
    lib.chmod(0o644)
    rc, _, err = cli_unprivileged(["extract", "k", "-o", str(area / "ro" / "sub" / "repro"), "--", "/bin/true"],
                                  env={"KERNCAP_INJECT_LIB": str(lib)})
    assert rc == 3 and f"cannot create the output directory {area / 'ro' / 'sub'}" in err
    assert "the app was not started" in err


def test_profile_save_into_a_read_only_directory(area):
    prof = api.ProfileResult.load(DEMO / "profile.json")

    def save():
        try:
            prof.save(area / "ro" / "p.json")
        except KerncapError as exc:
            return exc.message, exc.hint
    message, hint = run_unprivileged(save)
    assert "cannot write profile" in message and "Permission denied" in message and "--output" in hint


def _failing(err: int, name: str):
    def fail(*args, **kwargs):
        raise OSError(err, os.strerror(err), str(args[0]) if args else name)
    return fail


def test_read_only_file_system_is_the_message_not_the_cleanup(tmp_path, monkeypatch, capsys):
    from kerncap.cli import main

    monkeypatch.setattr(os, "replace", _failing(errno.EROFS, "replace"))
    monkeypatch.setattr(Path, "unlink", _failing(errno.EROFS, "unlink"))  # the cleanup fails too
    assert main(["pack", str(AXPY), "-o", str(tmp_path / "r.kcap")]) == 3
    err = capsys.readouterr().err
    assert "Read-only file system" in err and "read-only file system: choose a writable one" in err
    assert "Traceback" not in err and "unlink" not in err


def test_full_disk_while_storing(tmp_path, monkeypatch, capsys):
    from kerncap.cli import main

    repro = tmp_path / "repro"
    shutil.copytree(AXPY, repro)
    monkeypatch.setattr(os, "replace", _failing(errno.ENOSPC, "replace"))
    assert main(["store", str(repro), "--store", str(tmp_path / "store")]) == 3
    err = capsys.readouterr().err
    assert "No space left on device" in err and "the disk is full" in err and "Traceback" not in err
    monkeypatch.undo()
    assert no_temp_files(tmp_path / "store") and not (repro / "capture" / "stored.json").exists()
    api.open_capture(repro).verify()  # nothing was removed from the reproducer


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_full_disk_while_recompiling(tmp_path, monkeypatch):
    repro = tmp_path / "demo"
    shutil.copytree(DEMO, repro)
    monkeypatch.setattr(os, "link", _failing(errno.ENOSPC, "link"))
    with pytest.raises(KerncapError, match="No space left on device") as err:
        api.recompile(repro)
    assert "disk is full" in err.value.hint
    assert sorted(p.name for p in (repro / "variants").iterdir()) == ["1.cubin", "2.cubin", "3.cubin"]
