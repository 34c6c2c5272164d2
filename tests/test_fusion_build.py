"""A fusion built in the edit loop (issue 29, docs/sequences.md "The edit loop"):
`Session.build_fusion` (what the workbench's save of fusions/<name>/fused.cu, `kerncap
build --fusion` and MCP's build with `fusion` run) on the SYNTHETIC sequence of
tests/sequence_sim.py over seq_pipeline.cu's real module (the fused kernel is compiled by
the real nvcc, the simulated core runs it as y = 2x + 1): the fused sequence timed against
the captured one with an interval, validated on what is live after the range with the
inferred intermediate named, the fused launch timed against the launches it replaced, one
History row that says it is a fusion; unchanged sources build nothing; the refusals. The
GPU suite drives the same path from the workbench on a real capture
(tests/gpu/test_sequences.py, test_the_workbench_fuses_…)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import sequence_sim as S
from kerncap import api
from kerncap.cli import main
from kerncap.errors import KerncapError, UsageError
from kerncap.recompile.fusion import of_source as fusion_of_source
from test_sequences import NVCC, _pipeline_with_entries

pytestmark = pytest.mark.skipif(NVCC is None, reason="needs nvcc (the fused kernel is compiled)")

QUICK = dict(rounds=5, iterations=2, runs=2)
TODO = "  // TODO: the work of the replaced launches\n"


def without_the_copy(repro: Path) -> Path:
    """The pipeline with the device copy of tmp into z (between the two launches) taken out
    and z's captured post-state its pre-state: nothing between the launches reads the
    intermediate, so a fusion of the two can pass (SYNTHETIC, like the sequence)."""
    cap = repro / "capture"
    seq = json.loads((cap / "sequence.json").read_text())
    seq["steps"] = [s for s in seq["steps"] if not (s["op"] == "copy" and s.get("kind") == "d2d")]
    (cap / "sequence.json").write_text(json.dumps(seq, indent=1))
    manifest = json.loads((cap / "manifest.json").read_text())
    manifest["sequence"]["steps"] = len(seq["steps"])
    z = next(r for r in manifest["regions"] if r["base"] == S.BASES["z"])
    z.update(post=list(z["pre"]), written=False)
    (cap / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return repro


def fused_body(repro: Path, name: str) -> str:
    """The body the simulated core runs for kc_fused (y = 2x + 1), written into the skeleton."""
    info = api.fusion_info(repro, name)
    names = {p["address"]: p["name"] for p in info["params"] if p["kind"] == "buffer"}
    x, y = names[S.BASES["x"]], names[S.BASES["y"]]
    return info["text"].replace(TODO, f"  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                      f"  if (i < 256) {y}[i] = 2.0f * {x}[i] + 1.0f;\n")


@pytest.fixture
def fusable(tmp_path, monkeypatch):
    """The pipeline without the copy, the skeleton of launches 0-1 ("pair") written and filled in."""
    repro = without_the_copy(_pipeline_with_entries(tmp_path, monkeypatch))
    source = api.fuse_skeleton(repro, 0, 1, "pair")
    source.write_text(fused_body(repro, "pair"))
    return repro


def test_a_fusion_build_records_a_row_that_says_it_is_a_fusion(fusable):
    log: list[str] = []
    with api.open_session(fusable, compile_worker=False) as s:
        r = s.build_fusion("pair", api.BuildRequest(**QUICK), progress=lambda text, _level="": log.append(text))
        assert r.status == "recorded", r
        base, v = s.history.variants
        said = "\n".join(log)
        # timed interleaved with the captured sequence (the simulated core: 0.01 ms a launch)
        assert v.median_ms == pytest.approx(0.01) and base.median_ms == pytest.approx(0.02)
        assert v.speedup == pytest.approx(2.0) and v.speedup_low is not None and v.significant
        # validated on what is live after the range: tmp (buf1) inferred, left out, named
        assert v.validation == "pass" and v.validation_detail.startswith("exact"), (v.validation, v.note, said)
        assert v.cubin == "variants/fuse-pair.json" and v.kernel is None
        assert v.fusion == {"name": "pair", "first": 0, "last": 1,
                            "excluded": [{"name": "buf1", "address": S.BASES["tmp"], "bytes": S.BYTES,
                                          "why": "inferred"}],
                            "fused_ms": pytest.approx(0.01), "replaced_ms": pytest.approx(0.02)}
        # the fused sequence has one launch: the fused one, in place of launches 0-1
        assert v.launch_ms == [pytest.approx(0.01)] and base.launch_ms == [0.01, 0.01]
        assert api.changed_launch_ms(v, s.capture) == pytest.approx(0.01)
        assert "not compared (only the replaced launches use them): buf1 (inferred)" in said, said
        assert "fused launch 0.0100 ms vs 0.0200 ms for launches 0-1 (2.00×); not compared: buf1" in said, said
        assert api.fusion_phrase(v).endswith("not compared: buf1")
        assert r.compiled is not None and r.compiled.cubin == fusable / "fusions" / "pair" / "fused.cubin"
        # the same fused.cu, launch and intermediates again: nothing built
        again = s.build(api.BuildRequest(fusion="pair", **QUICK))
        assert again.status == "unchanged" and again.variant.id == v.id
    # the row survives a reload; its commit holds the fused kernel, not its cubin
    h = api.History.load(fusable)
    assert h.variants[-1].fusion["excluded"][0]["name"] == "buf1"
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(fusable), *args], capture_output=True, text=True, check=True).stdout

    files = git("ls-tree", "-r", "--name-only", h.variants[-1].commit).split()
    assert {"fusions/pair/fused.cu", "fusions/pair/fusion.json"} <= set(files)
    assert not [f for f in files if f.endswith(".cubin")], files
    assert "Kerncap-Fusion: pair (launches 0-1; not compared: buf1)" in git("show", "-s", "--format=%B",
                                                                             h.variants[-1].commit)


def test_a_fusion_whose_range_feeds_a_copy_fails_and_says_where(tmp_path, monkeypatch):
    """The pipeline as captured: the device copy between the launches reads tmp, which the
    fused kernel no longer writes, so z departs: the row records a FAIL naming it."""
    repro = _pipeline_with_entries(tmp_path, monkeypatch)
    api.fuse_skeleton(repro, 0, 1, "pair").write_text(fused_body(repro, "pair"))
    with api.open_session(repro, compile_worker=False) as s:
        r = s.build_fusion("pair", api.BuildRequest(**QUICK))
    v = r.variant
    assert r.status == "recorded" and v.validation == "fail" and v.fusion["name"] == "pair"
    assert v.note == "captured input: fail (region 3)", v.note  # z


def test_the_fusion_build_is_the_same_through_the_cli_and_mcp(fusable, capsys):
    """`kerncap build --fusion` and MCP's build with `fusion` go through Session.build: the
    same row (one each, the first unchanged afterwards)."""
    import anyio
    from mcp import Client

    from kerncap.frontends.mcp_server import build_server

    assert main(["build", str(fusable), "--fusion", "pair", "--rounds", "5", "--iterations", "2", "--runs", "2",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "recorded" and out["variant"]["fusion"]["name"] == "pair"
    assert out["variant"]["fusion"]["excluded"][0]["name"] == "buf1"
    source = fusable / "fusions" / "pair" / "fused.cu"
    source.write_text(source.read_text() + "// edited over MCP\n")

    async def go():
        async with Client(build_server([fusable.parent])) as c:
            return await c.call_tool("build", {"reproducer": fusable.name, "fusion": "pair", **QUICK})

    built = anyio.run(go)
    assert not built.is_error, built.content[0].text
    doc = built.structured_content
    assert doc["status"] == "recorded" and doc["variant"]["fusion"] == {**out["variant"]["fusion"],
                                                                         "fused_ms": pytest.approx(0.01),
                                                                         "replaced_ms": pytest.approx(0.02)}
    assert [v.fusion and v.fusion["name"] for v in api.History.load(fusable).variants] == [None, "pair", "pair"]


def test_what_a_fusion_build_refuses_is_one_message(fusable, capsys):
    with api.open_session(fusable, compile_worker=False) as s:
        with pytest.raises(KerncapError, match=r"no fusion nope in .*write its skeleton first"):
            s.build_fusion("nope", api.BuildRequest(**QUICK))
        with pytest.raises(UsageError, match="a build rebuilds one kernel or builds one fusion"):
            s.build(api.BuildRequest(kernel="1", fusion="pair"))
        with pytest.raises(UsageError, match="--intermediate goes with --fusion"):
            s.build(api.BuildRequest(intermediates=("buf1",)))
        with pytest.raises(UsageError, match="the skeleton has no buffer buf9"):
            s.build_fusion("pair", api.BuildRequest(intermediates=("buf9",), **QUICK))
        # a fused kernel nvcc cannot compile: its error, nothing recorded
        source = fusable / "fusions" / "pair" / "fused.cu"
        source.write_text(source.read_text().replace("2.0f *", "2.0f * undeclared_thing *"))
        with pytest.raises(KerncapError, match=r"(?s)nvcc could not compile .*fused\.cu.*undeclared_thing"):
            s.build_fusion("pair", api.BuildRequest(**QUICK))
        assert s.history.variants == []
        # from someone else's reproducer: a FIFO as fused.cu is named, never read (a read would block)
        import os

        source.unlink()
        os.mkfifo(source)
        with pytest.raises(KerncapError, match=r"fused\.cu is not a regular file"):
            s.build_fusion("pair", api.BuildRequest(**QUICK))
        with pytest.raises(KerncapError, match=r"fused\.cu is not a regular file"):
            api.fusion_info(fusable, "pair")
        with pytest.raises(KerncapError, match=r"fused\.cu is not a regular file"):
            api.fuse_build(fusable, "pair")
    one = Path(__file__).resolve().parent / "fixtures" / "captures" / "axpy_small"
    assert main(["build", str(one), "--fusion", "pair"]) == 2
    assert "holds one dispatch, not a sequence" in capsys.readouterr().err


def test_the_workbench_helpers_name_fusions_and_their_sources(fusable):
    assert api.fusions(fusable) == [{"name": "pair", "first": 0, "last": 1}]
    assert api.fusion_name(fusable, 0, 1) == "sp_scale-sp_add"
    api.fuse_skeleton(fusable, 0, 1, "sp_scale-sp_add")
    assert api.fusion_name(fusable, 0, 1) == "sp_scale-sp_add-2"
    d = fusable / "fusions" / "pair"
    assert fusion_of_source(fusable, d / "fused.cu") == "pair"
    assert fusion_of_source(fusable, d / "fusion.json") is None
    assert fusion_of_source(fusable, d / "fused.cubin") is None
    assert fusion_of_source(fusable, fusable / "kernels" / "1" / "source" / "seq_pipeline.cu") is None
