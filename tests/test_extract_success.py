"""The success path of `kerncap extract`: the fake app publishes a capture in the run
directory the way the capture library does (capture.partial-<pid> → capture, then
stays alive like an app that keeps working), and the engine must stop the app, move the
capture into <output>, write reproducer.json and leave nothing else behind.

The capture it publishes is a real H200 capture from tests/fixtures/captures/."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kerncap import api
from kerncap.capture.extract import extract
from kerncap.errors import KerncapError

FIXTURES = Path(__file__).parent / "fixtures" / "captures"

PUBLISHING_APP = textwrap.dedent(
    r'''
    import json, os, shutil, subprocess, sys, time
    out = os.environ["KERNCAP_OUT"]
    spec = json.loads(os.environ["FAKE_SPEC"])
    if spec.get("child_pidfile"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open(spec["child_pidfile"], "w").write(str(child.pid))
    print("app: working")
    sys.stdout.flush()
    partial = os.path.join(out, "capture.partial-%d" % os.getpid())
    shutil.copytree(spec["capture"], partial)
    os.rename(partial, os.path.join(out, "capture"))
    if spec.get("triton"):
        open(os.path.join(out, "triton-%d.json" % os.getpid()), "w").write("{}")
    time.sleep(spec.get("sleep", 0))
    if spec.get("done"):  # reached only by an app that was not stopped
        open(spec["done"], "w").close()
    '''
)


def _captures(tmp_path_factory) -> list[Path]:
    """The real H200 captures committed under tests/fixtures/captures/."""
    return sorted(p for p in FIXTURES.glob("*") if p.is_dir())


@pytest.fixture
def publish(tmp_path, tmp_path_factory, monkeypatch):
    app = tmp_path / "app.py"
    app.write_text(PUBLISHING_APP)
    lib = tmp_path / "libkerncap_inject.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("KERNCAP_INJECT_LIB", str(lib))
    source = _captures(tmp_path_factory)[0]
    if (source / "capture").is_dir():
        source = source / "capture"

    def run(output: Path, *, spec=None, **kwargs):
        spec = {"capture": str(source), **(spec or {})}
        seen = []
        result = extract("add", [sys.executable, str(app)], output=output, env={"FAKE_SPEC": json.dumps(spec)},
                         output_sink=lambda stream, data: seen.append((stream, data)), timeout=60, **kwargs)
        return result, seen

    return run


def test_capture_moves_into_output_and_app_group_is_stopped(publish, tmp_path):
    out = tmp_path / "work" / "repro"
    pidfile = tmp_path / "child.pid"
    done = tmp_path / "app-ended"
    result, seen = publish(out, spec={"sleep": 60, "child_pidfile": str(pidfile), "done": str(done)})
    assert not done.exists(), "the app must be stopped once the manifest exists"
    assert result.reproducer_dir == out
    assert (out / "capture" / "manifest.json").is_file()
    assert result.capture.root == out / "capture"
    record = json.loads((out / "reproducer.json").read_text())
    assert record["match"] == {"pattern": "add", "mode": "substring"}
    assert record["command"][-1].endswith("app.py")
    assert record["sources"] is None and record["triton"] is None
    assert sorted(p.name for p in out.parent.iterdir()) == ["repro"], "run directory must be removed"
    summary = api.format_extract(result)
    written = ", ".join(f"#{r.id}" for r in result.capture.regions if r.written)
    assert f"reproducer  {out}" in summary and "regions" in summary and f"written: {written}" in summary
    assert (b"app: working\n" in b"".join(d for s, d in seen if s == "stdout"))
    child = int(pidfile.read_text())
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the app's child survived")


def test_force_replaces_only_after_success(publish, tmp_path):
    out = tmp_path / "repro"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with pytest.raises(KerncapError):
        publish(out)
    assert (out / "old.txt").exists()
    publish(out, force=True)
    assert not (out / "old.txt").exists() and (out / "reproducer.json").is_file()


def test_keep_run_dir_and_failing_attach_steps_are_notes(publish, tmp_path, monkeypatch):
    from kerncap.capture import assemble as extract_mod

    def broken(*args):
        raise RuntimeError("a bug in this step")

    monkeypatch.setattr(extract_mod, "attach_sources", broken)
    monkeypatch.setattr(extract_mod, "attach_triton", broken)
    out = tmp_path / "repro"
    result, _ = publish(out, spec={"triton": True}, keep_run_dir=True, source_dir=tmp_path)
    assert result.run_dir.is_dir() and list(result.run_dir.glob("triton-*.json"))
    assert sum("broken failed (RuntimeError: a bug in this step); the capture itself is complete" in n
               for n in result.notes) == 2
    assert json.loads((out / "reproducer.json").read_text())["notes"] == result.notes
    shutil.rmtree(result.run_dir)


def _with_written_regions(tmp_path: Path, n: int) -> Path:
    """A copy of axpy_small whose manifest lists `n` written regions (region 1 and n - 1 more)."""
    root = tmp_path / f"written{n}"
    shutil.copytree(Path(__file__).parent / "fixtures" / "captures" / "axpy_small", root)
    path = root / "capture" / "manifest.json"
    m = json.loads(path.read_text())
    last = m["regions"][-1]
    for i in range(n - 1):
        m["regions"].append({**last, "id": len(m["regions"]), "base": last["base"] + (i + 1) * (1 << 20)})
    path.write_text(json.dumps(m))
    return root


@pytest.mark.parametrize("n, listed, more", [(6, 6, None), (7, 6, "… 1 more"), (8, 6, "… 2 more")])
def test_extract_text_lists_six_written_regions_then_counts_the_rest(tmp_path, n, listed, more):
    """extract's summary names the first six written regions and counts the others
    (mutation caught: a seventh region dropped from the list without '… 1 more')."""
    from kerncap.capture.extract import ExtractResult
    from kerncap.capture.extract_text import format_extract
    from kerncap.reproducer.format import Capture

    root = _with_written_regions(tmp_path, n)
    text = format_extract(ExtractResult(reproducer_dir=root, capture=Capture.open(root), run_dir=tmp_path / "gone"))
    line = next(l for l in text.splitlines() if l.startswith("memory"))
    written = line.split("written: ", 1)[1]
    assert written.count("#") == listed and written.startswith("#1 (16.0 KiB)")
    assert (more in written) if more else ("more" not in written)
    assert f"{n + 1} regions" in line
