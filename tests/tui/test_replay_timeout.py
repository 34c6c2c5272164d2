"""The workbench's session has a replay limit: a request that never answers kills the
replay server after $KERNCAP_REPLAY_TIMEOUT seconds (the build reports it), and the next
request starts a fresh server. Here over tests/fake_replay_server.py, whose replay takes
FAKE_SLOW seconds; tests/gpu/test_hang_gpu.py builds a kernel that really spins in the
workbench on the H200."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from kerncap import api
from kerncap.errors import KerncapError
from kerncap_tui import replay_limit

HERE = Path(__file__).resolve().parents[1]
AXPY = HERE / "fixtures" / "captures" / "axpy_small"
FAKE = [sys.executable, str(HERE / "fake_replay_server.py")]


def test_a_replay_that_never_answers_is_killed_and_the_next_one_is_served(tmp_path, monkeypatch):
    """Mutation caught: the workbench's session opened without a replay timeout."""
    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    monkeypatch.setenv(replay_limit.REPLAY_TIMEOUT_ENV, "1")
    monkeypatch.setenv("FAKE_SLOW", "20")
    with replay_limit.open_session(repro, compile_worker=False, server_cmd=FAKE) as session:
        with pytest.raises(KerncapError, match="did not answer replay within 1 s; killed it"):
            session.replay(api.ReplayRequest(iterations=3))
        monkeypatch.setenv("FAKE_SLOW", "0")  # the next server answers at once
        out = session.replay(api.ReplayRequest(iterations=3))
        assert out.iterations == 3 and session.replay_starts == 2


@pytest.mark.parametrize("text, ok", [("", 300.0), ("12.5", 12.5), ("x", None), ("0", None), ("-3", None),
                                      ("nan", None)])
def test_the_limit_comes_from_the_environment(monkeypatch, text, ok):
    monkeypatch.setenv(replay_limit.REPLAY_TIMEOUT_ENV, text)
    if ok is None:
        with pytest.raises(KerncapError, match=replay_limit.REPLAY_TIMEOUT_ENV):
            replay_limit.replay_timeout()
    else:
        assert replay_limit.replay_timeout() == ok
