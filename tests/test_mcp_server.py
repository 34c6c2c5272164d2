"""`kerncap mcp`: the MCP server driven only through the official SDK's client, over
copies of the committed H200 captures. In-process (the SDK's in-memory transport) for
the tools, and over stdio in a subprocess for a client that disconnects mid-request.

Tools that need a GPU answer with the engine's own error here (no replay core or no
GPU); tests that need a replay server that answers use tests/fake_replay_server.py.
The GPU suite drives the same tools on the H200 (tests/gpu/test_mcp_gpu.py)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.session import ClientSession

from kerncap.errors import UsageError
from kerncap.frontends.mcp_server import build_server, parse_http

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "captures"
FAKE = [sys.executable, str(HERE / "fake_replay_server.py")]
REPO = HERE.parent


@pytest.fixture
def root(tmp_path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    for name in ("axpy_small", "graph_explicit"):
        shutil.copytree(FIXTURES / name, r / name)
    return r


def call(server, *calls, progress=None):
    """Run (tool, args) calls in one client session; the results in order."""
    async def go():
        out = []
        async with Client(server) as c:
            for name, args in calls:
                out.append(await c.call_tool(name, args, progress_callback=progress))
        return out
    return anyio.run(go)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_tools_are_listed_with_input_schemas(root):
    async def go():
        async with Client(build_server([root])) as c:
            return (await c.list_tools()).tools
    tools = {t.name: t for t in anyio.run(go)}
    assert {"profile", "extract", "info", "list_reproducers", "list_sources", "read_source", "write_source",
            "recompile", "list_configs", "validate", "replay", "compare", "release", "dump"} <= set(tools)
    schema = tools["validate"].input_schema
    assert schema["required"] == ["reproducer"]
    assert {"cubin", "atol", "rtol", "dtype", "region_dtypes"} <= set(schema["properties"])
    assert "ctx" not in schema["properties"]
    assert tools["replay"].input_schema["properties"]["iterations"]["minimum"] == 1
    intercept = json.dumps(tools["extract"].input_schema["properties"]["intercept"])
    assert '"cupti"' in intercept and '"entry"' in intercept


def test_info_is_the_cli_json(root, capsys):
    from kerncap.cli import main

    [r] = call(build_server([root]), ("info", {"reproducer": "axpy_small"}))
    assert not r.is_error
    assert main(["info", str(root / "axpy_small"), "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert r.structured_content == json.loads(json.dumps(cli))
    assert r.structured_content["kernel"]["name"] == "_Z12axpy_inplacefPKfPfi"


def test_dump_writes_npy_under_a_root_and_refuses_outside(root, tmp_path):
    import numpy as np

    ok, outside, bad_shape = call(build_server([root]),
                                  ("dump", {"reproducer": "axpy_small", "output": "dumps/a", "items": ["1"],
                                            "shape": [64, 64]}),
                                  ("dump", {"reproducer": "axpy_small", "output": str(tmp_path / "elsewhere")}),
                                  ("dump", {"reproducer": "axpy_small", "output": "dumps/b", "items": ["1"],
                                            "shape": [63, 64]}))
    assert not ok.is_error, ok.content
    arrays = ok.structured_content["arrays"]
    assert [a["state"] for a in arrays] == ["pre", "post"] and arrays[0]["shape"] == [64, 64]
    assert np.load(arrays[1]["path"]).shape == (64, 64) and Path(arrays[1]["path"]).is_relative_to(root)
    assert outside.is_error and bad_shape.is_error
    assert "does not fit region 1" in bad_shape.content[0].text


def test_list_reproducers_under_the_roots(root):
    [r] = call(build_server([root]), ("list_reproducers", {}))
    paths = sorted(Path(x["path"]).name for x in r.structured_content["reproducers"])
    assert paths == ["axpy_small", "graph_explicit"]


def test_every_root_is_usable_not_only_the_first(root, tmp_path):
    """`kerncap mcp --root A --root B`: a reproducer, a cubin and an output under B are
    used like A's (absolute paths; relative ones are the first root's); a path under
    neither is still refused."""
    second = tmp_path / "second"
    shutil.copytree(FIXTURES / "axpy_small", second / "other")
    cubin = next((second / "other" / "capture" / "cubins").iterdir())
    info, listed, dumped, validated, outside = call(
        build_server([root, second], replay_server_cmd=FAKE),
        ("info", {"reproducer": str(second / "other")}),
        ("list_reproducers", {}),
        ("dump", {"reproducer": str(second / "other"), "output": str(second / "dumps"), "items": ["1"]}),
        ("validate", {"reproducer": "axpy_small", "cubin": str(cubin)}),
        ("info", {"reproducer": str(tmp_path / "root" / ".." / "elsewhere")}))
    assert not info.is_error, info.content
    assert info.structured_content["kernel"]["name"] == "_Z12axpy_inplacefPKfPfi"
    assert sorted(Path(x["path"]).name for x in listed.structured_content["reproducers"]) == \
        ["axpy_small", "graph_explicit", "other"]
    assert not dumped.is_error, dumped.content
    assert all(Path(a["path"]).is_relative_to(second / "dumps") for a in dumped.structured_content["arrays"])
    assert not validated.is_error, validated.content  # the cubin under the second root is replayed
    assert validated.structured_content["cubin"] == str(cubin)
    assert outside.is_error and "outside the directories this server may use" in outside.content[0].text


def test_sources_read_edit_and_recompile(root):
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip("no nvcc: recompile needs the CUDA toolkit")
    server = build_server([root])
    listed, read = call(server, ("list_sources", {"reproducer": "graph_explicit"}),
                        ("read_source", {"reproducer": "graph_explicit", "file": "graph_explicit.cu"}))
    files = {f["path"]: f for f in listed.structured_content["files"]}
    assert files["graph_explicit.cu"]["editable"] and not files["build.json"]["editable"]
    text = read.structured_content["text"]
    assert "gx_target" in text
    edited = text.replace("__global__ void gx_target", "// edited by an agent\n__global__ void gx_target", 1)
    assert edited != text
    wrote, again, built = call(server, ("write_source", {"reproducer": "graph_explicit", "file": "graph_explicit.cu",
                                                         "text": edited}),
                               ("read_source", {"reproducer": "graph_explicit", "file": "graph_explicit.cu"}),
                               ("recompile", {"reproducer": str(root / "graph_explicit")}))
    assert not wrote.is_error and wrote.structured_content["written"]["size"] == len(edited.encode())
    assert again.structured_content["text"] == edited
    assert (root / "graph_explicit" / "source" / "graph_explicit.cu").read_text() == edited
    assert not built.is_error, built.content[0].text
    cubin = Path(built.structured_content["cubin"])
    assert cubin.is_file() and cubin.parent == root / "graph_explicit" / "variants"
    assert built.structured_content["command"][0].endswith("nvcc")


def test_files_under_a_hidden_directory_of_source_are_no_sources(root):
    """A source/ kept under git (source/.git/) or beside an editor's settings (.vscode/,
    a .cache/ further down): the files in those hidden directories are no sources. MCP's
    list_sources does not list them and the sources' fingerprint (what tells a build that
    nothing changed) ignores them; a file beside them is a source. Mutation caught:
    is_source_file judging the file's own name alone."""
    from kerncap import api

    repro = root / "graph_explicit"
    src = repro / "source"
    server = build_server([root])
    [listed] = call(server, ("list_sources", {"reproducer": "graph_explicit"}))
    names = sorted(f["path"] for f in listed.structured_content["files"])
    before = api.source_fingerprint(src)
    for rel in (".git/HEAD", ".git/objects/ab/cdef01", ".vscode/settings.json", "sub/.cache/k.cu"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("not a source\n")
    [listed] = call(server, ("list_sources", {"reproducer": "graph_explicit"}))
    assert sorted(f["path"] for f in listed.structured_content["files"]) == names
    assert sorted(f.path for f in api.list_sources(repro)) == names
    assert api.source_fingerprint(src) == before
    (src / "sub" / "k.cu").write_text("// a source\n")
    assert api.source_fingerprint(src) != before
    assert [f.path for f in api.list_sources(repro)] == sorted([*names, "sub/k.cu"])

def test_gpu_tools_answer_with_the_engines_error(root):
    server = build_server([root])
    results = call(server, ("validate", {"reproducer": "axpy_small"}),
                   ("replay", {"reproducer": "axpy_small", "iterations": 5}),
                   ("compare", {"reproducer": "axpy_small", "cubins": ["capture/cubins/" + next(
                       (root / "axpy_small" / "capture" / "cubins").iterdir()).name]}))
    for r in results:
        assert r.is_error
        err = r.structured_content["error"]
        assert err["exit_status"] == 3 and err["hint"]
        assert "replay core not built" in err["message"] or "GPU" in err["message"] or "CUDA" in err["message"]
        assert "hint:" in r.content[0].text


def test_list_configs_of_a_cuda_reproducer_says_it_is_not_triton(root):
    [r] = call(build_server([root]), ("list_configs", {"reproducer": "axpy_small"}))
    assert r.is_error and r.content[0].text


@pytest.mark.parametrize("tool,args,what", [
    ("info", {"reproducer": "/etc"}, "reproducer /etc is outside"),
    ("info", {"reproducer": "../"}, "is outside"),
    ("read_source", {"reproducer": "graph_explicit", "file": "../reproducer.json"}, "without '..'"),
    ("read_source", {"reproducer": "graph_explicit", "file": "/etc/passwd"}, "relative"),
    ("validate", {"reproducer": "axpy_small", "cubin": "/etc/passwd"}, "cubin /etc/passwd is outside"),
    ("extract", {"kernel": "k", "command": ["true"], "output": "/tmp/elsewhere"}, "output /tmp/elsewhere is outside"),
    ("profile", {"command": ["true"], "cwd": "/"}, "cwd / is outside"),
])
def test_paths_outside_the_roots_are_refused(root, tool, args, what):
    [r] = call(build_server([root]), (tool, args))
    assert r.is_error
    assert what in r.content[0].text
    assert r.structured_content["error"]["type"] == "UsageError"
    assert not Path("/tmp/elsewhere").exists()


def test_a_symlink_out_of_the_root_is_refused(root, tmp_path):
    outside = tmp_path / "outside"
    shutil.copytree(FIXTURES / "axpy_small", outside)
    (root / "link").symlink_to(outside)
    (root / "graph_explicit" / "source" / "escape.cu").symlink_to("/etc/hostname")
    server = build_server([root])
    via_link, escape = call(server, ("info", {"reproducer": "link"}),
                            ("read_source", {"reproducer": "graph_explicit", "file": "escape.cu"}))
    assert via_link.is_error and "outside" in via_link.content[0].text
    assert escape.is_error and "outside" in escape.content[0].text


def test_records_and_non_reproducers_are_refused(root):
    (root / "plain").mkdir()
    server = build_server([root])
    record, plain = call(server, ("write_source", {"reproducer": "graph_explicit", "file": "build.json", "text": "{}"}),
                         ("info", {"reproducer": "plain"}))
    assert record.is_error and "record" in record.content[0].text
    assert json.loads((root / "graph_explicit" / "source" / "build.json").read_text())["kernel"]
    assert plain.is_error and "not a reproducer" in plain.content[0].text


@pytest.mark.parametrize("args,field", [
    ({}, "reproducer"),                                            # missing
    ({"reproducer": 5}, "reproducer"),                             # wrong type
    ({"reproducer": "axpy_small", "iterations": 0}, "iterations"),  # out of range
    ({"reproducer": "axpy_small", "iterations": "many"}, "iterations"),
])
def test_malformed_arguments_are_tool_errors(root, args, field):
    [r] = call(build_server([root]), ("replay", args))
    assert r.is_error
    assert field in r.content[0].text


def test_unknown_tool_is_an_error(root):
    async def go():
        async with Client(build_server([root])) as c:
            return await c.call_tool("format_disk", {})
    try:
        r = anyio.run(go)
    except Exception as exc:  # the SDK may raise a protocol error instead
        assert "format_disk" in str(exc)
    else:
        assert r.is_error and "format_disk" in r.content[0].text


def fake_pids(d: Path) -> list[int]:
    return [int(p.name) for p in d.iterdir() if p.name.isdigit()]


def test_resident_server_is_reused_and_killed_when_the_session_ends(root, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_PIDS", str(tmp_path))
    server = build_server([root], replay_server_cmd=FAKE)
    state = server.kerncap
    during = []

    async def go():
        async with Client(server) as c:
            out = [await c.call_tool("validate", {"reproducer": "axpy_small"}),
                   await c.call_tool("replay", {"reproducer": "axpy_small", "iterations": 3}),
                   await c.call_tool("replay", {"reproducer": "graph_explicit", "iterations": 3}),
                   await c.call_tool("replay", {"reproducer": "axpy_small", "iterations": 3}),
                   await c.call_tool("compare", {"reproducer": "axpy_small", "rounds": 5, "iterations": 4, "cubins": [str(next(
                       (root / "axpy_small" / "capture" / "cubins").iterdir()))]})]
            during.extend(fake_pids(tmp_path))
            assert len(during) == 2 and all(alive(p) for p in during)
            assert sorted(p.name for p in state.pool.resident) == ["axpy_small", "graph_explicit"]
            return out
    v1, r1, other, r2, cmp = anyio.run(go)
    assert v1.structured_content["passed"] is True
    assert r1.structured_content["notes"] == r2.structured_content["notes"]  # the same resident server
    assert r1.structured_content["notes"] != other.structured_content["notes"]  # one per reproducer
    programs = cmp.structured_content["programs"]
    assert [len(p["rounds"]) for p in programs] == [5, 5] and all(len(r) == 4 for p in programs for r in p["rounds"])
    assert programs[0]["interval"] is None and programs[1]["interval"]["verdict"] == "within noise"
    assert not any(alive(p) for p in during), "the session ended but its replay servers live on"



def test_the_least_recently_used_session_is_the_one_closed_at_the_limit(root, tmp_path, monkeypatch):
    """Two resident sessions at most: a, b, a again, then c closes b (used last before a
    was used again), not a (opened first); a's next request finds its server still up.
    Mutation caught: the sessions kept in the order they were opened."""
    monkeypatch.setenv("FAKE_PIDS", str(tmp_path))
    shutil.copytree(FIXTURES / "axpy_older", root / "axpy_older")
    server = build_server([root], replay_server_cmd=FAKE, max_resident=2)
    state = server.kerncap

    async def go():
        async with Client(server) as c:
            def replay(name):
                return c.call_tool("replay", {"reproducer": name, "iterations": 2})
            a1, b = await replay("axpy_small"), await replay("graph_explicit")
            a2, _ = await replay("axpy_small"), await replay("axpy_older")
            resident = [p.name for p in state.pool.resident]
            a3 = await replay("axpy_small")
            return a1, b, a2, a3, resident
    a1, b, a2, a3, resident = anyio.run(go)
    assert resident == ["axpy_small", "axpy_older"]  # least recently used first
    pid = a1.structured_content["notes"]
    assert a2.structured_content["notes"] == pid == a3.structured_content["notes"]  # never restarted
    assert b.structured_content["notes"] != pid
    assert not alive(int(b.structured_content["notes"][0].split()[-1]))

def test_a_closed_or_killed_pool_refuses_every_later_request(root):
    """After kill_all (the client went away) or close_all, the pool opens no session again:
    a later request is refused, not served by a fresh session nobody would end."""
    from kerncap import api

    for end in ("kill_all", "close_all"):
        pool = api.SessionPool(server_cmd=FAKE)
        assert pool.run(root / "axpy_small", lambda s: s.root.name) == "axpy_small"
        getattr(pool, end)()
        with pytest.raises(RuntimeError, match="the session pool is closed"):
            pool.run(root / "graph_explicit", lambda s: s.root.name)
        assert pool.resident == [], end


def test_release_shuts_the_resident_server_down(root, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_PIDS", str(tmp_path))
    server = build_server([root], replay_server_cmd=FAKE)
    r, rel, again = call(server, ("replay", {"reproducer": "axpy_small", "iterations": 2}),
                         ("release", {"reproducer": "axpy_small"}), ("release", {"reproducer": "axpy_small"}))
    assert rel.structured_content["released"] is True and again.structured_content["released"] is False
    assert server.kerncap.pool.resident == []


def test_long_operations_report_progress(root, monkeypatch):
    monkeypatch.setenv("FAKE_SLOW", "2.5")
    seen = []

    async def progress(p, total, message):
        seen.append((p, message))

    [r] = call(build_server([root], replay_server_cmd=FAKE), ("validate", {"reproducer": "axpy_small"}),
               progress=progress)
    assert not r.is_error
    assert seen and all(m.startswith("validate:") for _, m in seen)
    assert [p for p, _ in seen] == sorted(p for p, _ in seen)


SERVE = """
import sys
from kerncap.frontends.mcp_server import serve
serve([sys.argv[1]], replay_server_cmd=sys.argv[2:])
"""


def _hanging_setup(root: Path, tmp_path: Path) -> tuple[Path, dict]:
    pids = tmp_path / "pids"
    pids.mkdir()
    hang = root / "axpy_small" / "variants" / "hang.cubin"
    hang.parent.mkdir()
    hang.write_bytes(b"not really a cubin")
    env = {**os.environ, "FAKE_PIDS": str(pids), "FAKE_HANG": "hang.cubin",
           "PYTHONPATH": os.pathsep.join([str(REPO / "engine"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    return pids, env


def _wait_dead(pids: list[int], seconds: float = 15) -> bool:
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not any(alive(p) for p in pids)


def test_client_cancelling_mid_request_leaves_no_replay_server(root, tmp_path):
    pids, env = _hanging_setup(root, tmp_path)
    params = StdioServerParameters(command=sys.executable, args=["-c", SERVE, str(root), *FAKE], env=env)

    async def go():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                ok = await session.call_tool("validate", {"reproducer": "axpy_small"})
                assert not ok.is_error, ok.content
                with anyio.move_on_after(3):  # the replay hangs; the client gives up on it
                    await session.call_tool("replay", {"reproducer": "axpy_small", "cubin": "variants/hang.cubin"})
        return fake_pids(pids)

    started = anyio.run(go)
    assert started, "the fake replay server never started"
    assert _wait_dead(started), "a replay server outlived its cancelled request"


def _jsonrpc(proc, obj) -> None:
    proc.stdin.write((json.dumps(obj) + "\n").encode())
    proc.stdin.flush()


@pytest.mark.parametrize("how", ["stdin closed", "SIGTERM"])
def test_client_vanishing_mid_request_leaves_no_replay_server(root, tmp_path, how):
    """The client goes away without cancelling: its end of stdio closes, or it terminates
    the server process. (Raw JSON-RPC here: the SDK's client always cancels first.)"""
    import signal
    import subprocess

    pids, env = _hanging_setup(root, tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(root), *FAKE], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        _jsonrpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
        assert b'"result"' in proc.stdout.readline()
        _jsonrpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        _jsonrpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "replay", "arguments": {"reproducer": "axpy_small", "cubin": "variants/hang.cubin"}}})
        deadline = time.monotonic() + 20
        while not fake_pids(pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        started = fake_pids(pids)
        assert started and all(alive(p) for p in started)
        time.sleep(0.5)  # the request is in flight in the hanging replay
        if how == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        else:
            proc.stdin.close()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _wait_dead(started), f"a replay server outlived its MCP server ({how})"


def test_http_address_is_checked():
    assert parse_http("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert parse_http("[::1]:9000") == ("::1", 9000)
    # no host: loopback, never every interface (an empty host binds 0.0.0.0)
    assert parse_http(":8765") == ("127.0.0.1", 8765)
    assert parse_http("[]:8765") == ("127.0.0.1", 8765)
    with pytest.raises(UsageError):
        parse_http("localhost")
    with pytest.raises(UsageError):
        parse_http("h:70000")
    # the port's bounds: 1 and 65535 are ports; 0 (the OS picks one, which no client knows) is not
    assert parse_http("127.0.0.1:1") == ("127.0.0.1", 1)
    assert parse_http("127.0.0.1:65535") == ("127.0.0.1", 65535)
    for text in ("127.0.0.1:0", ":0", "h:65536"):
        with pytest.raises(UsageError):
            parse_http(text)


def test_cli_refuses_a_missing_root(tmp_path, capsys):
    from kerncap.cli import main

    assert main(["mcp", "--root", str(tmp_path / "nope")]) == 2
    assert "--root" in capsys.readouterr().err


def test_streamable_http(root):
    import socket
    import subprocess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "engine"), str(REPO),
                                                         os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "kerncap", "mcp", "--root", str(root), "--http",
                             f"127.0.0.1:{port}"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        async def go():
            # until it listens: the server imports the MCP SDK, uvicorn and the engine first,
            # which took over 30 s on CI's loaded two-core machine; a dead server says why
            deadline = time.monotonic() + 180
            while True:
                assert proc.poll() is None, proc.stderr.read().decode()
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        break
                except OSError:
                    assert time.monotonic() < deadline, "the MCP HTTP server did not listen within 180 s"
                    await anyio.sleep(0.1)
            async with Client(f"http://127.0.0.1:{port}/mcp") as c:
                return await c.call_tool("info", {"reproducer": "axpy_small"})
        r = anyio.run(go)
        assert not r.is_error and r.structured_content["kernel"]["name"] == "_Z12axpy_inplacefPKfPfi"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_validate_tool_checks_perturbed_inputs_on_the_resident_server(tmp_path, monkeypatch):
    """Issue 14 through MCP: `perturb` runs the captured kernel and the variant on
    perturbed inputs (the replay core simulated in numpy, tests/replay_sim.py)."""
    import replay_sim as sim

    repro = sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": sim.axpy, "abs.cubin": sim.axpy_abs})
    server = build_server([tmp_path])
    plain, perturbed = call(server, ("validate", {"reproducer": str(repro), "cubin": str(tmp_path / "abs.cubin")}),
                            ("validate", {"reproducer": str(repro), "cubin": str(tmp_path / "abs.cubin"),
                                          "perturb": 3, "seed": 1}))
    assert plain.structured_content["passed"] is True  # the captured input alone cannot tell
    doc = perturbed.structured_content
    assert doc["passed"] is False and doc["verdict"] == "fail" and doc["perturb"] == 3
    assert doc["summary"].startswith("FAIL on 4 inputs of 1 reproducer (1 captured + 3 perturbed)")


def test_ncu_tool_profiles_one_launch_and_reuses_the_stored_report(root, tmp_path, monkeypatch):
    """Issue 15 through MCP, with tests/fixtures/tools/fake_cuda_tool.py as ncu on PATH
    (it speaks the replay server's protocol; the GPU suite runs the real ncu)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fake_cuda_tool", FIXTURES.parent / "tools" / "fake_cuda_tool.py")
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    bin_dir = fake.install(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_TOOL_ARGV", str(tmp_path / "argv.json"))
    monkeypatch.setenv("FAKE_TOOL_MODE", "ok")
    first, again = call(build_server([root]), ("ncu", {"reproducer": "axpy_small", "warmup": 2}),
                        ("ncu", {"reproducer": "axpy_small", "warmup": 2}))
    assert not first.is_error, first.content[0].text
    doc = first.structured_content
    assert doc["metrics"]["duration_ns"] == 80256.0 and doc["label"] == "captured cubin" and doc["warmup"] == 2
    assert Path(doc["report"]).is_file() and any(f["rule"] == "AchievedOccupancy" for f in doc["findings"])
    assert again.structured_content["created"] == doc["created"]  # reused, not run again


def test_info_and_validate_take_a_reproducer_set(root, fake_set, monkeypatch, tmp_path):
    """A set directory is accepted by `info` (its members) and `validate` (every member,
    each in a replay server of its own: here the simulated core of tests/replay_sim.py
    over the members' real H200 capture; the GPU suite runs the real one). Mutation
    caught: MCP validate of a set checking only its first member."""
    import replay_sim as sim

    fake_set(root / "axpy-set")
    info, = call(build_server([root]), ("info", {"reproducer": "axpy-set"}))
    assert not info.is_error and info.structured_content["set"] is True
    assert [m["dispatch"] for m in info.structured_content["members"]] == [3, 17]
    sim.axpy_reproducer(tmp_path / "sim", monkeypatch, {"captured": sim.axpy})
    valid, timed, other = call(build_server([root]), ("validate", {"reproducer": "axpy-set"}),
                               ("replay", {"reproducer": "axpy-set"}), ("dump", {"reproducer": "axpy-set",
                                                                                 "output": "out"}))
    assert not valid.is_error, valid.content[0].text
    report = valid.structured_content
    assert report["set"] is True and report["verdict"] == "pass"
    assert [Path(r["reproducer"]).relative_to(root / "axpy-set").as_posix() for r in report["reproducers"]] == [
        "members/0", "members/1"]
    assert report["summary"] == "PASS on 2 inputs of 2 reproducers (2 captured + 0 perturbed)"
    # replay takes a set as `kerncap replay SET` does (issue 45: MCP refused it); dump
    # refuses it in the engine's words (MCP no longer tests the path's shape)
    assert not timed.is_error, timed.content[0].text
    assert [m["index"] for m in timed.structured_content["members"]] == [0, 1]
    assert timed.structured_content["set"] == str(root / "axpy-set")
    assert other.is_error and "is a reproducer set: this works on one reproducer" in other.content[0].text
    assert "members/0" in other.content[0].text


def test_an_agent_edits_a_sets_shared_source(root, fake_set):
    """MCP's build took a set but write_source refused one ("is not a reproducer"): an
    agent could not edit what `recompile SET` builds from. The source tools now reach the
    set's source/, and a sequence's `kernel` on a set is refused by the engine."""
    fake_set(root / "axpy-set")
    (root / "axpy-set" / "source").mkdir(exist_ok=True)
    wrote, listed, read, kernel = call(
        build_server([root]), ("write_source", {"reproducer": "axpy-set", "file": "axpy.cu", "text": "// set\n"}),
        ("list_sources", {"reproducer": "axpy-set"}), ("read_source", {"reproducer": "axpy-set", "file": "axpy.cu"}),
        ("list_sources", {"reproducer": "axpy-set", "kernel": "0"}))
    assert not wrote.is_error, wrote.content[0].text
    assert (root / "axpy-set" / "source" / "axpy.cu").read_text() == "// set\n"
    assert listed.structured_content["source_dir"] == str(root / "axpy-set" / "source")
    assert [f["path"] for f in listed.structured_content["files"]] == ["axpy.cu"]
    assert read.structured_content["text"] == "// set\n"
    assert kernel.is_error and "is a reproducer set" in kernel.content[0].text


def test_extract_selects_a_sequence_through_the_engines_arguments(root, monkeypatch):
    """MCP's extract takes a sequence (docs/sequences.md) as `kerncap extract --sequence`
    does: the same SequenceRequest and NVTX Selection reach api.extract; a run without its
    bound is refused with the CLI's message before any app runs."""
    from kerncap import api
    from kerncap.errors import KerncapError

    seen = {}

    def fake_extract(kernel, command, **kw):
        seen.update(kernel=kernel, **kw)
        raise KerncapError("stopped by the test")

    [unbounded] = call(build_server([root]), ("extract", {"kernel": "k", "command": ["true"], "sequence": "run"}))
    assert unbounded.is_error and "--sequence run needs --count C or --until PATTERN" in unbounded.content[0].text
    monkeypatch.setattr(api, "extract", fake_extract)

    async def go():
        async with Client(build_server([root])) as c:
            return (await c.list_tools()).tools
    tools = {t.name: t for t in anyio.run(go)}
    schema = json.dumps(tools["extract"].input_schema["properties"]["sequence"])
    assert all(f'"{m}"' in schema for m in api.SEQUENCE_MODES)
    assert "kernel" in tools["build"].input_schema["properties"]  # a sequence's build names its kernel
    [nvtx] = call(build_server([root]), ("extract", {"kernel": "", "command": ["true"], "sequence": "nvtx",
                                                     "nvtx": "step.1/layer.1", "dispatch": 2}))
    assert nvtx.is_error and "stopped by the test" in nvtx.content[0].text
    assert seen["sequence"] == api.SequenceRequest("nvtx") and seen["selection"].nvtx == "step.1/layer.1"
    assert seen["dispatch"] == 2 and seen["output"].name.startswith("step.1_layer.1")


def test_an_app_output_line_split_across_reads_is_one_line():
    """The app's output arrives in whatever pieces the pipe gives: a line split across two
    reads (or interleaved with the other stream's) is one line of the tail, whole."""
    from kerncap.frontends.mcp_server import _Tail

    tail = _Tail()
    tail("stdout", b"first li")
    tail("stderr", b"err")
    tail("stdout", b"ne\nsec")
    tail("stderr", b"or: bad\n")
    tail("stdout", b"ond\n")
    assert tail.lines == ["stdout: first line", "stderr: error: bad", "stdout: second"]


def test_profile_returns_the_last_lines_the_app_wrote(tmp_path, monkeypatch):
    """An app's output never reaches the stdio transport: `profile` returns its tail, the
    last APP_OUTPUT_LINES lines (an error an app prints last is what an agent needs), not
    its first ones. The app is test_profile_run's stand-in: it writes the profile the
    capture library would (an empty KERNCAP_INJECT_LIB stands for the library)."""
    from test_profile_run import KERNELS, PROFILING_APP

    from kerncap.frontends.mcp_server import APP_OUTPUT_LINES

    app = tmp_path / "app.py"
    app.write_text(PROFILING_APP)
    lib = tmp_path / "libkerncap_inject.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("KERNCAP_INJECT_LIB", str(lib))
    lines = [f"line {i}" for i in range(APP_OUTPUT_LINES + 60)]
    spec = {"kernels": KERNELS, "stderr": lines}
    [r] = call(build_server([tmp_path]), ("profile", {"command": [sys.executable, str(app)],
                                                      "env": {"FAKE_SPEC": json.dumps(spec)}}))
    assert not r.is_error, r.content[0].text
    tail = r.structured_content["app_output_tail"]
    # The app's one stdout line (block-buffered: written at its exit, just after stderr)
    # comes through another pipe: where it falls among the stderr lines is the pumps' order.
    stderr = [t for t in tail if t.startswith("stderr: ")]
    assert len(tail) == APP_OUTPUT_LINES and len(stderr) >= APP_OUTPUT_LINES - 1, tail[:3]
    assert stderr == [f"stderr: {line}" for line in lines[-len(stderr):]], stderr[:3]
    assert [k["name"] for k in r.structured_content["kernels"]] == ["_Z4gemmPf", "add_kernel"]


def test_profile_runs_the_app_in_the_cwd_given(tmp_path, monkeypatch):
    """MCP's `profile` runs the app in its `cwd` (relative to the first root), as the CLI
    runs it in the shell's: an app started as `python app.py` from its own directory is
    found there and sees that directory as its working one. Mutation caught: `cwd` ignored
    (the app ran in the first root, where no app.py is)."""
    from test_profile_run import KERNELS, PROFILING_APP

    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text("import os, sys\nprint('cwd=' + os.getcwd(), file=sys.stderr)\n" + PROFILING_APP)
    lib = tmp_path / "libkerncap_inject.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("KERNCAP_INJECT_LIB", str(lib))
    [r] = call(build_server([tmp_path]), ("profile", {"command": [sys.executable, "app.py"], "cwd": "work",
                                                      "env": {"FAKE_SPEC": json.dumps({"kernels": KERNELS})}}))
    assert not r.is_error, r.content[0].text
    assert f"stderr: cwd={work.resolve()}" in r.structured_content["app_output_tail"]
    assert [k["name"] for k in r.structured_content["kernels"]] == ["_Z4gemmPf", "add_kernel"]


def test_list_reproducers_finds_those_under_a_roots_reproducers_directory(root):
    """A root's reproducers/ directory (where `extract --output reproducers/NAME` puts them)
    is listed with the root's own children. Mutation caught: only the roots themselves
    searched."""
    shutil.copytree(FIXTURES / "axpy_small", root / "reproducers" / "nested")
    [r] = call(build_server([root]), ("list_reproducers", {}))
    assert not r.is_error, r.content
    paths = sorted(Path(x["path"]).resolve() for x in r.structured_content["reproducers"])
    assert root.resolve() / "reproducers" / "nested" in paths, paths
    assert {p.name for p in paths} == {"axpy_small", "graph_explicit", "nested"}
