"""`kerncap replay --ncu` and `kerncap validate --sanitize` without a GPU.

The parsers read text in the layouts ncu (`--csv --page raw|details`) and
compute-sanitizer print (tests/fixtures/tools/; tests/gpu/test_inspect_gpu.py runs the
real tools on the H200 and checks the same parsers on their real output). The error paths
run against stand-in executables on PATH (tests/fixtures/tools/fake_cuda_tool.py) that
speak the replay server's protocol, on a copy of the real H200 capture axpy_small.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from kerncap import cli
from kerncap.errors import KerncapError
from kerncap.replay import ncu, sanitize, tools, va_guards
from kerncap.reproducer.format import reproducer_dir

FIXTURES = Path(__file__).parent / "fixtures"
TOOLS_DIR = FIXTURES / "tools"
AXPY = FIXTURES / "captures" / "axpy_small"
AXPY_KERNEL = "_Z12axpy_inplacefPKfPfi"


def _fake_module():
    spec = importlib.util.spec_from_file_location("fake_cuda_tool", TOOLS_DIR / "fake_cuda_tool.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def repro(tmp_path) -> Path:
    """A writable copy of the real axpy_small reproducer, with a variant cubin in variants/."""
    root = tmp_path / "repro"
    shutil.copytree(AXPY, root)
    (root / "variants").mkdir()
    cubin = next((root / "capture" / "cubins").glob("*.cubin"))
    shutil.copy(cubin, root / "variants" / "1.cubin")
    return root


@pytest.fixture
def fake_tools(tmp_path, monkeypatch):
    """ncu and compute-sanitizer stand-ins first on PATH; returns a function setting the mode."""
    bin_dir = _fake_module().install(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    argv_file = tmp_path / "fake-argv.json"
    monkeypatch.setenv("FAKE_TOOL_ARGV", str(argv_file))

    def configure(mode: str = "ok", log: str | None = None):
        monkeypatch.setenv("FAKE_TOOL_MODE", mode)
        if log:
            monkeypatch.setenv("FAKE_TOOL_LOG", str(TOOLS_DIR / log))
        else:
            monkeypatch.delenv("FAKE_TOOL_LOG", raising=False)
        return argv_file

    return configure


@pytest.fixture
def no_tools(tmp_path, monkeypatch):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(tools, "DEFAULT_CUDA_HOMES", (str(tmp_path / "no-cuda"),))


def _gone(argv_file: Path) -> bool:
    """The fake tool process (the server's stand-in) no longer exists."""
    pid = int(Path(str(argv_file) + ".pid").read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "variants").iterdir() if p.name.startswith("."))


# -- parsing ----------------------------------------------------------------------------------


def test_raw_page_gives_the_key_metrics_in_base_units():
    m = ncu.parse_raw_page((TOOLS_DIR / "smooth.raw.csv").read_text(), "_Z6smoothPKfPfS0_ii")
    assert m["duration_ns"] == 80256.0
    assert m["dram_read_bytes"] == 16793600.0 and m["dram_write_bytes"] == 16777216.0
    assert m["sm_pct"] == pytest.approx(45.27) and m["memory_pct"] == pytest.approx(88.41)
    assert m["occupancy_pct"] == pytest.approx(85.36) and m["registers"] == 32
    assert m["l1_hit_pct"] == pytest.approx(75.02) and m["l2_hit_pct"] == pytest.approx(50.13)


def test_raw_page_scaled_units_are_converted():
    text = (TOOLS_DIR / "smooth.raw.csv").read_text().replace('"nsecond"', '"usecond"').replace('"80,256"', '"80.256"')
    text = text.replace('"byte","byte"', '"Mbyte","Mbyte"').replace('"16,793,600","16,777,216"', '"16.79","16.78"')
    m = ncu.parse_raw_page(text)
    assert m["duration_ns"] == pytest.approx(80256.0)
    assert m["dram_read_bytes"] == pytest.approx(16.79e6)


def test_raw_page_without_a_launch_is_one_clear_error():
    with pytest.raises(KerncapError, match="no profiled launch"):
        ncu.parse_raw_page('"ID","Kernel Name"\n"",""\n')


def test_details_page_findings_are_cleaned_and_ranked():
    text = "==WARNING== a note ncu printed first\n" + (TOOLS_DIR / "smooth.details.csv").read_text()
    found = ncu.parse_details_page(text)
    assert {f.rule for f in found} == {"SOLBottleneck", "MemoryL2Compression", "AchievedOccupancy",
                                       "LaunchConfiguration"}
    sol = next(f for f in found if f.rule == "SOLBottleneck")
    assert "@section" not in sol.description and "Memory Workload Analysis section" in sol.description
    r = ncu.NcuResult(kernel="k", cubin=None, label="captured cubin", cubin_sha256="", report="r", metrics={},
                      findings=found)
    assert [f.rule for f in r.top_findings()] == ["AchievedOccupancy", "MemoryL2Compression", "LaunchConfiguration"]


