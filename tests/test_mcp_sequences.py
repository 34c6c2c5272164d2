"""Sequences over MCP (issue 29, docs/sequences.md "Front ends"): validate and replay with
`per_launch` and `order`, and the fusion tools (fuse_skeleton, fuse_build), through the
MCP SDK's real client session, on the SYNTHETIC sequence of tests/sequence_sim.py (a
two-stream pipeline replayed by the replay server's real code over the simulated core;
there is no committed real sequence capture yet: the GPU suite runs the same tools on the
H200's seq_pipeline capture, tests/gpu/test_sequences.py). Each result is the one the
CLI's --json and the API give for the same request; a per_launch request on one dispatch
(the committed axpy_small H200 capture) or a set is one clear tool error before anything
runs; a fusion's files stay inside the reproducer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import sequence_sim as S
from kerncap import api, cli
from kerncap.errors import KerncapError
from kerncap.reproducer.sequence_variant import write_variant

pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

from mcp import Client  # noqa: E402

from kerncap.frontends.mcp_server import build_server  # noqa: E402

HERE = Path(__file__).resolve().parent
AXPY = HERE / "fixtures" / "captures" / "axpy_small"
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").is_file() else None)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs nvcc (the fused kernel is compiled)")
TODO = "  // TODO: the work of the replaced launches\n"


@pytest.fixture
def seq(tmp_path, monkeypatch):
    S.install(monkeypatch)
    for where in ("kerncap.replay.client.ReplayClient", "kerncap.replay.differential.ReplayClient"):
        monkeypatch.setattr(where, S.SeqClient, raising=False)
    return S.synthetic_sequence(tmp_path / "seq")


def mcp(root: Path, *calls, server=None):
    """(tool, args) calls in one MCP client session over the SDK's client: the results."""
    server = server or build_server([root])

    async def go():
        async with Client(server) as c:
            return [await c.call_tool(name, args) for name, args in calls]
    return anyio.run(go)


