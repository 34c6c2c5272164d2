"""The `kerncap` exit statuses (docs/cli.md) and errors as JSON under --json:
0 success/pass, 1 a verdict of failure, 2 usage, 3 could not run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kerncap import api
from kerncap.cli import main
from kerncap.errors import EXIT_CANNOT_RUN, EXIT_FAILED, EXIT_OK, EXIT_USAGE

AXPY = Path(__file__).parent / "fixtures" / "captures" / "axpy_small"


def test_the_four_statuses_are_distinct():
    assert len({EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CANNOT_RUN}) == 4
    assert (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CANNOT_RUN) == (0, 1, 2, 3)


def test_success_is_zero(capsys):
    assert main(["info", str(AXPY)]) == EXIT_OK


@pytest.mark.parametrize("argv", [
    ["info"],                                   # missing argument
    ["info", str(AXPY), "--no-such-option"],
    ["no-such-command"],
    ["replay", str(AXPY), "--iterations", "0"],
    ["prune", str(AXPY), "-o", "elsewhere"],    # options that do not fit together
])
def test_usage_errors_are_two(argv, capsys):
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


def test_damaged_or_missing_input_is_three(tmp_path, capsys):
    assert main(["info", str(tmp_path / "nothing")]) == EXIT_CANNOT_RUN
    assert main(["unpack", str(tmp_path / "missing.kcap")]) == EXIT_CANNOT_RUN


def test_json_errors_on_stdout(tmp_path, capsys):
    assert main(["info", str(tmp_path / "nothing"), "--json"]) == EXIT_CANNOT_RUN
    captured = capsys.readouterr()
    doc = json.loads(captured.out)["error"]
    assert doc["type"] == "CaptureFormatError" and doc["exit_status"] == 3
    assert str(tmp_path / "nothing") in doc["message"] and doc["hint"]
    assert "error:" in captured.err  # the text goes to stderr as well


def test_json_usage_errors_on_stdout(capsys):
    assert main(["replay", str(AXPY), "--iterations", "0", "--json"]) == EXIT_USAGE
    doc = json.loads(capsys.readouterr().out)["error"]
    assert doc["type"] == "UsageError" and doc["exit_status"] == 2 and "--iterations" in doc["message"]


def test_an_os_error_is_one_message_not_a_traceback(monkeypatch, capsys):
    def denied(*a, **k):
        raise PermissionError(13, "Permission denied", "/some/where/manifest.json")

    monkeypatch.setattr(api, "info", denied)
    assert main(["info", str(AXPY), "--json"]) == EXIT_CANNOT_RUN
    captured = capsys.readouterr()
    assert "Permission denied (/some/where/manifest.json)" in captured.err and "Traceback" not in captured.err
    assert json.loads(captured.out)["error"]["exit_status"] == 3


def test_an_errors_text_carries_its_hint_and_its_own_exit_status():
    """str() of an error (what MCP, the workbench and pytest's match see) is the message
    and, when there is one, the hint on its own line; an exit_code given overrides the
    type's, in the JSON too."""
    from kerncap.errors import KerncapError, UsageError

    assert str(KerncapError("no GPU here", "run it on the GPU machine")) == "no GPU here\n  hint: run it on the GPU machine"
    assert str(KerncapError("no GPU here")) == "no GPU here"
    e = UsageError("bad", "fix it")
    assert e.exit_code == EXIT_USAGE and e.to_json()["error"] == {
        "type": "UsageError", "message": "bad", "hint": "fix it", "exit_status": EXIT_USAGE}
    assert KerncapError("verdict", exit_code=EXIT_FAILED).to_json()["error"]["exit_status"] == EXIT_FAILED
