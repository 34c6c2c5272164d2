"""Replay server request handling and error classification, with a stand-in for the
native core (the GPU suite runs the real one)."""

import io
import json
import subprocess
import sys
import types

import pytest
from kerncap.errors import KerncapError
from kerncap.replay import server as srv


class ReplayError(RuntimeError):
    pass


class CudaError(RuntimeError):
    pass


@pytest.fixture
def fake_core(monkeypatch):
    core = types.SimpleNamespace(ReplayError=ReplayError, CudaError=CudaError)
    monkeypatch.setitem(sys.modules, "kerncap._replay", core)
    return core


class FakeSession:
    def __init__(self, raise_on_replay=None, healthy=True):
        self.raise_on_replay = raise_on_replay
        self.session = types.SimpleNamespace(health=lambda: "" if healthy else "CUDA_ERROR_ILLEGAL_ADDRESS (700)")

    def replay(self, cubin, iterations, warmup, flush_l2, check=True, warm_l2=False, timer="events"):
        raise self.raise_on_replay


def run(server, *requests):
    out = io.StringIO()
    server.out = out
    status = server.serve([json.dumps(r) + "\n" for r in requests])
    return status, [json.loads(line) for line in out.getvalue().splitlines()]


def opened(session):
    s = srv.Server(io.StringIO())
    s.session = session
    return s


def test_sticky_cuda_error_is_fatal_and_ends_the_loop(fake_core):
    s = opened(FakeSession(CudaError("cuStreamSynchronize on kernel k failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)", 700)))
    status, resp = run(s, {"id": 1, "op": "replay"}, {"id": 2, "op": "info"})
    assert status == 3 and len(resp) == 1
    assert resp[0]["fatal"] and resp[0]["kind"] == "cuda" and resp[0]["code"] == 700
    assert "sticky" in resp[0]["error"] and resp[0]["hint"]


def test_non_sticky_cuda_error_on_a_healthy_context_is_not_fatal(fake_core):
    s = opened(FakeSession(CudaError("cuLaunchKernelEx on kernel k failed: CUDA_ERROR_INVALID_VALUE (1)", 1)))
    status, resp = run(s, {"id": 1, "op": "replay"}, {"id": 2, "op": "shutdown"})
    assert status == 0 and not resp[0]["fatal"] and resp[1]["ok"]


def test_unhealthy_context_makes_any_cuda_error_fatal(fake_core):
    s = opened(FakeSession(CudaError("cuMemcpyDtoH failed: CUDA_ERROR_INVALID_VALUE (1)", 1), healthy=False))
    status, resp = run(s, {"id": 1, "op": "replay"})
    assert status == 3 and resp[0]["fatal"]


@pytest.mark.parametrize("kind,fatal", [("variant", False), ("arch", False), ("capture", False),
                                        ("address", True), ("no_gpu", True)])
def test_replay_error_kinds(fake_core, kind, fatal):
    s = opened(FakeSession(ReplayError("something named", kind)))
    _, resp = run(s, {"id": 7, "op": "replay"})
    assert resp[0] == {"id": 7, "ok": False, "error": "something named", "hint": srv.HINTS.get(kind),
                       "kind": kind, "fatal": fatal, "code": None}


def test_kerncap_error_keeps_message_and_hint(fake_core):
    s = opened(FakeSession(KerncapError("cannot read cubin /x.cubin: No such file", "check the --cubin path")))
    _, resp = run(s, {"id": 1, "op": "replay"})
    assert resp[0]["kind"] == "input" and resp[0]["hint"] == "check the --cubin path" and not resp[0]["fatal"]


def test_internal_error_is_fatal_and_named(fake_core):
    s = opened(FakeSession(ZeroDivisionError("division by zero")))
    status, resp = run(s, {"id": 1, "op": "replay"})
    assert status == 3 and resp[0]["kind"] == "internal"
    assert "ZeroDivisionError" in resp[0]["error"] and "replay" in resp[0]["error"]


def test_requests_before_open_and_unknown_ops(fake_core):
    status, resp = run(srv.Server(io.StringIO()), {"id": 1, "op": "replay"}, {"id": 2, "op": "frobnicate"},
                       {"id": 3, "op": "shutdown"})
    assert status == 0
    assert "no capture open" in resp[0]["error"] and not resp[0]["fatal"]
    assert resp[1]["error"] == "unknown op 'frobnicate'"


def test_malformed_line_is_answered(fake_core):
    s = srv.Server(io.StringIO())
    out = io.StringIO()
    s.out = out
    s.serve(["{not json\n", "[1]\n"])
    resp = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(resp) == 2 and all(r["kind"] == "input" and "malformed" in r["error"] for r in resp)


def server_process(*requests):
    lines = "".join(json.dumps(r) + "\n" for r in requests)
    proc = subprocess.run([sys.executable, "-m", "kerncap.replay.server"], input=lines, capture_output=True,
                          text=True, timeout=120)
    return proc, [json.loads(line) for line in proc.stdout.splitlines()]


def test_real_server_open_of_a_missing_capture_is_fatal(tmp_path):
    proc, resp = server_process({"id": 1, "op": "open", "capture": str(tmp_path / "none")},
                                {"id": 2, "op": "info"})
    assert proc.returncode == 3 and len(resp) == 1
    assert resp[0]["kind"] == "capture" and "no capture at" in resp[0]["error"] and resp[0]["fatal"]


def test_real_server_debug_block_host_maps_the_range():
    base, size = 0x6F00_0000_0000, 64 << 20
    proc, resp = server_process({"id": 1, "op": "_debug_block_host", "base": base, "size": size},
                                {"id": 2, "op": "shutdown"})
    assert proc.returncode == 0, proc.stderr
    assert resp[0] == {"id": 1, "ok": True, "result": {"base": base}}


class FaultingSession(FakeSession):
    """A session whose launch faulted where the capture could not hold everything."""

    def __init__(self, program):
        super().__init__(CudaError("cuStreamSynchronize on kernel k failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)", 700))
        self.current_key, self.captured_key = program, "captured"

    def fault_context(self):
        return " The capture could not hold region 3 (host memory)"


@pytest.mark.parametrize("program,capture_hint", [("captured", True), ("variant.cubin", False)])
def test_a_fault_of_the_captured_cubin_is_blamed_on_the_capture_a_variants_is_not(fake_core, program, capture_hint):
    _, resp = run(opened(FaultingSession(program)), {"id": 1, "op": "replay"})
    assert "could not hold region 3" in resp[0]["error"] and resp[0]["fatal"]
    assert ("the cause is in the capture" in resp[0]["hint"]) is capture_hint
    if not capture_hint:
        assert resp[0]["hint"] == srv.HINTS["cuda"]  # check the variant's indexing