def test_compare_shows_both_and_the_change():
    metrics = ncu.parse_raw_page((TOOLS_DIR / "smooth.raw.csv").read_text())
    a = ncu.NcuResult(kernel="_Z6smooth", cubin=None, label="captured cubin", cubin_sha256="a", report="a.ncu-rep",
                      metrics=metrics)
    faster = dict(metrics, duration_ns=72230.4, dram_read_bytes=8396800.0, sm_pct=50.27)
    b = ncu.NcuResult(kernel="_Z6smooth", cubin="v", label="variants/2.cubin", cubin_sha256="b",
                      report="b.ncu-rep", metrics=faster)
    text = ncu.format_compare(a, b)
    assert "80.26 us" in text and "72.23 us" in text and "-10.0 %" in text
    assert "-50.0 %" in text  # DRAM read halved
    assert "+5.0 pt" in text  # SM throughput, in percentage points
    assert all(len(line) <= 100 for line in text.splitlines())


def test_sanitizer_report_attributes_kernel_fault_and_its_followup():
    errors, count = sanitize.parse_report((TOOLS_DIR / "axpy_oob.memcheck.log").read_text())
    assert count == 2
    kernel, followup = errors
    assert kernel.where == "kernel" and kernel.message == "Invalid __global__ write of size 4 bytes"
    assert kernel.file.endswith("axpy_oob.cu") and kernel.line == 7
    assert kernel.function.startswith("axpy_inplace(")
    assert any("out of bounds" in d for d in kernel.details)
    assert followup.where == "fault-followup" and followup.api_call == "cuStreamSynchronize" and followup.code == 719


def test_sanitizer_host_api_error_is_kerncaps_own():
    errors, count = sanitize.parse_report((TOOLS_DIR / "host_api.memcheck.log").read_text())
    assert count == 1 and len(errors) == 1
    assert errors[0].where == "host" and errors[0].api_call == "cuFuncGetParamInfo"


def test_sanitizer_racecheck_and_clean_reports():
    errors, count = sanitize.parse_report((TOOLS_DIR / "race.racecheck.log").read_text())
    assert count == 1 and errors[0].where == "kernel" and errors[0].line == 21
    assert errors[0].location == "/src/testapps/cuda/dyn_smem.cu:21"
    assert sanitize.parse_report((TOOLS_DIR / "clean.memcheck.log").read_text()) == ([], 0)


# -- ncu through the CLI and the engine ---------------------------------------------------------


def test_ncu_missing_is_one_message_with_a_hint(repro, no_tools, capsys):
    assert cli.main(["replay", str(repro), "--ncu"]) == 3  # could not run: a missing tool
    err = capsys.readouterr().err
    assert "Nsight Compute (ncu) not found on PATH" in err and "hint:" in err and "CUDA_HOME" in err
    assert "Traceback" not in err


def test_ncu_profiles_one_launch_after_the_warmup_and_stores_the_report(repro, fake_tools):
    argv_file = fake_tools("ok")
    result = ncu.profile(repro, repro / "variants" / "1.cubin", warmup=5, timeout=60)
    argv = json.loads(argv_file.read_text())
    assert argv[0] == "ncu"
    for flag, value in (("--kernel-name", AXPY_KERNEL), ("--kernel-name-base", "mangled"), ("--launch-skip", "5"),
                        ("--launch-count", "1"), ("--cache-control", "none"), ("--clock-control", "none")):
        assert argv[argv.index(flag) + 1] == value, flag
    assert argv[-2:] == ["-m", "kerncap.replay.server"]  # ncu wraps a fresh replay server
    assert result.report == str(repro / "variants" / "1.ncu-rep") and Path(result.report).is_file()
    assert result.metrics["duration_ns"] == 80256.0
    stored = ncu.load_stored(repro, repro / "variants" / "1.cubin")
    assert stored is not None and stored.metrics == result.metrics and stored.label == "variants/1.cubin"
    assert (repro / "variants" / "1.ncu.log").is_file()
    assert _leftovers(repro) == []
    text = ncu.format_result(result)
    assert "duration" in text and "80.26 us" in text and "DRAM read" in text and "[OPT] AchievedOccupancy" in text


