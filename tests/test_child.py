"""The one child-process protocol (kerncap.core.child): JSON lines over stdin/stdout, the
child in its own process group, stderr kept as a tail. The replay client and the Triton
compile worker both run on it (their own tests: test_replay_client.py,
test_triton_worker.py); here the parts they share: a stray line, a timeout that kills the
whole group (grandchildren too), the exit status of a child that died, and that the
Triton worker now leads its own process group as the replay server always did."""

from __future__ import annotations

import os
import sys
import textwrap
import time

import pytest

from kerncap.core.child import ChildGone, ChildTimeout, JsonLinesChild

CHILD = textwrap.dedent('''
    import json, os, subprocess, sys, time
    from kerncap.core.child import protocol_channel, encode, decode
    out = protocol_channel()
    print("a print that must not reach the channel")
    sys.stderr.write("child started\\n"); sys.stderr.flush()
    for line in sys.stdin:
        req = decode(line)
        if req["op"] == "echo":
            out.write("not json\\n"); out.write(encode({"echo": req["value"]})); out.flush()
        elif req["op"] == "json_not_objects":  # valid JSON on the channel, but no reply
            out.write("[1, 2]\\n"); out.write('"text"\\n'); out.write("null\\n"); out.write("3\\n")
            out.write(encode({"reply": 1})); out.flush()
        elif req["op"] == "spawn_and_hang":
            g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
            out.write(encode({"grandchild": g.pid})); out.flush()
            time.sleep(120)
        elif req["op"] == "die":
            sys.stderr.write("last words\\n"); sys.stderr.flush()
            os._exit(7)
''')


def alive(pid: int) -> bool:
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def child(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    made = []

    def start():
        c = JsonLinesChild([sys.executable, str(script)], env=env)
        made.append(c)
        return c

    yield start
    for c in made:
        c.kill()


def test_lines_a_stray_line_and_the_process_group(child):
    c = child()
    assert os.getpgid(c.pid) == c.pid  # leads its own group
    c.send({"op": "echo", "value": [1, "two"]})
    assert c.receive(10) == {"echo": [1, "two"]}
    assert any("(unexpected output) not json" in line for line in c.log)
    c.close({"op": "quit-by-eof"}, wait=10)
    assert c.proc.returncode == 0
    assert "child started" in c.log


def test_a_json_line_that_is_no_object_is_logged_not_taken_for_the_reply(child):
    """Only a JSON object is a reply: a list, a string, null or a number that reached the
    channel is stray output, logged like a line that is not JSON at all."""
    c = child()
    c.send({"op": "json_not_objects"})
    assert c.receive(10) == {"reply": 1}
    stray = [line for line in c.log if line.startswith("(unexpected output)")]
    assert stray == ["(unexpected output) [1, 2]", '(unexpected output) "text"', "(unexpected output) null",
                     "(unexpected output) 3"]


def test_a_timeout_kills_the_whole_group(child):
    c = child()
    c.send({"op": "spawn_and_hang"})
    grandchild = c.receive(10)["grandchild"]
    assert alive(grandchild)
    with pytest.raises(ChildTimeout):
        c.receive(0.5)
    deadline = time.monotonic() + 10
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(grandchild) and not c.alive


def test_a_child_that_dies_says_how_with_its_last_words(child):
    c = child()
    c.send({"op": "die"})
    with pytest.raises(ChildGone) as gone:
        c.receive(10)
    assert gone.value.returncode == 7 and gone.value.how() == "exit status 7"
    assert "last words" in c.log
    with pytest.raises(ChildGone):
        c.send({"op": "echo", "value": 1})


def test_the_triton_compile_worker_leads_its_own_process_group(tmp_path):
    from kerncap.triton.worker import CompileWorker

    (tmp_path / "source").mkdir()  # no Triton spec: its warm-up fails, and it still serves
    with CompileWorker(tmp_path) as worker:
        pid = worker._proc.pid
        assert os.getpgid(pid) == pid
        ready = worker.wait_ready()
        assert ready["ok"] is False and ready["message"]
    assert not alive(pid)
