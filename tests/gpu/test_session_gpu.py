"""Issue 28 on the GPU: one build of the edit loop (kerncap.session's Session.build) from
every front end on a real reproducer with sources (testapps' smooth kernel), landing in
one variant history. `kerncap build` records the baseline and v1 (the unmodified
source), an agent's MCP `build` over stdio records v2 (the faster edit), `kerncap check`
then validates and times the captured cubin and the best recorded variant, and the
workbench opens the reproducer with those rows in History. The same source again builds
nothing and leaves no new cubin. Prints each step's figures (no timed assertion: the
loop's speed is bench/live_loop.py's).

Run on the GPU machine: bash tests/gpu/run.sh -s tests/gpu/test_session_gpu.py
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .smooth_edits import edit, kernel_header
from .test_tui_loop import smooth_source_repro  # noqa: F401 - the module-scoped extraction, reused

pytestmark = pytest.mark.gpu


def kerncap(*args: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "kerncap", *args, "--json"], capture_output=True, text=True,
                          timeout=600)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"kerncap {' '.join(args)} printed no JSON (status {proc.returncode}):\n"
                             f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}") from None
    return proc.returncode, doc


def mcp_build(root: Path, repro: Path) -> dict:
    pytest.importorskip("mcp")
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "kerncap", "mcp", "--root", str(root)],
                                   env=dict(os.environ))

    async def go():
        # errlog named: stdio_client's default is the sys.stderr of when mcp was first
        # imported, which under a test's capsys is a buffer with no file descriptor.
        async with stdio_client(params, errlog=sys.__stderr__) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                r = await session.call_tool("build", {"reproducer": str(repro)})
                text = "\n".join(getattr(c, "text", "") for c in r.content)
                assert not r.is_error, text
                return r.structured_content
    return anyio.run(go)


def test_one_build_from_every_front_end_lands_in_one_history(smooth_source_repro, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    repro = tmp_path / "reproducer"
    shutil.copytree(smooth_source_repro, repro)
    header = kernel_header(repro)

    status, first = kerncap("build", str(repro))
    print(f"kerncap build: {first['status']}, v{first['variant']['id']} {first['variant']['median_ms']} ms, "
          f"{first['variant']['validation_detail']}, compile {first['compiled']['seconds']} s; baseline "
          f"{first['baseline']['median_ms']} ms")
    assert status == 0 and first["status"] == "recorded" and first["baseline"]["validation"] == "pass"
    v1 = first["variant"]
    assert v1["id"] == 1 and v1["validation"] == "pass" and v1["validation_detail"] == "exact · p4", v1
    assert v1["speedup_low"] is not None and v1["speedup_low"] <= v1["speedup"] <= v1["speedup_high"]

    edit(header, "fast")
    second = mcp_build(tmp_path, repro)
    v2 = second["variant"]
    print(f"MCP build: v{v2['id']} {v2['median_ms']} ms, speedup {v2['speedup']:.3f} "
          f"[{v2['speedup_low']:.3f}, {v2['speedup_high']:.3f}] significant={v2['significant']}, {v2['validation']}")
    assert second["status"] == "recorded" and v2["id"] == 2 and v2["validation"] == "pass", second["log"]
    history = json.loads((repro / "history.json").read_text())
    assert [v["id"] for v in history["variants"]] == [0, 1, 2]

    cubins = sorted(p.name for p in (repro / "variants").glob("*.cubin"))
    status, again = kerncap("build", str(repro))  # the source v2 was built from: nothing to build
    assert status == 0 and again["status"] == "unchanged" and again["variant"]["id"] == 2
    assert sorted(p.name for p in (repro / "variants").glob("*.cubin")) == cubins

    status, report = kerncap("check", str(repro), "--backend", "serial", "-n", "20")
    cases = {c["label"]: c for c in report["cases"]}
    print("kerncap check: " + "; ".join(f"{k} {c['status']} {c['timing'] and c['timing']['median_ms']} ms"
                                        for k, c in cases.items()))
    best = min((v for v in history["variants"] if v["id"]), key=lambda v: v["median_ms"])
    assert status == 0 and set(cases) == {"baseline", f"v{best['id']}"}, report
    assert all(c["status"] == "pass" for c in cases.values())

    from textual.widgets import DataTable

    from kerncap_tui.app import KerncapApp

    async def run():
        app = KerncapApp(repro)
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.pause(1.0)
            table = app.query_one("#history-table", DataTable)
            labels = [str(table.get_row_at(i)[1]) for i in range(table.row_count)]
            assert labels == ["baseline", "v1", "v2"], labels
            app.exit()
        assert app.session is None  # its replay server and worker went with it

    asyncio.run(run())
