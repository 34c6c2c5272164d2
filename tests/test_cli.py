"""The command line of profile / extract / info: parsing, `--cmd`, and errors printed
as one message + hint with a non-zero exit status and no traceback."""

from __future__ import annotations

import sys

import pytest
from kerncap.capture.run import resolve_app_command
from kerncap.cli import build_parser, main, split_app_command
from kerncap.errors import KerncapError, UsageError


def parse(argv):
    own, app = split_app_command(argv)
    args = build_parser().parse_args(own)
    args.app_command = app
    return args


def test_extract_arguments():
    args = parse(["extract", "gemm", "--match", "regex", "--dispatch", "3", "-o", "out", "--keep-running",
                  "--timeout", "2.5", "--source-dir", "src", "--build-dir", "build", "--force",
                  "--", "python", "app.py", "--dispatch", "9"])
    assert args.kernel == "gemm" and args.match == "regex" and args.dispatch == 3
    assert str(args.output) == "out" and args.keep_running and args.timeout == 2.5 and args.force
    assert str(args.source_dir) == "src" and str(args.build_dir) == "build"
    assert args.app_command == ["python", "app.py", "--dispatch", "9"], "the app's own flags stay the app's"


def test_extract_selection_and_set_arguments():
    args = parse(["extract", "k", "--dispatch", "40,3", "--buckets", "--nvtx", "forward/layer.5", "--nvtx-match",
                  "regex", "--rank", "1", "--pid", "42", "--device", "1", "--", "./app"])
    assert args.dispatch == [3, 40] and args.buckets and args.nvtx == "forward/layer.5" and args.nvtx_match == "regex"
    assert (args.rank, args.pid, args.device) == (1, 42, 1)
    args = parse(["profile", "--nvtx", "layer", "--by-nvtx", "--buckets", "--", "./app"])
    assert args.nvtx == "layer" and args.by_nvtx and args.buckets and args.nvtx_match == "substring"


def test_extract_defaults():
    args = parse(["extract", "k", "--", "./app"])
    assert (args.match, args.dispatch, args.output, args.keep_running, args.timeout) == ("substring", 0, None, False, None)
    assert args.intercept is None, "KERNCAP_INTERCEPT decides, else entry points"
    assert parse(["extract", "k", "--intercept", "entry", "--", "./app"]).intercept == "entry"
    with pytest.raises(UsageError, match="entries"):
        parse(["extract", "k", "--intercept", "entries", "--", "./app"])


def test_profile_arguments():
    args = parse(["profile", "--json", "--top", "5", "--timeout", "10", "--output", "p.json", "--cmd", "./app -n 3"])
    assert args.json and args.top == 5 and args.timeout == 10 and str(args.output) == "p.json"
    assert resolve_app_command(args.app_command, args.cmd) == ["./app", "-n", "3"]


def test_info_arguments():
    args = parse(["info", "repro", "--json"])
    assert str(args.path) == "repro" and args.json


def test_resolve_app_command():
    assert resolve_app_command([], 'python -c "print(1)"') == ["python", "-c", "print(1)"]
    assert resolve_app_command(["a", "b"], None) == ["a", "b"]
    with pytest.raises(KerncapError, match="not both"):
        resolve_app_command(["a"], "b")
    with pytest.raises(KerncapError, match="no app command"):
        resolve_app_command([], None)
    with pytest.raises(KerncapError, match="cannot be split"):
        resolve_app_command([], "python 'unterminated")


def test_bad_match_mode_is_a_usage_error(capsys):
    assert main(["extract", "k", "--match", "fuzzy", "--", "app"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kerncap extract: error: argument --match: invalid choice: 'fuzzy'") and "Traceback" not in err


@pytest.mark.parametrize("argv, words, status", [
    (["profile"], "no app command given", 2),
    (["extract", "k"], "no app command given", 2),
    (["profile", "--", "kc-no-such-command"], "command not found: kc-no-such-command", 3),
    (["info", "/nonexistent/repro"], "no capture at /nonexistent/repro", 3),
])
def test_errors_are_one_message_and_a_hint(argv, words, status, capsys, monkeypatch, tmp_path):
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("KERNCAP_INJECT_LIB", str(lib))
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == status
    assert err.startswith(f"kerncap {argv[0]}: error: ") and words in err
    assert "hint:" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, words", [
    (["replay", "r", "--ncu", "--timeout", "0"], "argument --timeout: must be > 0 (got 0)"),
    (["validate", "r", "--sanitize", "--timeout", "-1.5"], "argument --timeout: must be > 0 (got -1.5)"),
    (["unpack", "r.kcap", "--max-ratio", "0.0"], "argument --max-ratio: must be > 0 (got 0.0)"),
    (["unpack", "r.kcap", "--max-ratio", "nan"], "argument --max-ratio: must be > 0 (got nan)"),
    (["mcp", "--root", "r", "--max-resident", "0"], "argument --max-resident: must be >= 1 (got 0)"),
    (["replay", "r", "--device", "-1"], "argument --device: must be >= 0 (got -1)"),
])
def test_an_argument_out_of_its_types_range_is_a_usage_error(argv, words, capsys):
    """The shared argument types (kerncap.commands.arguments) refuse a value at their bound
    before anything runs: a usage error, exit status 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kerncap {argv[0]}: error: {words}") and "Traceback" not in err


def test_an_argument_just_inside_its_types_range_is_taken():
    assert parse(["replay", "r", "--ncu", "--timeout", "0.001"]).timeout == 0.001
    assert parse(["unpack", "r.kcap", "--max-ratio", "1e-9"]).max_ratio == 1e-9
    assert parse(["mcp", "--root", "r", "--max-resident", "1"]).max_resident == 1
    assert parse(["replay", "r", "--device", "0"]).device == 0
    args = parse(["fuse", "r", "--first", "0", "--last", "0"])
    assert (args.first, args.last) == (0, 0)


def test_build_takes_one_compile_mode(capsys):
    """`kerncap build --full --reduced` is a usage error (exit 2) before anything runs; one
    alone is taken."""
    assert main(["build", "r", "--full", "--reduced"]) == 2
    err = capsys.readouterr().err
    assert "--reduced" in err and "not allowed with argument --full" in err and "Traceback" not in err
    assert parse(["build", "r", "--reduced"]).reduced and parse(["build", "r", "--full"]).full


@pytest.mark.parametrize("count", [2, 3])
def test_validate_per_launch_takes_one_reproducer(count, capsys, tmp_path):
    """--per-launch localizes inside one sequence: two or more DIRs are refused (exit 2) with
    the message that says so, before any reproducer is opened."""
    argv = ["validate", *(str(tmp_path / f"r{i}") for i in range(count)), "--per-launch"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--per-launch localizes inside one sequence reproducer" in err and "Traceback" not in err


def test_missing_native_library_is_reported(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("KERNCAP_INJECT_LIB", str(tmp_path / "gone.so"))
    rc = main(["extract", "k", "-o", str(tmp_path / "o"), "--", sys.executable, "-c", "pass"])
    err = capsys.readouterr().err
    assert rc == 3 and "capture library not found" in err and "gone.so" in err
    assert not (tmp_path / "o").exists()
