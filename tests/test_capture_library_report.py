"""kerncap.core.native.report_to_capture_library: a process that ends with os._exit (the
replay server) has the capture library the driver loaded write its exit report first.
Only a library already loaded (RTLD_NOLOAD), only under a kerncap profile or capture
(KERNCAP_MODE): never a fresh copy loaded just to call it. A stand-in library built here
writes a file when asked for its report (the real one: tests/test_entry_hooks.py, with
the native build)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest

from kerncap.core.native import report_to_capture_library

STAND_IN = r"""
#include <stdio.h>
#include <stdlib.h>
void kerncap_report_now(void) {
  FILE *f = fopen(getenv("STAND_IN_REPORT"), "a");
  if (f) { fputs("report\n", f); fclose(f); }
}
"""


def _build(tmp_path, name: str, source: str):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler")
    src, lib = tmp_path / f"{name}.c", tmp_path / f"lib{name}.so"
    src.write_text(source)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True)
    return lib


def test_only_a_loaded_capture_library_under_kerncap_is_asked_for_its_report(tmp_path, monkeypatch):
    lib = _build(tmp_path, "stand_in_inject", STAND_IN)
    report = tmp_path / "report.txt"
    monkeypatch.setenv("STAND_IN_REPORT", str(report))
    monkeypatch.delenv("CUDA_INJECTION64_PATH", raising=False)
    monkeypatch.setenv("KERNCAP_MODE", "profile")
    assert report_to_capture_library() is False  # no injection library at all

    monkeypatch.setenv("CUDA_INJECTION64_PATH", str(lib))
    assert report_to_capture_library() is False, "not loaded here (no cuInit): no fresh copy is loaded"
    assert not report.exists()

    ctypes.CDLL(str(lib))  # as the driver loads it in cuInit
    monkeypatch.delenv("KERNCAP_MODE")
    assert report_to_capture_library() is False and not report.exists(), "not under a kerncap profile or capture"
    monkeypatch.setenv("KERNCAP_MODE", "profile")
    assert report_to_capture_library() is True
    assert report.read_text() == "report\n"


def test_a_loaded_injection_library_that_is_not_kerncaps_is_left_alone(tmp_path, monkeypatch):
    other = _build(tmp_path, "other_inject", "int InitializeInjection(void) { return 1; }\n")
    ctypes.CDLL(str(other))
    monkeypatch.setenv("CUDA_INJECTION64_PATH", str(other))
    monkeypatch.setenv("KERNCAP_MODE", "capture")
    assert report_to_capture_library() is False
