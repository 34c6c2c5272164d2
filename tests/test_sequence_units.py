"""CPU tests of a sequence capture's bookkeeping that needs no driver
(native/capture/sequence_window.cpp): builds native/capture/test/sequence_units_test.cpp
with AddressSanitizer and checks when a window opens and closes (NVTX instances, runs
bounded by a count or a kernel) and the steps, streams and events it writes into
sequence.json, against the schema the engine reads them with. The driver side (snapshots,
cubins, parameters) runs in tests/gpu/test_sequences.py."""

from __future__ import annotations

import json

import native_build
import pytest
from test_cubin_elf import NATIVE, TEST_SRC, _cuda_home, _run

from kerncap.core.schema import check
from kerncap.reproducer.schemas import SEQUENCE_STEPS


@pytest.fixture(scope="module")
def facts():
    return native_build.result("sequence_units", _build_and_run)


def _build_and_run():
    """The unit test's facts (its executable cached: tests/native_build.py)."""
    cuda = _cuda_home()
    cxx = native_build.compiler()
    if cuda is None or cxx is None:
        pytest.skip("needs cuda.h and a C++ compiler")
    exe = native_build.executable("sequence_units_test", cxx, [
        "-std=c++17", "-g1", "-O1", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined",
        "-fno-sanitize-recover=undefined", f"-I{NATIVE / 'common'}", f"-I{NATIVE / 'capture'}", f"-I{cuda / 'include'}",
    ], [TEST_SRC / "sequence_units_test.cpp", NATIVE / "capture" / "sequence_window.cpp"])
    r = _run([str(exe)], env=native_build.env(ASAN_OPTIONS="detect_leaks=0"))
    assert r.returncode == 0, f"C++ checks failed:\n{r.stderr}\n{r.stdout}"
    return json.loads(r.stdout)


def PREBUILD():  # conftest starts it when this file's tests are selected
    native_build.start("sequence_units", _build_and_run)


def test_window_rules_hold(facts):
    assert facts["failures"] == 0


def test_the_steps_are_written_as_the_schema_reads_them(facts, tmp_path):
    log = facts["log"]
    check(log, SEQUENCE_STEPS, tmp_path / "sequence.json", "synthetic")
    assert [s["op"] for s in log["steps"]] == ["launch", "record", "wait", "copy", "copy", "memset", "sync", "sync",
                                               "launch"]
    assert [(s["id"], s["kind"], s["blocking"]) for s in log["streams"]] == [
        (0, "legacy", True), (1, "per-thread", True), (2, "user", False)]
    assert (log["events"], log["dropped_waits"]) == (1, 1)
    h2d = log["steps"][3]
    assert h2d["kind"] == "h2d" and h2d["payload"] == [None, "0000000000001234"] and h2d["bytes"] == (4 << 20) + 16
    fill = log["steps"][5]
    assert (fill["value"], fill["element"], fill["width"], fill["stream"]) == (0xdeadbeef, 4, 16, 1)
    assert [(s["scope"], s.get("stream")) for s in log["steps"][6:8]] == [("stream", 2), ("context", None)]