def test_cli_ncu_skips_the_warmup_asked_for(repro, fake_tools, capsys):
    """`kerncap replay --ncu --warmup W` profiles the launch after W warm-up launches;
    without --warmup, after 3 (mutation caught: --warmup ignored under --ncu)."""
    argv_file = fake_tools("ok")
    for extra, skip in ((["--warmup", "7"], "7"), ([], "3"), (["--warmup", "0"], "0")):
        assert cli.main(["replay", str(repro), "--ncu", "--timeout", "60", *extra]) == 0
        argv = json.loads(argv_file.read_text())
        assert argv[argv.index("--launch-skip") + 1] == skip, extra
    assert "duration" in capsys.readouterr().out


def test_ncu_counters_not_permitted(repro, fake_tools, capsys):
    fake_tools("perm")
    assert cli.main(["replay", str(repro), "--ncu", "--timeout", "60"]) == 3
    err = capsys.readouterr().err
    assert "ERR_NVGPUCTRPERM" in err and "NVreg_RestrictProfilingToAdminUsers" in err
    assert not (repro / "variants" / "baseline.ncu-rep").exists() and _leftovers(repro) == []


def test_ncu_timeout_kills_ncu_and_the_server(repro, fake_tools):
    argv_file = fake_tools("hang")  # sleeps an hour: the raise itself says it was cut short
    with pytest.raises(tools.ToolTimeout, match="did not finish within 2 s"):
        ncu.profile(repro, timeout=2)
    assert _leftovers(repro) == [] and not (repro / "variants" / "baseline.ncu-rep").exists()
    assert _gone(argv_file)


def test_ncu_cancel_from_another_thread(repro, fake_tools):
    argv_file = fake_tools("hang")
    cancel = tools.Cancellation()
    threading.Timer(1.0, cancel.cancel).start()
    with pytest.raises(tools.Cancelled):  # before the 60 s timeout and the tool's hour of sleep
        ncu.profile(repro, timeout=60, cancel=cancel)
    assert _gone(argv_file)


def test_compare_profiles_then_reuses_stored_reports(repro, fake_tools, capsys):
    fake_tools("ok")
    args = ["replay", str(repro), "--ncu", "--compare", "captured", str(repro / "variants" / "1.cubin")]
    assert cli.main(args) == 0
    out, err = capsys.readouterr()
    assert "A = captured cubin" in out and "B = variants/1.cubin" in out and "+0.0 %" in out
    assert cli.main(args) == 0
    assert err.count("using the stored report") == 0
    assert capsys.readouterr().err.count("using the stored report") == 2


def test_tool_options_without_the_tool_are_refused(repro, capsys):
    assert cli.main(["replay", str(repro), "--section", "Occupancy"]) == 2  # usage
    assert "--section only apply with --ncu" in capsys.readouterr().err
    assert cli.main(["validate", str(repro), "--timeout", "5"]) == 2
    assert "--timeout only apply with --sanitize" in capsys.readouterr().err


# -- compute-sanitizer ------------------------------------------------------------------------


def test_sanitizer_missing(repro, no_tools, capsys):
    assert cli.main(["validate", str(repro), "--sanitize"]) == 3
    assert "compute-sanitizer (compute-sanitizer) not found" in capsys.readouterr().err


def test_errors_in_the_captured_kernel_itself_are_reported_as_such(repro, fake_tools, capsys):
    fake_tools("fault", log="axpy_oob.memcheck.log")
    assert cli.main(["validate", str(repro), "--sanitize", "memcheck", "--timeout", "60"]) == 1
    out = capsys.readouterr().out
    assert "1 error(s) in the captured kernel itself, 0 in kerncap's replay path" in out
    assert "not from an edit" in out
    assert "axpy_oob.cu:7" in out and "then the launch failed" in out
    stored = sanitize.load_stored(repro, None, "memcheck")
    assert stored is not None and stored.captured and len(stored.kernel_errors) == 1 and not stored.host_errors
    assert Path(stored.log).is_file() and _leftovers(repro) == []


def test_variant_errors_name_the_variant_and_its_line(repro, fake_tools):
    fake_tools("fault", log="axpy_oob.memcheck.log")
    r = sanitize.sanitize(repro, repro / "variants" / "1.cubin", timeout=60)
    assert not r.captured and r.label == "variants/1.cubin" and r.validation is None
    assert "CUDA_ERROR_LAUNCH_FAILED" in r.launch_error
    text = sanitize.format_result(r)
    assert "in the variant" in text and "axpy_oob.cu:7" in text


