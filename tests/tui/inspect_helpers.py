"""Shared by the workbench's inspect tests: stored tool results for the demo's variants and
the stand-in ncu / compute-sanitizer on PATH (tests/fixtures/tools/)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

TOOLS_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "tools"


def store_tool_results(root: Path) -> None:
    """ncu metrics for the baseline, v1 and v2 and a clean memcheck for the baseline and v1,
    stored as `kerncap replay --ncu` / `validate --sanitize` store them. The metrics are the
    fixture page's (tests/fixtures/tools/smooth.raw.csv), v2's scaled like its median: a
    layout test, the real tools run in tests/gpu/test_inspect_gpu.py."""
    import json

    from kerncap.replay import ncu, sanitize
    from kerncap.replay.tools import artifact_stem

    metrics = ncu.parse_raw_page((TOOLS_DIR / "smooth.raw.csv").read_text())
    findings = ncu.parse_details_page((TOOLS_DIR / "smooth.details.csv").read_text())
    for cubin, scale in ((None, 1.0), ("variants/1.cubin", 0.95), ("variants/2.cubin", 1.22)):
        path = None if cubin is None else root / cubin
        m = dict(metrics, duration_ns=metrics["duration_ns"] * scale, sm_pct=metrics["sm_pct"] / scale)
        r = ncu.NcuResult(kernel="_Z6smoothPKfPfS0_ii", cubin=None if path is None else str(path),
                          label="captured cubin" if cubin is None else cubin, cubin_sha256="",
                          report=str(artifact_stem(root, path).with_suffix(".ncu-rep")),
                          metrics=m, findings=findings, sections=list(ncu.DEFAULT_SECTIONS),
                          created="2026-11-30T10:00:00+0000")
        target = ncu.stored_path(root, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(r.to_dict()))
    errors, count = sanitize.parse_report((TOOLS_DIR / "clean.memcheck.log").read_text())
    for cubin in (None, "variants/1.cubin"):
        path = None if cubin is None else root / cubin
        r = sanitize.SanitizeResult(tool="memcheck", kernel="_Z6smoothPKfPfS0_ii", cubin=None if path is None else str(path),
                                    label="captured cubin" if cubin is None else cubin, captured=cubin is None,
                                    errors=errors, reported_count=count, log="memcheck.log", validation="pass",
                                    created="2026-11-30T10:00:00+0000")
        sanitize.stored_path(root, path, "memcheck").write_text(json.dumps(r.to_dict()))


def install_fake_tools(bin_dir: Path, monkeypatch, mode: str, log: str | None = None) -> Path:
    """Puts the stand-in tools first on PATH; returns the file the tool run's argv goes to."""
    spec = importlib.util.spec_from_file_location("fake_cuda_tool", TOOLS_DIR / "fake_cuda_tool.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.install(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_TOOL_MODE", mode)
    argv = bin_dir / "argv.json"
    monkeypatch.setenv("FAKE_TOOL_ARGV", str(argv))
    if log:
        monkeypatch.setenv("FAKE_TOOL_LOG", str(TOOLS_DIR / log))
    return argv


def demo_launches(root: Path) -> None:
    """launches.json as `kerncap extract` writes it for the demo's capture run (smooth,
    dispatch 0: the app had launched init_smooth once, then the captured smooth)."""
    from kerncap.reproducer.launches import AppLaunches, KernelLaunches

    (root / "profile.json").unlink()
    AppLaunches(kernels=[KernelLaunches("init_smooth(float*, float*, int, int)", 1),
                         KernelLaunches("smooth(float const*, float*, float const*, int, int)", 1, True)],
                processes=1, launches=2, command=["/tmp/bt/smooth", "65536"]).save(root)
