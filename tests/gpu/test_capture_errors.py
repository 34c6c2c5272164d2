"""What extract says when it cannot capture, and that it leaves nothing half-made."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kerncap.errors import KerncapError

from .apps import APPS, PROFILER_CONFLICT, AppSpec, app_env

pytestmark = pytest.mark.gpu

AXPY = APPS["axpy_inplace"]


def extract_error(spec: AppSpec, build_dir: Path, workdir: Path, *, kernel: str | None = None,
                  command: list[str] | None = None, output: Path | None = None, **extra_env: str) -> str:
    """Run extract, expecting it to fail; returns the full error text (message + hint)."""
    from kerncap.capture.extract import extract

    with pytest.raises(KerncapError) as err:
        extract(
            kernel or spec.kernel,
            command or spec.command(build_dir),
            output=output or workdir / "reproducer",
            dispatch=spec.dispatch,
            match=spec.match,
            keep_running=spec.keep_running,
            timeout=spec.timeout,
            env=app_env(spec, workdir, **extra_env),
        )
    return str(err.value)


def leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(("capture.partial", "INCOMPLETE"))]


def test_target_never_launched_lists_closest_names(testapps_build, tmp_path):
    message = extract_error(AXPY, testapps_build, tmp_path, kernel="axpy_inplce")
    assert "axpy_inplce" in message
    assert "axpy_inplace" in message, f"closest launched names not listed:\n{message}"
    assert not (tmp_path / "reproducer").exists()


def test_failing_app_reports_exit_status_and_stderr(testapps_build, tmp_path):
    command = [str(testapps_build / "axpy_inplace"), "-5"]  # exits 2: "axpy_inplace: bad n -5"
    message = extract_error(AXPY, testapps_build, tmp_path, command=command)
    assert re.search(r"status 2\b", message), message
    assert "bad n -5" in message, f"stderr tail missing:\n{message}"
    assert not (tmp_path / "reproducer").exists()


def test_another_cupti_subscriber_is_named(testapps_build, tmp_path):
    message = extract_error(PROFILER_CONFLICT, testapps_build, tmp_path)
    assert re.search(r"CUPTI", message) and re.search(r"subscriber|profiler", message, re.I), message


def test_disk_full_during_snapshot_aborts_cleanly(testapps_build, tmp_path):
    spec = AppSpec(AXPY.name, AXPY.kernel, keep_running=True)
    message = extract_error(spec, testapps_build, tmp_path, KERNCAP_FAULT_ENOSPC_AFTER="1000000")
    assert re.search(r"no space|ENOSPC|writing to disk", message, re.I), message
    output = tmp_path / "reproducer"
    assert not output.exists() or not any(output.iterdir()), f"{output} holds a partial capture"
    assert not leftovers(tmp_path), leftovers(tmp_path)
    assert (tmp_path / "done").exists(), "the app did not finish normally after the aborted capture"


def test_output_under_a_file_is_refused(testapps_build, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    output = blocker / "reproducer"
    message = extract_error(AXPY, testapps_build, tmp_path, output=output)
    assert str(blocker) in message, message


def test_read_only_output_directory_is_refused(testapps_build):
    """Run as an unprivileged user even when the suite runs as root (root writes into
    read-only directories): the app and the directories live where that user can reach."""
    import shutil

    from kerncap.capture.extract import extract  # imported here: the child may not reach the interpreter's files
    from unprivileged import run_unprivileged, shared_tmp

    area = shared_tmp()
    try:
        app = area / AXPY.name
        shutil.copy2(testapps_build / AXPY.name, app)
        app.chmod(0o755)
        parent = area / "read-only"
        parent.mkdir()
        parent.chmod(0o555)

        def attempt() -> str:
            try:
                extract(AXPY.kernel, [str(app)], output=parent / "reproducer", timeout=60)
            except KerncapError as exc:
                return str(exc)
            return "extract succeeded"

        message = run_unprivileged(attempt)
    finally:
        (area / "read-only").chmod(0o755)
        shutil.rmtree(area, ignore_errors=True)
    assert str(parent) in message and "Permission denied" in message, message
    assert "the app was not started" in message
