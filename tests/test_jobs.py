"""Stopping the app's whole process tree (kerncap.capture.jobs through kerncap.capture.run.run_app):
workers in other sessions, orphans re-parented away from the app, processes that ignore
SIGTERM (like a rank blocked in an NCCL collective) -- none may outlive the stop."""

from __future__ import annotations

import os
import sys
import textwrap
import time

from kerncap.capture.jobs import ProcessTree, StopReport, read_process_table
from kerncap.capture.run import run_app

# A launcher that starts a worker in a session of its own (as torchrun does), which
# starts a grandchild that ignores SIGTERM; the worker then exits, orphaning it.
JOB = textwrap.dedent(
    r'''
    import os, signal, subprocess, sys, time
    pids = sys.argv[1]
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    worker = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', %r]); "
              "open(%r, 'a').write('grandchild %%d\\n' %% p.pid); time.sleep(0.5)") % (stubborn, pids)
    w = subprocess.Popen([sys.executable, "-c", worker], start_new_session=True)
    open(pids, "a").write("worker %d\n" % w.pid)
    open(pids, "a").write("launcher %d\n" % os.getpid())
    open(sys.argv[2], "w").write("ready")
    time.sleep(600)
    '''
)


def alive(pid: int) -> bool:
    table = read_process_table()
    if pid not in table:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_stop_reaches_other_sessions_and_orphans_and_sigterm_ignorers(tmp_path):
    pids, ready = tmp_path / "pids", tmp_path / "ready"
    app = tmp_path / "job.py"
    app.write_text(JOB)
    t0 = time.monotonic()

    def done():  # the "capture" is on disk once the grandchild exists and the worker has gone
        text = pids.read_text() if pids.exists() else ""
        return ready.exists() and "grandchild" in text and time.monotonic() - t0 > 1.5

    out = run_app([sys.executable, str(app), str(pids), str(ready)], env=dict(os.environ), stop_when=done,
                  output=lambda s, d: None, grace=1.0, timeout=60)
    roles = dict(line.split() for line in pids.read_text().splitlines())
    assert out.stopped and not out.timed_out
    assert out.stop.processes >= 2 and out.stop.signals[:1] == ["SIGTERM"] and out.stop.killed >= 1
    assert out.stop.leftover == []
    for role, pid in roles.items():
        assert not alive(int(pid)), f"the {role} outlived the stop"
    assert "needed SIGKILL" in out.stop.describe()


def test_process_tree_follows_descendants_and_ignores_reused_pids(tmp_path):
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"])
    try:
        tree = ProcessTree(child.pid)
        for _ in range(100):
            tree.scan(force=True)
            if len(tree.alive()) >= 2:
                break
            time.sleep(0.05)
        assert child.pid in tree.alive() and len(tree.alive()) == 2
        fake = max(tree.known) + 10_000_000
        tree.known[fake] = 1  # a pid that no longer exists is never signalled
        assert fake not in tree.alive()
    finally:
        tree.signal(9)
        child.kill()
        child.wait()
        tree.reap()


def test_a_live_pid_with_another_start_time_is_not_the_apps_and_is_never_signalled():
    """A pid the app once had, now reused by an unrelated process (it runs, but started at
    another time), is neither alive for the tree nor signalled when the app is stopped."""
    import subprocess

    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = read_process_table()[stranger.pid][1]
        tree = ProcessTree(max(read_process_table()) + 10_000_000)  # a root long gone
        tree.known[stranger.pid] = started + 1  # the app's process of that pid started at another time
        assert tree.alive() == []
        assert tree.signal(9) == 0
        assert stranger.poll() is None and alive(stranger.pid)
        tree.known[stranger.pid] = started  # the same start time: that one is the app's
        assert tree.alive() == [stranger.pid]
    finally:
        stranger.kill()
        stranger.wait()


def test_stop_report_text():
    assert StopReport().describe() == ""
    r = StopReport(processes=3, signals=["SIGTERM", "SIGKILL"], killed=1)
    assert r.describe() == "stopped 3 process(es) of the app with SIGTERM/SIGKILL, 1 needed SIGKILL"


def test_a_forced_scan_runs_within_the_scan_interval_and_an_unforced_one_waits(tmp_path):
    """ProcessTree.scan: scans are spaced SCAN_INTERVAL apart unless forced (the stop
    path forces one so that a worker started a moment ago is signalled too); mutation
    caught: force ignored, so a scan just after another finds nothing new."""
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        tree = ProcessTree(child.pid)
        tree._last_scan = time.monotonic() + 3600  # as if one had just run (whatever the machine's load)
        tree.scan()
        assert tree.known == {}
        tree.scan(force=True)
        assert child.pid in tree.known and tree.alive() == [child.pid]
    finally:
        child.kill()
        child.wait()