def test_a_tool_run_hands_the_capture_spans_to_its_server(repro, fake_tools):
    argv_file = fake_tools("ok", log="clean.memcheck.log")
    sanitize.sanitize(repro, timeout=60)
    # guard pages keep the tool's own reservation off the spans (replay/va_guards.py)
    handed = Path(str(argv_file) + ".guards").read_text()
    assert va_guards.parse(handed) == va_guards.spans_of(repro)


def test_clean_run_exits_zero(repro, fake_tools, capsys):
    fake_tools("ok", log="clean.memcheck.log")
    assert cli.main(["validate", str(repro), "--sanitize"]) == 0
    out = capsys.readouterr().out
    assert "clean (0 errors in the kernel, 0 in kerncap's host path)" in out and "validation under the tool: PASS" in out


def test_host_path_error_is_reported_against_kerncap(repro, fake_tools):
    fake_tools("ok", log="host_api.memcheck.log")
    r = sanitize.sanitize(repro, timeout=60)
    assert len(r.host_errors) == 1 and not r.kernel_errors and not r.clean
    assert "1 in kerncap's replay path" in sanitize.format_result(r)


def test_a_variant_hanging_under_the_sanitizer_is_bounded(repro, fake_tools):
    argv_file = fake_tools("hang", log="clean.memcheck.log")  # sleeps an hour
    with pytest.raises(tools.ToolTimeout, match="compute-sanitizer memcheck on variants/1.cubin did not finish"):
        sanitize.sanitize(repro, repro / "variants" / "1.cubin", timeout=2)
    assert (repro / "variants" / "1.memcheck.log").is_file()  # what the tool wrote so far is kept
    assert _leftovers(repro) == [] and _gone(argv_file)


def test_unknown_tool_is_refused(repro):
    with pytest.raises(KerncapError, match="unknown compute-sanitizer tool"):
        sanitize.sanitize(repro, tool="leakcheck")


def test_artifact_paths(repro, tmp_path):
    root = reproducer_dir(repro / "capture")
    assert root == repro.resolve()
    assert tools.artifact_stem(root, None) == root / "variants" / "baseline"
    assert tools.artifact_stem(root, repro / "variants" / "1.cubin") == root / "variants" / "1"
    assert tools.artifact_stem(root, tmp_path / "elsewhere" / "fast.cubin") == root / "variants" / "fast"


def test_setup_errors_under_the_sanitizer_are_not_launch_failures(repro, fake_tools, monkeypatch):
    """A failure that is not the launch's (here: the server cannot open the capture) is
    the error itself, not a report of the sanitizer's."""
    fake_tools("ok", log="clean.memcheck.log")
    monkeypatch.setattr(sanitize, "_launch_failure", lambda message: False)
    monkeypatch.setenv("FAKE_TOOL_MODE", "fault")
    with pytest.raises(KerncapError, match="CUDA_ERROR_LAUNCH_FAILED"):
        sanitize.sanitize(repro, timeout=60)
    assert _leftovers(repro) == []


def test_compare_refuses_cubin(repro, capsys):
    assert cli.main(["replay", str(repro), "--ncu", "--compare", "captured", "captured", "--cubin",
                     str(repro / "variants" / "1.cubin")]) == 2
    assert "--compare names both cubins" in capsys.readouterr().err
    assert cli.main(["replay", str(repro), "--ncu", "--compare", "captured"]) == 2
    assert "--ncu --compare takes two cubins, A and B (got 1)" in capsys.readouterr().err


def test_a_range_the_sanitizer_holds_is_named_as_the_tools(repro, fake_tools, monkeypatch):
    """Under compute-sanitizer the replay process may hold the captured addresses itself
    (torch_expandable, docs/facts.md §20): one message says so, not "retry"."""
    from kerncap.errors import AddressUnavailable

    fake_tools("ok", log="clean.memcheck.log")
    killed = []

    class HeldRange:
        def __init__(self, *args, **kwargs):
            pass

        def request(self, *args, **kwargs):
            raise AddressUnavailable("cannot reserve span 0 (region 0) [0x302000000, +64 MiB) at its captured "
                                     "address", "retry")

        def kill(self):
            killed.append(True)

    monkeypatch.setattr(sanitize, "ToolRun", HeldRange)
    with pytest.raises(AddressUnavailable) as info:
        sanitize.sanitize(repro, timeout=60)
    assert info.value.message.startswith("compute-sanitizer memcheck on captured cubin cannot restore this capture")
    assert "under compute-sanitizer the replay process reserves memory of its own" in info.value.hint
    assert killed and _leftovers(repro) == []


# -- an eleventh audit's survivors ---------------------------------------------------------------


