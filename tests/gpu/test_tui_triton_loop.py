"""Issue 18 on the GPU: a Triton kernel's save -> validated result in the workbench.
The workbench opens the FlashAttention-style reproducer (its resident compile worker
warms up: Triton, torch and the kernel module imported, the kernel compiled once), then
a save of the faster edit (Q hoisted out of the K/V loop, byte-exact) must put one
validated `pass` row on screen, compiled by that same warm worker process. How long
the save takes (goal 2 s) is bench/edit_loop.py's figure.

Run on the GPU machine: bash tests/gpu/run.sh -s tests/gpu/test_tui_triton_loop.py
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from .test_triton_repro import FASTER_EDITS, triton_reproducer
from .test_tui_loop import Workbench, descendants, run_workbench, sync

pytestmark = pytest.mark.gpu


@pytest.fixture
def flash_repro(captures, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no user themes/keymap
    # A Triton cache of its own: test_triton_repro compiled the same edit; the save must
    # be a real compile, as a user's first edit is.
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    monkeypatch.delenv("KERNCAP_THEME", raising=False)
    work = tmp_path / "reproducer"
    shutil.copytree(triton_reproducer(captures, "triton_flash_attn"), work)
    return work


@sync
async def test_triton_save_is_compiled_by_the_warm_worker_and_validated(flash_repro):
    kernel = flash_repro / "source" / "kernel.py"
    edited = kernel.read_text()
    for old, new in FASTER_EDITS["triton_flash_attn"]:
        assert edited.count(old) == 1
        edited = edited.replace(old, new)

    async def steps(wb: Workbench) -> None:
        session = wb.app.session
        assert session._compiler is not None, "a Triton reproducer compiles in the session's resident worker"
        warm = await asyncio.to_thread(session.wait_warm)  # as a user who edits after the workbench opened
        assert warm["ok"], warm
        worker = session._compiler
        pid = worker._proc.pid
        v = await wb.good_save(lambda: kernel.write_text(edited), "Q-hoisting edit (Triton)")
        print(f"Triton save -> validated row {wb.last_elapsed:.2f} s (worker warm-up {warm['seconds']:.2f} s)")
        assert v.id == 1 and v.cubin and (flash_repro / v.cubin).is_file(), v
        assert worker._proc is not None and worker._proc.pid == pid, "the save did not go to the warm worker"

    await run_workbench(flash_repro, steps)
    left = {pid: cmd for pid, (_, cmd) in descendants().items() if "kerncap.triton.worker" in cmd}
    assert not left, f"compile worker process(es) left after the app closed: {left}"
