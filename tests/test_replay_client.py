"""ReplayClient process handling against a scripted stand-in for the replay server.

The stand-in speaks the real protocol but does no CUDA work; the GPU suite
(tests/gpu) covers the real server. Its behaviour is chosen by the cubin name."""

import os
import sys
import textwrap

import pytest
from kerncap.errors import CaptureFormatError, KerncapError
from kerncap.replay.client import ReplayClient
from kerncap.replay.results import ReplayResult

FAKE_SERVER = textwrap.dedent('''
    import json, os, sys, time
    out = sys.stdout
    print("fake server starting", file=sys.stderr, flush=True)
    def send(obj):
        out.write(json.dumps(obj) + "\\n"); out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        rid, op, cubin = req["id"], req["op"], req.get("cubin") or ""
        if op == "open":
            if os.environ.get("FAKE_OPEN") == "no_gpu":
                send({"id": rid, "ok": False, "error": "cuInit failed: CUDA_ERROR_NO_DEVICE (100)",
                      "kind": "no_gpu", "fatal": True}); sys.exit(3)
            if os.environ.get("FAKE_OPEN", "").startswith("address"):
                # fail the first N opens (a counter file), like a host mapping in the way
                budget = int(os.environ["FAKE_OPEN"].split(":")[1])
                counter = os.environ["FAKE_COUNTER"]
                n = int(open(counter).read()) if os.path.exists(counter) else 0
                open(counter, "w").write(str(n + 1))
                if n < budget:
                    send({"id": rid, "ok": False, "error": "cannot reserve span 0 (regions 0) [0x7f00, +64 MiB) at its "
                          "captured address: cuMemAddressReserve placed it at 0x7f80 instead.",
                          "kind": "address", "fatal": True}); sys.exit(3)
            if os.environ.get("FAKE_OPEN") == "corrupt":
                send({"id": rid, "ok": False, "error": "payload blobs/ab.bin (region 0 pre-state chunk 0) is corrupt",
                      "kind": "capture", "fatal": True}); sys.exit(3)
            send({"id": rid, "ok": True, "result": {"capture": req["capture"], "pid": os.getpid(),
                                                    "sequence_order": req.get("sequence_order")}})
        elif op == "replay":
            if cubin.endswith("fault.cubin"):
                send({"id": rid, "ok": False, "error": "cuStreamSynchronize on kernel k failed: "
                      "CUDA_ERROR_ILLEGAL_ADDRESS (700)", "kind": "cuda", "fatal": True, "code": 700})
                sys.exit(3)
            if cubin.endswith("crash.cubin"):
                print("segfault-ish last words", file=sys.stderr, flush=True)
                os._exit(139)
            if cubin.endswith("hang.cubin"):
                time.sleep(60)
            if cubin.endswith("noisy.cubin"):
                out.write("not json\\n")
            times = [1.0, 2.0, 3.0]
            send({"id": rid, "ok": True, "result": {
                "times_ms": times, "median_ms": 2.0, "min_ms": 1.0, "max_ms": 3.0, "spread_pct": 80.0,
                "iterations": 3, "warmup": req["warmup"], "flush_l2": req["flush_l2"], "cubin": req.get("cubin"),
                "notes": [str(os.getpid())] + (["per_launch"] if req.get("per_launch") else [])}})
        elif op == "time_compare":  # answers after a while: longer than the client's timeout in the tests
            time.sleep(0.5)
            send({"id": rid, "ok": True, "result": {"max_seconds": req.get("max_seconds")}})
        elif op == "validate":
            if cubin.endswith("hinted.cubin"):  # the server's own hint, more precise than its kind's
                send({"id": rid, "ok": False, "error": "variant hinted.cubin takes 4 parameters, the captured k 3",
                      "hint": "keep k's parameter list (float, const float*, float*)", "kind": "variant",
                      "fatal": False, "code": 17}); continue
            send({"id": rid, "ok": False, "error": "variant v.cubin has no kernel k", "kind": "variant",
                  "fatal": False})
        elif op == "shutdown":
            send({"id": rid, "ok": True, "result": {}}); break
''')


@pytest.fixture
def server_cmd(tmp_path):
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    return [sys.executable, str(script)]


def pid_of(result: ReplayResult) -> str:
    return result.notes[0]


def test_replay_roundtrip_and_clean_shutdown(server_cmd, tmp_path):
    with ReplayClient(tmp_path, server_cmd=server_cmd) as rc:
        assert rc.info["capture"] == str(tmp_path)
        r = rc.replay(iterations=3, warmup=1)
        assert r.median_ms == 2.0 and r.warmup == 1 and r.cubin is None
        proc = rc._child.proc
    assert proc.wait(timeout=10) == 0 and rc._child is None


