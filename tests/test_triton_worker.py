"""The resident Triton compile worker (kerncap.triton.worker) on the CPU, against real
Triton on the reproducer of test_triton_reproducer.py (a real Triton cubin, compiled for
sm_90 without a GPU). GPU evidence of the workbench loop: tests/gpu/test_tui_loop.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

from kerncap.errors import KerncapError  # noqa: E402
from kerncap.triton.worker import CompileWorker, is_triton_reproducer  # noqa: E402

from test_triton_hook import app_dir, fake_inject  # noqa: E402,F401  (fixtures)
from test_triton_reproducer import hook_run, reproducer  # noqa: E402,F401  (fixtures)

ENGINE = str(Path(__file__).resolve().parents[1] / "engine")


def edit(root: Path, old: str, new: str) -> None:
    path = root / "source" / "kernel.py"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


ADD = "tl.load(x_ptr + offs, mask=m) + tl.load"
MUL = "tl.load(x_ptr + offs, mask=m) * tl.load"
SUB = "tl.load(x_ptr + offs, mask=m) - tl.load"


@pytest.fixture(autouse=True)
def private_triton_cache(tmp_path, monkeypatch):
    """Every edit is a real compile: no Triton cache from another test or run."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))


def test_worker_serves_edits_warm(reproducer, tmp_path):  # noqa: F811
    """One worker process warms up on the source as it is (its first recompile is a cache
    hit), then compiles an edit nobody compiled before, in that same process, into the
    cubin a fresh `kerncap recompile` process makes of the edit with a Triton cache of
    its own. How much faster the warm worker is: bench/edit_loop.py --only triton."""
    root, _capture, sources = reproducer
    assert not is_triton_reproducer(root)
    (root / "reproducer.json").write_text(json.dumps({"sources": sources}))  # as extract writes it
    assert is_triton_reproducer(root)
    with CompileWorker(root) as worker:
        first = worker.recompile()  # waits for the warm-up, which compiled this very source
        assert worker.warmup["ok"] and "cache hit" in first.phases, (worker.warmup, first.phases)
        assert "parameter layout matches the capture" in first.log
        pid = worker._proc.pid
        edit(root, ADD, SUB)  # not compiled before, by anyone
        edited = worker.recompile()
        assert worker._proc.pid == pid, "the edit was not compiled by the warm worker"
        warm_bytes = edited.cubin.read_bytes()
    assert edited.mode == "triton" and warm_bytes != first.cubin.read_bytes()
    assert {"load kernel", "AST -> TTIR", "ttir", "ttgir", "llir", "ptx", "ptxas"} <= set(edited.phases)
    env = dict(os.environ, PYTHONPATH=ENGINE + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TRITON_CACHE_DIR=str(tmp_path / "cold-cache"))
    cold = subprocess.run([sys.executable, "-m", "kerncap", "recompile", str(root), "--json"], env=env,
                          capture_output=True, text=True)
    assert cold.returncode == 0, cold.stderr
    assert Path(json.loads(cold.stdout)["cubin"]).read_bytes() == warm_bytes


def test_worker_reports_errors_and_keeps_serving(reproducer):  # noqa: F811
    root, _capture, _ = reproducer
    with CompileWorker(root) as worker:
        edit(root, "pid = tl.program_id(0)", "pid = = 1")
        with pytest.raises(KerncapError, match=r"kernel.py:\d+: syntax error"):
            worker.recompile()
        edit(root, "pid = = 1", "pid = tl.program_id(0)")
        path = root / "source" / "kernel.py"
        path.write_text('print("kernel module noise on stdout")\n' + path.read_text())  # must not break the protocol
        assert worker.recompile().cubin.is_file()


def test_worker_that_died_is_started_again(reproducer):  # noqa: F811
    root, _capture, _ = reproducer
    worker = CompileWorker(root)
    try:
        worker.start()
        worker.recompile()
        old = worker._proc
        old.kill()
        old.wait()
        assert worker.recompile().cubin.is_file()
        assert worker._proc is not old
    finally:
        worker.close()
    assert worker._proc is None


def test_a_session_compiles_triton_in_the_worker_and_cuda_in_process(reproducer, tmp_path):  # noqa: F811
    """The session every front end opens (the workbench's, MCP's pool) keeps the resident
    compile worker of a Triton reproducer; a CUDA C++ one compiles in its own thread."""
    from kerncap.session.session import Session

    root, _capture, sources = reproducer
    (root / "reproducer.json").write_text(json.dumps({"sources": sources}))
    session = Session(root)
    try:
        session.warm()
        assert session._compiler is not None and session._compiler._proc is not None
        result = session.recompile()
        assert result.mode == "triton" and result.cubin.is_file()
    finally:
        session.close()
    assert session._compiler._proc is None
    demo = Path(__file__).resolve().parents[1] / "kerncap_tui" / "demo" / "reproducer"
    assert Session(demo)._compiler is None  # CUDA C++: nvcc's steps run from the build thread


def test_worker_that_hangs_is_killed_with_a_message(reproducer, monkeypatch):  # noqa: F811
    from kerncap.triton import worker as worker_module

    root, _capture, _ = reproducer
    path = root / "source" / "kernel.py"
    original = path.read_text()
    path.write_text("import time\ntime.sleep(60)\n" + original)  # a module-level call that never ends in time
    default_timeout = worker_module.WARMUP_TIMEOUT_S
    monkeypatch.setattr(worker_module, "WARMUP_TIMEOUT_S", 1.0)
    with CompileWorker(root) as worker:
        with pytest.raises(KerncapError, match=r"did not answer within 1 s \(warming up\)"):
            worker.recompile()
        path.write_text(original)
        # The replacement worker gets the usual limit: its real warm-up takes ~1.3 s on a
        # loaded 2-core machine, so 1 s would fail it for the machine's sake, not the code's.
        monkeypatch.setattr(worker_module, "WARMUP_TIMEOUT_S", default_timeout)
        assert worker.recompile().cubin.is_file()  # a new worker


def test_a_pinned_config_reaches_the_warm_worker(reproducer):  # noqa: F811
    """recompile(config) in the worker compiles with those options, as `kerncap recompile
    --config` does: the launch record has the block of num_warps=8. Mutation caught: the
    request sent without its config (the captured options compiled)."""
    root, _capture, _ = reproducer
    with CompileWorker(root) as worker:
        res = worker.recompile("num_warps=8")
    launch = json.loads(res.cubin.with_suffix(".launch.json").read_text())
    assert launch["block"] == [256, 1, 1] and "block" in launch["changed"], launch
    assert "num_warps': 8" in res.log and "overridden" in res.log