def test_errors_the_tool_counted_but_the_parser_could_not_read_are_not_clean(repro, fake_tools, tmp_path, capsys):
    """A report whose messages are in a layout this parser does not read (no `=========`
    prefix) but whose summary counts 3 errors: not clean, exit 1, the count and a note
    said. Mutation caught: `clean` judged on the parsed errors alone."""
    log = tmp_path / "unreadable.memcheck.log"
    log.write_text("========= COMPUTE-SANITIZER\n"
                   "[memcheck] Invalid __global__ write of size 4 bytes at axpy_inplace+0x1b0\n"
                   "========= ERROR SUMMARY: 3 errors\n")
    fake_tools("ok", log=str(log))
    assert cli.main(["validate", str(repro), "--sanitize", "--timeout", "60"]) == 1
    out = capsys.readouterr().out
    assert "clean" not in out.splitlines()[0] and "(the tool counted 3)" in out
    assert "the tool counted 3 errors this parser could not read" in out
    stored = sanitize.load_stored(repro, None, "memcheck")
    assert stored is not None and not stored.errors and stored.reported_count == 3 and not stored.clean


def test_a_stored_report_is_reused_only_for_the_same_warmup(repro, fake_tools, capsys):
    """`--ncu --compare` reuses a stored report of the same cubin bytes and setup; asked
    with another --warmup it profiles again, skipping that many launches. Mutation caught:
    the warm-up count left out of the setup compared."""
    argv_file = fake_tools("ok")
    args = ["replay", str(repro), "--ncu", "--compare", "captured", str(repro / "variants" / "1.cubin"), "--json"]
    assert cli.main(args) == 0 and cli.main(args) == 0
    assert capsys.readouterr().err.count("using the stored report") == 2  # the second run: both reused
    assert cli.main([*args, "--warmup", "5"]) == 0
    out, err = capsys.readouterr()
    assert "using the stored report" not in err
    data = json.loads(out)
    assert data["a"]["warmup"] == data["b"]["warmup"] == 5
    argv = json.loads(argv_file.read_text())
    assert argv[argv.index("--launch-skip") + 1] == "5"


def test_a_tool_is_found_in_cuda_home_before_cuda_path(tmp_path, no_tools, monkeypatch):
    """Not on PATH: `ncu` is looked for in $CUDA_HOME/bin, then $CUDA_PATH/bin, then the
    default toolkit; a file there that is not executable is passed over, and the message
    names every directory looked in. Mutation caught: $CUDA_HOME ignored."""
    def toolkit(name: str, mode: int = 0o755) -> Path:
        exe = tmp_path / name / "bin" / "ncu"
        exe.parent.mkdir(parents=True)
        exe.write_text("#!/bin/sh\n")
        exe.chmod(mode)
        return exe

    home, path, plain = toolkit("cuda-home"), toolkit("cuda-path"), toolkit("cuda-plain", 0o644)
    monkeypatch.setenv("CUDA_PATH", str(path.parents[1]))
    assert tools.find_tool("ncu", "Nsight Compute") == path
    monkeypatch.setenv("CUDA_HOME", str(home.parents[1]))
    assert tools.find_tool("ncu", "Nsight Compute") == home
    monkeypatch.setenv("CUDA_HOME", str(plain.parents[1]))
    monkeypatch.delenv("CUDA_PATH")
    with pytest.raises(KerncapError) as err:
        tools.find_tool("ncu", "Nsight Compute")
    assert str(plain.parent) in err.value.message and str(tmp_path / "no-cuda" / "bin") in err.value.message


def test_a_host_api_error_with_a_fault_code_but_no_kernel_fault_is_kerncaps_own():
    """A failed synchronize (error 719) belongs to a kernel's fault only when the tool
    reported that fault before it; alone, it is an error of kerncap's host path, and the
    run is not clean. Mutation caught: every API error with a fault's code taken for a
    follow-up (kerncap's own failing call hidden as "then the launch failed")."""
    text = (TOOLS_DIR / "axpy_oob.memcheck.log").read_text()
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "Program hit" in line)
    alone = "\n".join(lines[:1] + lines[at:]).replace("2 errors", "1 error")
    errors, count = sanitize.parse_report(alone)
    assert count == 1 and len(errors) == 1
    assert errors[0].where == "host" and errors[0].code == 719 and errors[0].api_call == "cuStreamSynchronize"
    result = sanitize.SanitizeResult(tool="memcheck", kernel=AXPY_KERNEL, cubin=None, label="captured cubin",
                                     captured=True, errors=errors, reported_count=count, log="x.log")
    assert len(result.host_errors) == 1 and not result.clean
    assert "0 error(s) in the captured kernel itself, 1 in kerncap's replay path" in sanitize.format_result(result)