def ok(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


def cli_json(capsys, *argv) -> tuple[int, dict]:
    status = cli.main([*argv, "--json"])
    return status, json.loads(capsys.readouterr().out)


def plain(doc):
    return json.loads(json.dumps(doc))


def wrong_add(seq: Path) -> Path:
    """A sequence variant whose rebuilt module computes `add` otherwise (y = tmp + 1.5)."""
    (seq / "variants").mkdir(exist_ok=True)
    (seq / "variants" / "add_wrong.cubin").write_bytes(b"synthetic")
    return write_variant(seq, "wrong", modules={0: "variants/add_wrong.cubin"})


# -- validate and replay: per_launch, order ---------------------------------------------------------


@pytest.mark.parametrize("variant", [None, "wrong"])
def test_validate_per_launch_is_one_result_in_every_front_end(seq, capsys, variant):
    cubin = str(wrong_add(seq)) if variant else None
    argv = ["validate", str(seq), "--per-launch", "--runs", "2"] + (["--cubin", cubin] if cubin else [])
    status, from_cli = cli_json(capsys, *argv)
    assert from_cli.pop("set_timing") is None
    [r] = mcp(seq.parent, ("validate", {"reproducer": seq.name, "per_launch": True, "runs": 2,
                                        **({"cubin": cubin} if cubin else {})}))
    from_mcp = ok(r)
    request = api.ValidateRequest(cubin=cubin, runs=2)
    with api.open(seq, compile_worker=False) as s:
        where_alone = s.localize(cubin)
    from_api = {**api.validate_request([seq], request).to_dict(), "per_launch": where_alone}
    with api.open_session(seq, compile_worker=False) as s:
        report, where = s.validate_per_launch(request)
    from_session = {**report.to_dict(), "per_launch": where}
    assert plain(from_cli) == plain(from_mcp) == plain(from_api) == plain(from_session)
    local = from_mcp["per_launch"]
    if variant is None:
        assert status == 0 and from_mcp["verdict"] == "pass"
        assert not local["diverged"] and local["launches_checked"] == 2 and local["at"] is None
    else:
        assert status == 1 and from_mcp["verdict"] == "fail"
        assert local["diverged"] and local["at"] == "launch 1 (add(float const*, float*))"
        assert [c["id"] for c in local["checks"]] == [2]  # y: launch 0 (scale) still agrees


def test_a_sequence_validated_with_perturb_reports_the_same_in_every_front_end(seq, capsys):
    """Issue 45's drift: `--perturb K` on a sequence (which gets no perturbed inputs yet) said
    `"perturb": K` and a note through the CLI, `"perturb": 0` and no note through MCP."""
    status, from_cli = cli_json(capsys, "validate", str(seq), "--perturb", "2", "--runs", "2")
    from_cli.pop("set_timing", None)
    [r] = mcp(seq.parent, ("validate", {"reproducer": seq.name, "perturb": 2, "runs": 2}))
    from_mcp = ok(r)
    with api.open_session(seq, compile_worker=False) as s:
        from_session = s.validate(api.ValidateRequest(perturb=2, runs=2)).to_dict()
    assert plain(from_cli) == plain(from_mcp) == plain(from_session)
    assert status == 0 and from_mcp["perturb"] == 0 and len(from_mcp["reproducers"][0]["inputs"]) == 1
    assert any("a sequence is validated on its captured input only" in n for n in from_mcp["reproducers"][0]["notes"])


def test_replay_per_launch_and_order_are_one_result_in_every_front_end(seq, capsys):
    _, from_cli = cli_json(capsys, "replay", str(seq), "--per-launch", "-n", "3", "-w", "1", "--order", "serial")
    [r] = mcp(seq.parent, ("replay", {"reproducer": seq.name, "per_launch": True, "iterations": 3, "warmup": 1,
                                      "order": "serial"}))
    from_mcp = ok(r)
    with api.open(seq, order="serial", compile_worker=False) as s:
        from_api = s.replay(api.ReplayRequest(iterations=3, warmup=1, per_launch=True)).to_dict()
    assert plain(from_cli) == plain(from_mcp) == plain(from_api)
    assert [(l["launch"], l["label"], l["stream"]) for l in from_mcp["launches"]] == [
        (0, "launch 0 (scale(float const*, float*))", 0), (1, "launch 1 (add(float const*, float*))", 0)]
    assert all(l["median_ms"] > 0 and len(l["times_ms"]) == 3 for l in from_mcp["launches"])
    [plain_replay] = mcp(seq.parent, ("replay", {"reproducer": seq.name, "iterations": 3}))
    assert ok(plain_replay)["launches"] is None  # per_launch off: the whole sequence only


def test_the_order_reaches_the_replay_server_and_a_change_restarts_it(seq, monkeypatch):
    """One session per reproducer in the MCP server: the order is fixed when its replay
    server opens the capture, so a request in another order restarts it (and only then);
    the graph order, which has no per-launch steps, is refused by the engine's own message."""
    opened: list[str | None] = []
    real_start = S.SeqClient._start

    def counting(self):
        opened.append(self.sequence_order)
        return real_start(self)

    monkeypatch.setattr(S.SeqClient, "_start", counting)
    results = mcp(seq.parent,
                  ("validate", {"reproducer": seq.name, "runs": 1}),
                  ("validate", {"reproducer": seq.name, "runs": 1, "order": "streams"}),
                  ("validate", {"reproducer": seq.name, "runs": 1, "order": "serial"}),
                  ("validate", {"reproducer": seq.name, "runs": 1, "order": "serial", "per_launch": True}),
                  ("validate", {"reproducer": seq.name, "runs": 1, "order": "graph", "per_launch": True}),
                  ("replay", {"reproducer": seq.name, "iterations": 2, "order": "sideways"}))
    assert [ok(r)["verdict"] for r in results[:4]] == ["pass"] * 4
    assert opened == [None, "serial", "graph"], opened  # streams is the default: no restart for it
    graph = results[4]
    assert graph.is_error and "the graph order runs it whole" in graph.content[0].text
    bad = results[5]
    assert bad.is_error and "sideways" in bad.content[0].text and "streams" in bad.content[0].text


@pytest.mark.parametrize("tool", ["validate", "replay"])
def test_per_launch_on_one_dispatch_is_one_clear_error_before_anything_runs(tmp_path, tool, capsys):
    """axpy_small (a real H200 capture of one dispatch): no replay server starts (there is
    no GPU here; a start would answer "no GPU" instead)."""
    repro = tmp_path / "axpy"
    shutil.copytree(AXPY, repro)
    [r] = mcp(tmp_path, (tool, {"reproducer": "axpy", "per_launch": True}))
    assert r.is_error, r.content
    text = r.content[0].text
    assert "--per-launch" in text and f"{repro} holds one dispatch" in text and "extract --sequence" in text, text
    assert "Traceback" not in text and r.structured_content["error"]["exit_status"] == 2 \
        and r.structured_content["error"]["type"] == "UsageError", r.structured_content
    assert cli.main([tool, str(repro), "--per-launch"]) == 2  # the CLI, before anything runs too
    assert "--per-launch" in capsys.readouterr().err


def test_per_launch_on_a_set_is_refused(fake_set, tmp_path):
    root = fake_set(tmp_path / "set").set_dir
    [r] = mcp(tmp_path, ("validate", {"reproducer": str(root), "per_launch": True}))
    assert r.is_error and "is a reproducer set" in r.content[0].text, r.content[0].text


# -- fusion ---------------------------------------------------------------------------------------------


def _body(params: list[dict]) -> str:
    names = {p["address"]: p["name"] for p in params if p["kind"] == "buffer"}
    x, y = names[S.BASES["x"]], names[S.BASES["y"]]
    return f"  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < 256) {y}[i] = 2.0f * {x}[i] + 1.0f;\n"


def test_a_fusion_skeleton_over_mcp_is_the_clis_and_the_apis(seq, capsys):
    [r] = mcp(seq.parent, ("fuse_skeleton", {"reproducer": seq.name, "first": 0, "last": 1, "name": "pair"}))
    from_mcp = ok(r)
    assert from_mcp == api.fusion_info(seq, "pair")
    status, from_cli = cli_json(capsys, "fuse", str(seq), "--first", "0", "--last", "1", "--name", "pair", "--force")
    assert status == 0 and plain(from_cli) == plain(from_mcp)
    assert from_mcp["source"] == str(seq / "fusions" / "pair" / "fused.cu") and TODO in from_mcp["text"]
    assert (from_mcp["first"], from_mcp["last"], from_mcp["kernel"]) == (0, 1, "kc_fused")
    buffers = [(p["name"], p["address"], p["role"]) for p in from_mcp["params"] if p["kind"] == "buffer"]
    assert buffers == [("buf0", S.BASES["x"], "read"), ("buf1", S.BASES["tmp"], "written"),
                       ("buf2", S.BASES["y"], "written")]
    assert any("d2d copy" in s for s in from_mcp["steps_inside"])
    again, one, single = mcp(seq.parent,
                             ("fuse_skeleton", {"reproducer": seq.name, "first": 0, "last": 1, "name": "pair"}),
                             ("fuse_skeleton", {"reproducer": seq.name, "first": 1, "last": 1}),
                             ("fuse_skeleton", {"reproducer": seq.name, "first": 0, "last": 9}))
    assert again.is_error and "exists" in again.content[0].text and "force" in again.content[0].text
    assert one.is_error and "one launch" in one.content[0].text
    assert single.is_error and "the sequence has launches 0-1" in single.content[0].text


@needs_nvcc
def test_a_fusion_is_written_built_validated_and_timed_over_mcp_alone(seq, capsys):
    """The agent's fusion loop: the skeleton, the body and the launch written through
    fuse_build, the variant naming its inferred intermediate; validate per_launch finds the
    fused range (z, copied from tmp between the fused launches, reads what launch 0 no
    longer writes: the synthetic pipeline's honest failure), replay per_launch times the
    fused launch in place of the pair, compare times the whole sequence against the captured."""
    [sk] = mcp(seq.parent, ("fuse_skeleton", {"reproducer": seq.name, "first": 0, "last": 1, "name": "pair"}))
    skeleton = ok(sk)
    text = skeleton["text"].replace(TODO, _body(skeleton["params"]))
    variant = "variants/fuse-pair.json"
    built, checked, timed, whole, base = mcp(
        seq.parent,
        ("fuse_build", {"reproducer": seq.name, "name": "pair", "source": text, "grid": [1], "block": [256]}),
        ("validate", {"reproducer": seq.name, "cubin": variant, "per_launch": True, "runs": 1}),
        ("replay", {"reproducer": seq.name, "cubin": variant, "per_launch": True, "iterations": 3}),
        ("compare", {"reproducer": seq.name, "cubins": [variant], "rounds": 5, "iterations": 2}),
        ("replay", {"reproducer": seq.name, "per_launch": True, "iterations": 3}))
    got = ok(built)
    assert got["variant"] == str(seq / variant) and (got["grid"], got["block"]) == ([1, 1, 1], [256, 1, 1])
    assert [(e["name"], e["why"], e["address"], e["bytes"]) for e in got["excluded"]] == [
        ("buf1", "inferred", S.BASES["tmp"], S.BYTES)]
    assert (seq / "fusions" / "pair" / "fused.cu").read_text() == text
    assert json.loads((seq / "fusions" / "pair" / "fusion.json").read_text())["block"] == [256, 1, 1]
    # the CLI's --build --json: the same summary of the same variant
    status, from_cli = cli_json(capsys, "fuse", str(seq), "--name", "pair", "--build")
    assert status == 0 and plain(from_cli) == plain(got) == plain(api.fused_variant_info(seq / variant))
    v = ok(checked)
    notes = v["reproducers"][0]["inputs"][0]["notes"]
    assert v["verdict"] == "fail" and any("not compared: buf1" in n and "(inferred" in n for n in notes), notes
    failing = [r["id"] for r in v["regions"] if not r["passed"]]
    assert failing == [3], failing  # z only; tmp (region 1) is left out, y is right
    assert v["per_launch"]["diverged"] and v["per_launch"]["at"] == "launches 0-1, fused"
    fused_launches = ok(timed)["launches"]
    captured_launches = ok(base)["launches"]
    assert len(captured_launches) == 2 and len(fused_launches) == 1 and fused_launches[0]["median_ms"] > 0
    programs = ok(whole)["programs"]
    assert programs[1]["cubin"].endswith("fuse-pair.json") and programs[1]["interval"] is not None


@needs_nvcc
def test_fuse_build_writes_a_shared_memory_size_given_alone(seq):
    """fuse_build with only `shared_mem_bytes` (no source, grid or block): fusion.json
    takes it before the build, and the variant's launch carries it."""
    api.fuse_skeleton(seq, 0, 1, "pair")
    [r] = mcp(seq.parent, ("fuse_build", {"reproducer": seq.name, "name": "pair", "shared_mem_bytes": 1024}))
    assert json.loads((seq / "fusions" / "pair" / "fusion.json").read_text())["shared_mem_bytes"] == 1024
    assert ok(r)["shared_mem_bytes"] == 1024


def test_a_fusion_name_or_range_that_is_not_one_is_a_tool_error(seq):
    bad_name, no_fusion, bad_grid = mcp(
        seq.parent,
        ("fuse_skeleton", {"reproducer": seq.name, "first": 0, "last": 1, "name": "../out"}),
        ("fuse_build", {"reproducer": seq.name, "name": "never"}),
        ("fuse_build", {"reproducer": seq.name, "name": "pair", "grid": [0]}))
    assert bad_name.is_error and "fusion name '../out'" in bad_name.content[0].text
    assert no_fusion.is_error and "no fusion never" in no_fusion.content[0].text
    assert bad_grid.is_error  # the schema's bound (ge=1): refused before the engine runs
    [one] = mcp(AXPY.parent, ("fuse_skeleton", {"reproducer": AXPY.name, "first": 0, "last": 1}))
    assert one.is_error and "holds one dispatch, not a sequence" in one.content[0].text


def test_a_fusion_never_reads_or_writes_through_a_link_out_of_the_reproducer(seq, tmp_path):
    """A hostile sequence reproducer: fusions/ (or fused.cu) a link elsewhere, or
    fusion.json naming a source outside fusions/<name>/: refused, nothing outside touched
    or returned, as write_source refuses a source/ that links out."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.cu").write_text("kept")
    (seq / "fusions").symlink_to(outside)
    [r] = mcp(seq.parent, ("fuse_skeleton", {"reproducer": seq.name, "first": 0, "last": 1, "name": "pair"}))
    assert r.is_error and "is a symbolic link" in r.content[0].text, r.content[0].text
    assert sorted(p.name for p in outside.iterdir()) == ["secret.cu"]
    (seq / "fusions").unlink()

    api.fuse_skeleton(seq, 0, 1, "pair")
    fused = seq / "fusions" / "pair" / "fused.cu"
    fused.unlink()
    fused.symlink_to(outside / "secret.cu")
    info, write = mcp(seq.parent, ("fuse_skeleton", {"reproducer": seq.name, "first": 0, "last": 1, "name": "pair",
                                                     "force": True}),
                      ("fuse_build", {"reproducer": seq.name, "name": "pair", "source": "evil"}))
    for res in (info, write):
        assert res.is_error and "is a symbolic link" in res.content[0].text, res.content[0].text
        assert "kept" not in res.content[0].text
    assert (outside / "secret.cu").read_text() == "kept"
    with pytest.raises(KerncapError, match="symbolic link"):
        api.fusion_info(seq, "pair")

    fused.unlink()
    config = seq / "fusions" / "pair" / "fusion.json"
    doc = json.loads(config.read_text())
    config.write_text(json.dumps({**doc, "source": "../../../outside/secret.cu"}))
    [r] = mcp(seq.parent, ("fuse_build", {"reproducer": seq.name, "name": "pair"}))
    assert r.is_error and "fusion.json" in r.content[0].text and "source" in r.content[0].text, r.content[0].text