def test_cubin_paths_are_sent_absolute(server_cmd, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with ReplayClient(tmp_path, server_cmd=server_cmd) as rc:
        assert rc.replay(cubin="v.cubin").cubin == str(tmp_path / "v.cubin")


def test_sticky_error_raises_then_next_request_restarts(server_cmd, tmp_path):
    with ReplayClient(tmp_path, server_cmd=server_cmd) as rc:
        first = pid_of(rc.replay())
        with pytest.raises(KerncapError) as err:
            rc.replay(cubin="fault.cubin")
        assert "CUDA_ERROR_ILLEGAL_ADDRESS" in err.value.message and err.value.hint
        assert not rc.alive
        again = rc.replay()
        assert pid_of(again) != first and rc.starts == 2


def test_server_death_without_answer_reports_its_last_words(server_cmd, tmp_path):
    with ReplayClient(tmp_path, server_cmd=server_cmd) as rc:
        with pytest.raises(KerncapError) as err:
            rc.replay(cubin="crash.cubin")
        assert "died during replay" in err.value.message and "exit status 139" in err.value.message
        assert "segfault-ish last words" in err.value.message
        assert rc.replay().median_ms == 2.0 and rc.starts == 2


def test_non_fatal_error_keeps_the_server(server_cmd, tmp_path):
    with ReplayClient(tmp_path, server_cmd=server_cmd) as rc:
        pid = pid_of(rc.replay())
        with pytest.raises(KerncapError, match="has no kernel k") as err:
            rc.validate(cubin="v.cubin")
        assert "kerncap recompile" in err.value.hint  # default hint for kind "variant"
        assert pid_of(rc.replay()) == pid and rc.starts == 1


def test_an_error_keeps_the_servers_own_hint_and_its_kind_and_code(server_cmd, tmp_path):
    """A hint the server sent with its error reaches the caller as it is; the kind's
    generic hint stands in only where the server sent none."""
    with ReplayClient(tmp_path, server_cmd=server_cmd) as rc:
        with pytest.raises(KerncapError, match="takes 4 parameters") as err:
            rc.validate(cubin="hinted.cubin")
        assert err.value.hint == "keep k's parameter list (float, const float*, float*)"
        assert (err.value.kind, err.value.code) == ("variant", 17)
        with pytest.raises(KerncapError, match="has no kernel k") as err:
            rc.validate(cubin="v.cubin")
        assert err.value.hint.startswith("the variant must keep the captured kernel's name")
        assert (err.value.kind, err.value.code) == ("variant", None)


def test_no_gpu_is_a_plain_message(server_cmd, tmp_path):
    env = dict(os.environ, FAKE_OPEN="no_gpu")
    with pytest.raises(KerncapError) as err:
        ReplayClient(tmp_path, server_cmd=server_cmd, env=env).start()
    assert err.value.message.startswith("no CUDA GPU available: cuInit failed")
    assert "GPU" in err.value.hint


def test_corrupt_capture_maps_to_capture_format_error(server_cmd, tmp_path):
    env = dict(os.environ, FAKE_OPEN="corrupt")
    with pytest.raises(CaptureFormatError, match="corrupt"):
        with ReplayClient(tmp_path, server_cmd=server_cmd, env=env):
            pass


def test_timeout_kills_a_hanging_server(server_cmd, tmp_path):
    with ReplayClient(tmp_path, server_cmd=server_cmd, timeout=1.0) as rc:
        with pytest.raises(KerncapError, match="did not answer replay within 1 s"):
            rc.replay(cubin="hang.cubin")
        assert not rc.alive
        assert rc.replay().median_ms == 2.0


def test_stray_stdout_lines_are_skipped(server_cmd, tmp_path):
    with ReplayClient(tmp_path, server_cmd=server_cmd) as rc:
        assert rc.replay(cubin="noisy.cubin").median_ms == 2.0
        assert any("not json" in line for line in rc.server_log)


def test_missing_server_executable(tmp_path):
    with pytest.raises(KerncapError, match="cannot start the replay server"):
        ReplayClient(tmp_path, server_cmd=[str(tmp_path / "nope")]).start()


@pytest.mark.parametrize(("failures", "starts"), [(1, 2), (2, 3)])
def test_open_retries_in_a_fresh_server_when_the_address_range_is_taken(server_cmd, tmp_path, monkeypatch,
                                                                         failures, starts):
    monkeypatch.setenv("FAKE_OPEN", f"address:{failures}")
    monkeypatch.setenv("FAKE_COUNTER", str(tmp_path / "opens"))
    with ReplayClient(tmp_path, server_cmd=server_cmd) as rc:
        assert rc.info["capture"] == str(tmp_path) and rc.starts == starts


def test_open_gives_up_after_three_servers_and_says_so(server_cmd, tmp_path, monkeypatch):
    from kerncap.errors import AddressUnavailable

    monkeypatch.setenv("FAKE_OPEN", "address:9")
    monkeypatch.setenv("FAKE_COUNTER", str(tmp_path / "opens"))
    rc = ReplayClient(tmp_path, server_cmd=server_cmd)
    with pytest.raises(AddressUnavailable, match=r"placed it at 0x7f80 instead\. \(tried 3 fresh replay servers\)") as err:
        rc.start()
    assert "retry" in err.value.hint and rc._child is None
    assert (tmp_path / "opens").read_text() == "3"


def test_open_sends_the_sequence_order_only_when_one_is_asked_for(server_cmd, tmp_path):
    with ReplayClient(tmp_path, server_cmd=server_cmd, sequence_order="serial") as rc:
        assert rc.info["sequence_order"] == "serial"
    with ReplayClient(tmp_path, server_cmd=server_cmd) as rc:
        assert rc.info["sequence_order"] is None  # the server's default (streams)


def test_replay_per_launch_is_asked_of_the_server(server_cmd, tmp_path):
    with ReplayClient(tmp_path, server_cmd=server_cmd) as rc:
        assert rc.replay(per_launch=True).notes[1:] == ["per_launch"]
        assert rc.replay().notes[1:] == []


def test_a_timing_is_given_its_max_seconds_on_top_of_the_timeout(server_cmd, tmp_path):
    """time_compare may run for its own max_seconds: the request's limit is that plus the
    default timeout, not the client's (here tiny) timeout, which still bounds a replay."""
    with ReplayClient(tmp_path, server_cmd=server_cmd) as rc:
        rc.timeout = 0.2  # after the open, which waits on the server's start
        assert rc.request("time_compare", cubins=[], max_seconds=1.0) == {"max_seconds": 1.0}
        assert rc.starts == 1 and rc.alive
