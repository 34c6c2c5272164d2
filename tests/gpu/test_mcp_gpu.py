"""`kerncap mcp` on the GPU, driven only through the MCP SDK's client over stdio (the
way an agent's host starts it): extract a CUDA C++ kernel and a Triton kernel, read and
edit a source file, recompile, validate, compare timings. Unmodified recompiles validate
byte-exact; an edit that changes the result is visible as a failed validation with the
bytes it changed; a correct edit passes again and is timed against the captured cubin.

Needs the `mcp` wheel (and its dependencies) on the GPU machine."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from .apps import PYAPPS, TESTAPPS

pytestmark = pytest.mark.gpu
mcp = pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")


def _text(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


class Agent:
    """One MCP session over stdio with `python -m kerncap mcp --root ...`."""

    def __init__(self, roots: list[Path]):
        self.roots = roots
        self.log: list[str] = []

    def run(self, script):
        from mcp import ClientSession, StdioServerParameters, stdio_client

        args = ["-m", "kerncap", "mcp", *[a for r in self.roots for a in ("--root", str(r))]]
        params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))

        async def go():
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()

                    async def call(name, **arguments):
                        start = time.monotonic()
                        r = await session.call_tool(name, arguments)
                        self.log.append(f"{name} {json.dumps(arguments)[:120]} -> "
                                        f"{'ERROR ' + _text(r)[:300] if r.is_error else 'ok'} "
                                        f"({time.monotonic() - start:.2f} s)")
                        return r
                    return await script(call)
        try:
            return anyio.run(go)
        finally:
            print("\n".join(self.log))


def _ok(r) -> dict:
    assert not r.is_error, _text(r)
    return r.structured_content


def test_agent_session_on_a_cuda_kernel(testapps_build, tmp_path):
    root = tmp_path / "work"
    root.mkdir()
    agent = Agent([root, TESTAPPS, testapps_build])

    async def script(call):
        ex = _ok(await call("extract", kernel="axpy_inplace", command=[str(testapps_build / "axpy_inplace")],
                            output=str(root / "axpy"), source_dir=str(TESTAPPS / "cuda"),
                            build_dir=str(testapps_build), cwd=str(root)))
        repro = ex["reproducer"]
        assert ex["sources"]["kind"] == "cuda", ex["sources"]
        info = _ok(await call("info", reproducer="axpy"))
        assert info["kernel"]["name"] == "_Z12axpy_inplacefPKfPfi"
        assert info["reproducer"]["provenance"]["gpu"]["uuid"].startswith("GPU-")
        files = [f["path"] for f in _ok(await call("list_sources", reproducer="axpy"))["files"]]
        header = next(f for f in files if f.endswith("axpy_kernel.cuh"))
        original = _ok(await call("read_source", reproducer="axpy", file=header))["text"]
        assert "axpy_inplace" in original

        base = _ok(await call("validate", reproducer=repro))
        assert base["passed"] and base["mode"] == "exact"
        v1 = _ok(await call("recompile", reproducer="axpy"))["cubin"]
        assert _ok(await call("validate", reproducer="axpy", cubin=v1))["passed"]

        # an edit that changes the result: visible as the bytes of y that differ
        wrong = original.replace("fmaf(a, x[i], y[i])", "fmaf(2.0f * a, x[i], y[i])")
        assert wrong != original, "the kernel source changed; update the edit"
        _ok(await call("write_source", reproducer="axpy", file=header, text=wrong))
        v2 = _ok(await call("recompile", reproducer="axpy"))["cubin"]
        bad = _ok(await call("validate", reproducer="axpy", cubin=v2))
        assert not bad["passed"]
        changed = [r for r in bad["regions"] if not r["passed"]]
        assert len(changed) == 1 and changed[0]["mismatched_bytes"] > 0
        print(f"edited axpy (2*a): {changed[0]['mismatched_bytes']} bytes of {changed[0]['name']} differ")

        # back to the original: byte-exact again, timed against the captured cubin
        _ok(await call("write_source", reproducer="axpy", file=header, text=original))
        v3 = _ok(await call("recompile", reproducer="axpy"))["cubin"]
        assert _ok(await call("validate", reproducer="axpy", cubin=v3))["passed"]
        perturbed = _ok(await call("validate", reproducer="axpy", cubin=v3, perturb=4))
        print("axpy unmodified recompile, perturbed:", perturbed["summary"])
        assert perturbed["verdict"] == "pass"
        cmp = _ok(await call("compare", reproducer="axpy", cubins=[v3], iterations=10, rounds=10))
        captured, variant = cmp["programs"]
        iv = variant["interval"]
        print(f"axpy compare: captured {captured['median_ms'] * 1000:.2f} us, unmodified recompile "
              f"{variant['median_ms'] * 1000:.2f} us ({iv['speedup']:.3f}x [{iv['low']:.3f}, {iv['high']:.3f}] "
              f"{iv['verdict']})")
        assert 0.8 < iv["speedup"] < 1.25
        out = await call("info", reproducer="/etc")
        assert out.is_error and "outside" in _text(out)
        return True

    assert agent.run(script)


def test_agent_session_on_a_triton_kernel(tmp_path):
    root = tmp_path / "work"
    root.mkdir()
    agent = Agent([root, TESTAPPS])
    env = {"KC_TESTAPP_REPORT": str(root / "report.json"), "KC_TESTAPP_DONE": str(root / "done")}

    async def script(call):
        ex = _ok(await call("extract", kernel="kc_autotune_add", command=[sys.executable,
                                                                         str(PYAPPS / "triton_autotune.py")],
                            output=str(root / "add"), dispatch=1, keep_running=True, env=env, cwd=str(root),
                            timeout_s=300))
        assert ex["sources"]["kind"] == "triton"
        configs = _ok(await call("list_configs", reproducer="add"))["configs"]
        assert len(configs) == 3 and sum(c["captured"] for c in configs) == 1
        assert _ok(await call("validate", reproducer="add"))["passed"]

        v1 = _ok(await call("recompile", reproducer="add"))["cubin"]
        assert _ok(await call("validate", reproducer="add", cubin=v1))["passed"]
        other = _ok(await call("recompile", reproducer="add", config="num_warps=2"))["cubin"]
        assert _ok(await call("validate", reproducer="add", cubin=other))["passed"]  # elementwise: exact

        source = _ok(await call("read_source", reproducer="add", file="kernel.py"))["text"]
        wrong = source.replace("x + y", "x - y")
        assert wrong != source, "the kernel source changed; update the edit"
        _ok(await call("write_source", reproducer="add", file="kernel.py", text=wrong))
        v2 = _ok(await call("recompile", reproducer="add"))["cubin"]
        bad = _ok(await call("validate", reproducer="add", cubin=v2))
        assert not bad["passed"]
        print("edited add (x - y):", [(r["name"], r["mismatched_bytes"]) for r in bad["regions"] if not r["passed"]])
        _ok(await call("write_source", reproducer="add", file="kernel.py", text=source))
        v3 = _ok(await call("recompile", reproducer="add"))["cubin"]
        assert Path(v3).read_bytes() == Path(v1).read_bytes()  # the same source, the same cubin
        cmp = _ok(await call("compare", reproducer="add", cubins=[v3, other], iterations=10, rounds=10))
        print("add compare:", [(Path(p["cubin"] or "captured").name, round(p["median_ms"] * 1000, 2),
                                p["interval"] and (round(p["interval"]["speedup"], 3), p["interval"]["verdict"]))
                               for p in cmp["programs"]])
        return True

    assert agent.run(script)
