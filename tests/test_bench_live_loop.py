"""bench/live_loop.py without a GPU: the old code it compares with is what main ran at
21b6496 (the loop in kerncap_tui/engine.py), it imports apart from this checkout, and the
run refuses to start without it. The GPU run itself: the lead's (docs/testing.md)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench_module import load_bench

live = load_bench("live_loop")


def test_the_old_code_is_the_loop_before_issue_28(tmp_path):
    if subprocess.run(["git", "-C", str(live.REPO), "cat-file", "-e", live.OLD_COMMIT],
                      capture_output=True).returncode != 0:
        pytest.skip(f"this checkout has no commit {live.OLD_COMMIT}")
    old = tmp_path / "old"
    assert live.prepare_old(old) == 0
    assert (old / "REVISION").read_text().strip() == live.OLD_COMMIT
    assert (old / "kerncap_tui" / "engine.py").is_file() and not (old / "engine" / "kerncap" / "session").exists()
    assert not (old / "kerncap_tui" / "demo" / "reproducer").exists()  # the demo's payloads stay home
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(old / "engine"), str(old)]))
    # An editable install's import hook (scikit-build-core's, first on sys.meta_path) would
    # import the working tree whatever PYTHONPATH says: the probe takes it out first.
    probe = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("
             "'_editable')]; import kerncap, kerncap_tui.engine as e; from kerncap import api; "
             "print(kerncap.__file__, hasattr(e, 'ResidentReplay'), hasattr(api, 'open_session'))")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    path, resident, session = out.stdout.split()
    assert path.startswith(str(old)) and resident == "True" and session == "False"


def test_without_the_old_code_it_says_how_to_make_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["live_loop.py", "--old", str(tmp_path / "none")])
    with pytest.raises(SystemExit) as exc:
        live.main()
    assert "--prepare-old" in str(exc.value) and live.OLD_COMMIT in str(exc.value)
