"""kerncap.capture.run: spawning the app in its own process group, stopping it, streaming its
output, and the environment it gets."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
from kerncap.capture.run import (
    PYHOOKS_DIR,
    AppOutcome,
    app_environment,
    read_reports,
    run_app,
)
from kerncap.errors import KerncapError


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_output_is_streamed_and_stderr_tail_kept():
    chunks = []
    code = "import sys\nfor i in range(80): print('err', i, file=sys.stderr)\nprint('out')\nsys.exit(4)"
    res = run_app(py(code), env=dict(os.environ), output=lambda s, d: chunks.append((s, d)))
    assert res.returncode == 4 and res.failed and res.describe_exit() == "exited with status 4"
    assert b"out\n" in b"".join(d for s, d in chunks if s == "stdout")
    assert len(res.stderr_tail) == 50 and res.stderr_tail[-1] == "err 79"


def test_stop_when_ends_the_group_early(tmp_path):
    flag = tmp_path / "done"
    code = f"import pathlib, time\npathlib.Path({str(flag)!r}).write_text('x')\ntime.sleep(60)"
    res = run_app(py(code), env=dict(os.environ), stop_when=flag.exists, output=lambda s, d: None)
    assert res.stopped and not res.failed and not res.timed_out  # an app left to end would not be "stopped"


def test_sigterm_ignoring_app_is_killed(tmp_path):
    code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(60)"
    res = run_app(py(code), env=dict(os.environ), timeout=0.5, grace=0.5, output=lambda s, d: None)
    assert res.timed_out and res.returncode == -9
    assert "SIGKILL" in res.describe_exit()


def test_stragglers_get_to_finish_then_are_stopped(tmp_path):
    out = tmp_path / "late"
    child = tmp_path / "child.py"
    child.write_text(f"import time, pathlib\ntime.sleep(0.3)\npathlib.Path({str(out)!r}).write_text('1')\n")
    code = f"import subprocess, sys\nsubprocess.Popen([sys.executable, {str(child)!r}])\n"
    res = run_app(py(code), env=dict(os.environ), output=lambda s, d: None, linger=30)
    assert res.returncode == 0
    assert out.exists(), "a child still writing its report after the main process exited must be waited for"
    # and no longer: once it ended (a zombie of kerncap's, the subreaper), nothing is left to stop
    assert res.seconds < 30 and res.stop.signals == [], (res.seconds, res.stop)


def _inject_lib(tmp_path, monkeypatch):
    lib = tmp_path / "libkerncap_inject.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("KERNCAP_INJECT_LIB", str(lib))
    return lib


def test_environment(tmp_path, monkeypatch):
    lib = _inject_lib(tmp_path, monkeypatch)
    monkeypatch.setenv("PYTHONPATH", "/user/path")
    monkeypatch.delenv("CUDA_MODULE_LOADING", raising=False)
    env = app_environment(["python", "a b.py"], mode="capture", run_dir=tmp_path, settings={"KERNCAP_DISPATCH": "2"},
                          env={"MY_VAR": "1"})
    assert env["CUDA_INJECTION64_PATH"] == str(lib)
    assert env["KERNCAP_MODE"] == "capture" and env["KERNCAP_OUT"] == str(tmp_path.resolve())
    assert json.loads(env["KERNCAP_COMMAND"]) == ["python", "a b.py"]
    assert env["KERNCAP_DISPATCH"] == "2" and env["MY_VAR"] == "1"
    assert "CUDA_MODULE_LOADING" not in env, "module loading stays the driver's default (lazy)"
    if (PYHOOKS_DIR / "sitecustomize.py").is_file():
        assert env["PYTHONPATH"] == f"{PYHOOKS_DIR}{os.pathsep}/user/path"
    else:
        assert env["PYTHONPATH"] == "/user/path"
    env = app_environment(["x"], mode="profile", run_dir=tmp_path, settings={}, env={"CUDA_MODULE_LOADING": "LAZY"})
    assert env["CUDA_MODULE_LOADING"] == "LAZY", "the user's choice wins"


def test_entry_points_are_the_default_where_built_and_cupti_is_chosen_explicitly(tmp_path, monkeypatch):
    _inject_lib(tmp_path, monkeypatch)
    monkeypatch.setenv("LD_PRELOAD", "/user/libmine.so")
    monkeypatch.delenv("KERNCAP_INTERCEPT", raising=False)
    env = app_environment(["x"], mode="capture", run_dir=tmp_path, settings={})
    assert env["LD_PRELOAD"] == "/user/libmine.so", "no entry library built: CUPTI callbacks"
    assert env["KERNCAP_INTERCEPT"] == "cupti", "the native side is told the path it takes"
    with pytest.raises(KerncapError, match="libkerncap_entry.so was not built") as err:
        app_environment(["x"], mode="capture", run_dir=tmp_path, settings={}, env={"KERNCAP_INTERCEPT": "entry"})
    assert "KERNCAP_INTERCEPT=cupti" in err.value.hint
    (tmp_path / "libkerncap_entry.so").write_bytes(b"")
    for asked in ({}, {"KERNCAP_INTERCEPT": "entry"}):
        env = app_environment(["x"], mode="capture", run_dir=tmp_path, settings={}, env=asked)
        assert env["LD_PRELOAD"] == f"{tmp_path / 'libkerncap_entry.so'}:/user/libmine.so"  # first: it must see dlsym first
        assert env["KERNCAP_INTERCEPT"] == "entry"
    env = app_environment(["x"], mode="capture", run_dir=tmp_path, settings={}, env={"KERNCAP_INTERCEPT": "cupti"})
    assert env["LD_PRELOAD"] == "/user/libmine.so" and env["KERNCAP_INTERCEPT"] == "cupti"
    env = app_environment(["x"], mode="profile", run_dir=tmp_path, settings={})
    assert env["LD_PRELOAD"] == "/user/libmine.so", "profiling reads CUPTI's activity records anyway"


def test_read_reports_ignores_temp_files_and_names_bad_ones(tmp_path):
    (tmp_path / "proc-12.json").write_text(json.dumps({"target_matches": 1}))
    (tmp_path / "proc-13.json.tmp").write_text("{")
    (tmp_path / ".proc-14.json").write_text("{")
    (tmp_path / "profile-12.json").write_text(json.dumps({"kernels": []}))
    assert read_reports(tmp_path, "proc") == [{"target_matches": 1, "pid": 12}]
    (tmp_path / "proc-15.json").write_text("{broken")
    with pytest.raises(Exception, match="proc-15.json"):
        read_reports(tmp_path, "proc")


def test_outcome_describes_signals():
    assert AppOutcome(command=["a"], returncode=-11, seconds=0).describe_exit() == "was killed by signal SIGSEGV (11)"


def test_stderr_excerpt_shows_the_last_lines_of_the_tail():
    # An error message quotes the end of what the app wrote (its traceback's last line), not the start.
    res = AppOutcome(command=["app"], returncode=1, seconds=0.0, stderr_tail=[f"err {i}" for i in range(50)])
    assert res.stderr_excerpt(3).splitlines() == ["    | err 47", "    | err 48", "    | err 49"]
    assert AppOutcome(command=["app"], returncode=1, seconds=0.0).stderr_excerpt() == "(the app wrote nothing to stderr)"
