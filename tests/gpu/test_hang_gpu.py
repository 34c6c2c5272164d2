"""A variant that never ends (testapps/cuda/variants/axpy_spin.cu: every thread polls
y[0] for a value nothing writes; same mangled name as axpy_inplace), killed by each
front end's replay timeout: `kerncap replay --timeout`, the MCP server's
`--replay-timeout` (its replay and validate tools) and the workbench
($KERNCAP_REPLAY_TIMEOUT, a build of a kernel edited to spin). Each time the spinning
server process is gone, and the next request is served by a fresh one.

Each case waits out one timeout (TIMEOUT_S) per hanging request: about 2 minutes in all.
Run on the GPU machine: bash tests/gpu/run.sh -s tests/gpu/test_hang_gpu.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .smooth_edits import SMOOTH_MANGLED, kernel_header

pytestmark = pytest.mark.gpu

TIMEOUT_S = 15.0
SERVER_MODULE = "kerncap.replay.server"
STORE = "  y[i] = acc;"
SPIN = "  volatile float* poll = y;\n  while (poll[0] == poll[0]) __nanosleep(1000);  // y is finite: never ends\n" + STORE


def _descends_from_us(pid: int) -> bool:
    """Whether `pid` is this test process's child or a child's descendant (a CLI's server
    is our grandchild, and orphaned when the CLI has exited: an orphan counts as ours, so a
    server that outlived its CLI is not missed); other pytest processes on the machine
    start servers of their own."""
    me = os.getpid()
    for depth in range(64):
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == me or (pid == 1 and depth == 0):
            return True
        if pid <= 1:
            return False
    return False


def replay_servers_anywhere() -> set[int]:
    """Every live replay server process this test started, directly or through a CLI
    process (the GPU batch runs other pytest shards beside this one)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if SERVER_MODULE in cmd and state != "Z" and _descends_from_us(int(entry)):
            found.add(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids, seconds: float = 30.0) -> set[int]:
    deadline = time.monotonic() + seconds
    while (left := {p for p in pids if alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.fixture
def spin_cubin(variant_cubins) -> Path:
    cubin = variant_cubins / "axpy_spin.cubin"
    assert cubin.is_file(), f"{cubin} was not built (testapps/CMakeLists.txt's variants)"
    return cubin


@pytest.fixture
def axpy_copy(vector_capture, tmp_path) -> Path:
    """A private copy of the session's axpy reproducer (a killed server leaves it as it was)."""
    work = tmp_path / "axpy"
    shutil.copytree(vector_capture, work)
    return work


def kerncap(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kerncap", *args], capture_output=True, text=True, timeout=timeout)


def test_replay_timeout_kills_a_spinning_variant_and_the_next_replay_runs(axpy_copy, spin_cubin):
    before = replay_servers_anywhere()
    t0 = time.monotonic()
    hung = kerncap("replay", str(axpy_copy), "--cubin", str(spin_cubin), "--timeout", f"{TIMEOUT_S:g}")
    print(f"kerncap replay --cubin axpy_spin.cubin --timeout {TIMEOUT_S:g}: exit {hung.returncode} after "
          f"{time.monotonic() - t0:.1f} s\n{hung.stderr}")
    assert hung.returncode == 3, hung.stderr
    assert f"replay server did not answer replay within {TIMEOUT_S:g} s; killed it" in hung.stderr
    assert "Traceback" not in hung.stderr
    assert not wait_gone(replay_servers_anywhere() - before), "the spinning replay server outlived the timeout"
    again = kerncap("replay", str(axpy_copy), "--timeout", "120")
    assert again.returncode == 0, again.stderr
    assert "median" in again.stdout


def test_mcp_replay_and_validate_time_out_and_the_next_request_is_served(axpy_copy, spin_cubin, tmp_path):
    pytest.importorskip("mcp")
    anyio = pytest.importorskip("anyio")
    from mcp import Client

    from kerncap.frontends.mcp_server import build_server

    root = axpy_copy.parent
    (axpy_copy / "variants").mkdir(exist_ok=True)
    shutil.copy(spin_cubin, axpy_copy / "variants" / "spin.cubin")
    server = build_server([root], replay_timeout=TIMEOUT_S)
    before = replay_servers_anywhere()
    seen: dict[str, object] = {}

    def servers() -> set[int]:
        return replay_servers_anywhere() - before

    async def go():
        async with Client(server) as c:
            call = c.call_tool
            seen["ok"] = await call("validate", {"reproducer": "axpy"})
            seen["pid0"] = servers()
            seen["hung validate"] = await call("validate", {"reproducer": "axpy", "cubin": "variants/spin.cubin"})
            seen["pid1"] = servers()
            seen["replay"] = await call("replay", {"reproducer": "axpy", "iterations": 5})
            seen["pid2"] = servers()
            seen["hung replay"] = await call("replay", {"reproducer": "axpy", "cubin": "variants/spin.cubin"})
            seen["after"] = await call("validate", {"reproducer": "axpy"})
            seen["pid3"] = servers()

    anyio.run(go)
    for key in ("ok", "hung validate", "replay", "hung replay", "after"):
        r = seen[key]
        print(f"{key}: {'ERROR ' if r.is_error else ''}{' '.join(getattr(x, 'text', '') for x in r.content)[:300]}")
    assert not seen["ok"].is_error and seen["ok"].structured_content["passed"] is True
    for key in ("hung validate", "hung replay"):
        text = seen[key].content[0].text
        assert seen[key].is_error and "replay server did not answer" in text, text
        assert f"within {TIMEOUT_S:g} s; killed it" in text, text
    assert not seen["replay"].is_error and seen["replay"].structured_content["iterations"] == 5
    assert not seen["after"].is_error and seen["after"].structured_content["passed"] is True
    (first,), (second,) = seen["pid0"], seen["pid2"]
    assert not wait_gone(seen["pid0"]) and first not in seen["pid1"], seen  # killed...
    assert first != second and len(seen["pid3"]) == 1 and seen["pid3"] != seen["pid2"], seen  # ...then a fresh one


@pytest.fixture
def smooth_repro(testapps_build, tmp_path) -> Path:
    from kerncap.capture.extract import extract

    from .apps import TESTAPPS

    res = extract(SMOOTH_MANGLED, [str(testapps_build / "smooth"), str(1 << 20)], output=tmp_path / "smooth",
                  match="exact", source_dir=TESTAPPS / "cuda", build_dir=testapps_build, timeout=120)
    return Path(res.reproducer_dir)


def test_workbench_build_of_a_spinning_kernel_times_out_and_the_loop_goes_on(smooth_repro, monkeypatch, tmp_path):
    from .test_tui_loop import notes, replay_servers, run_workbench, squeeze, sync

    monkeypatch.setenv("KERNCAP_REPLAY_TIMEOUT", f"{TIMEOUT_S:g}")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    header = kernel_header(smooth_repro)
    original = header.read_text()
    assert original.count(STORE) == 1

    async def steps(wb) -> None:
        servers = replay_servers()
        assert len(servers) == 1, servers
        added, new_rows = await wb.failing_save(lambda: header.write_text(original.replace(STORE, SPIN)),
                                                "spinning kernel")
        print(f"spinning kernel: the log shows\n{added}")
        assert new_rows == 0, "a build whose replay never answered records no variant"
        flat = squeeze(added)  # "replay server did not answer <op> within 15 s; killed it"
        assert "replayserverdidnotanswer" in flat and f"within{TIMEOUT_S:g}s;killedit" in flat, added
        failed = notes(wb.app, "build failed")
        assert any("did not answer" in str(n.message) for n in failed), [(n.title, n.message) for n in wb.app._notifications]
        assert not wait_gone(servers), "the spinning replay server outlived the timeout"
        wb.assert_alive()
        v = await wb.good_save(lambda: header.write_text(original + "\n// saved again\n"), "after the timeout")
        assert v.validation == "pass" and v.id == 1, v
        fresh = replay_servers()
        assert len(fresh) == 1 and not (fresh & servers), (servers, fresh)

    sync(lambda: run_workbench(smooth_repro, steps))()
