"""The CPU tests' background builds (tests/native_build.py) find and run their tools with the
environment the process began with: a build thread runs beside tests that put planted
programs first on PATH (test_adversarial), and under load one such build once compiled with
a reproducer's planted `g++` (2026-12-05, docs/testing.md)."""

from __future__ import annotations

import os
import stat

import native_build


def _plant(directory, name: str, marker) -> None:
    tool = directory / name
    tool.write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


def test_a_test_that_puts_a_planted_compiler_first_on_path_does_not_reach_a_build(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    _plant(tmp_path, "g++", marker)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CXX", str(tmp_path / "g++"))
    cxx = native_build.compiler()
    assert cxx is None or not cxx.startswith(str(tmp_path))
    # What a build runs sees the PATH it began with, not the planted one.
    seen = native_build._run(["sh", "-c", 'command -v g++ || echo none']).stdout.strip()
    assert not seen.startswith(str(tmp_path))
    assert native_build.env(X="1")["PATH"] == native_build.ENV["PATH"] != os.environ["PATH"]
    native_build._run(["sh", "-c", "g++ --version >/dev/null 2>&1 || true"])
    assert not marker.exists()
