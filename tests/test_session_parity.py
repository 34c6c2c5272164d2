"""One session behind every front end (kerncap.session, issue 28): the same request gives
the same typed result through the CLI's --json, the MCP tool and the API, on the
committed axpy capture replayed by the numpy stand-in for the replay core
(tests/replay_sim.py: the server's real operations and the client's real orchestration,
in-process); and a variant an agent builds through MCP is the one `kerncap check` checks
and the workbench's History shows. The GPU suite runs the same calls on the H200
(tests/gpu/test_mcp_gpu.py, test_check_gpu.py, test_tui_loop.py)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import replay_sim as sim

pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

from mcp import Client  # noqa: E402

from kerncap import api, cli  # noqa: E402
from kerncap.frontends.mcp_server import build_server  # noqa: E402
from kerncap.reproducer.variants import RecompileResult, publish_variant  # noqa: E402
from kerncap.errors import UsageError  # noqa: E402


def axpy(m, _s):
    y = m.f32(1)
    y[:] = y + np.float32(0.5) * m.f32(0)


def slow_axpy(m, s):
    axpy(m, s)


slow_axpy.ms = 0.08  # the simulated core times a kernel at its `ms`


KERNELS = {"captured": sim.axpy, "same.cubin": axpy, "abs.cubin": sim.axpy_abs, "slow.cubin": slow_axpy,
           "1.cubin": axpy, "2.cubin": axpy}


@pytest.fixture
def repro(tmp_path, monkeypatch) -> Path:
    return sim.axpy_reproducer(tmp_path, monkeypatch, KERNELS)


def mcp(tmp_path: Path, *calls):
    """Run (tool, args) calls in one MCP client session over the SDK's client."""
    server = build_server([tmp_path])

    async def go():
        async with Client(server) as c:
            return [await c.call_tool(name, args) for name, args in calls]
    out = anyio.run(go)
    for r in out:
        assert not r.is_error, r.content[0].text
    return [r.structured_content for r in out]


def cli_json(capsys, *argv) -> tuple[int, dict]:
    status = cli.main([*argv, "--json"])
    return status, json.loads(capsys.readouterr().out)


def plain(doc):
    """Through JSON, as a client sees it."""
    return json.loads(json.dumps(doc))


@pytest.mark.parametrize("variant,extra", [
    (None, {}),                                    # the captured cubin, determinism in 3 runs (the default)
    ("same.cubin", {"perturb": 2, "seed": 1}),    # a correct variant on perturbed inputs too
    ("abs.cubin", {"perturb": 2, "seed": 1}),     # right on the captured input, wrong on a perturbed one
    ("same.cubin", {"region_dtypes": {1: "float32"}}),  # per-region dtypes: element-wise (the one rule)
])
def test_validate_is_one_result_in_every_front_end(repro, tmp_path, capsys, variant, extra):
    cubin = str(tmp_path / variant) if variant else None
    argv = ["validate", str(repro)] + (["--cubin", cubin] if cubin else [])
    for k, v in extra.items():
        if k == "region_dtypes":
            argv += [a for rid, t in v.items() for a in ("--region-dtype", f"{rid}={t}")]
        else:
            argv += [f"--{k}", str(v)]
    status, from_cli = cli_json(capsys, *argv)
    assert from_cli.pop("set_timing") is None  # the CLI's JSON also times a set's variant (docs/cli.md)
    [from_mcp] = mcp(tmp_path, ("validate", {"reproducer": str(repro), **({"cubin": cubin} if cubin else {}),
                                             **extra}))
    request = api.ValidateRequest(cubin=cubin, **{k: v for k, v in extra.items()})
    from_api = api.validate_request([repro], request)
    with api.open_session(repro) as s:
        from_session = s.validate(request)
    assert plain(from_cli) == plain(from_mcp) == plain(from_api.to_dict()) == plain(from_session.to_dict())
    assert status == from_api.exit_status
    assert from_api.reproducers[0].determinism.runs == api.options.RUNS.default == 3  # MCP's default too
    if variant == "abs.cubin":
        assert from_mcp["verdict"] == "fail" and from_mcp["perturb"] == 2
    if "region_dtypes" in extra:
        assert from_mcp["mode"] == "tolerance"


def test_replay_and_compare_are_one_result_in_every_front_end(repro, tmp_path, capsys):
    slow = str(tmp_path / "slow.cubin")
    _, cli_cmp = cli_json(capsys, "replay", str(repro), "--compare", slow, "--rounds", "6", "-n", "4")
    _, cli_replay = cli_json(capsys, "replay", str(repro), "--cubin", slow, "-n", "5")
    # each in a fresh server, as the CLI's: the simulated timings follow the launches before
    [mcp_cmp] = mcp(tmp_path, ("compare", {"reproducer": str(repro), "cubins": [slow], "rounds": 6, "iterations": 4}))
    [mcp_replay] = mcp(tmp_path, ("replay", {"reproducer": str(repro), "cubin": slow, "iterations": 5}))
    with api.open(repro, compile_worker=False) as s:
        api_cmp = s.compare(api.CompareRequest(cubins=(slow,), rounds=6, iterations=4)).to_dict()
    with api.open(repro, compile_worker=False) as s:
        api_replay = s.replay(api.ReplayRequest(cubin=slow, iterations=5)).to_dict()
    for doc in (cli_cmp, mcp_cmp, api_cmp):
        doc.pop("seconds")  # wall time of the comparison
    assert plain(cli_cmp) == plain(mcp_cmp) == plain(api_cmp)
    assert plain(cli_replay) == plain(mcp_replay) == plain(api_replay)
    assert mcp_cmp["programs"][1]["interval"]["verdict"] == "slower"


def test_compare_confidence_reaches_the_interval_in_every_front_end(repro, tmp_path, capsys):
    """--confidence (MCP's `confidence`, CompareRequest.confidence) is the interval's: the
    comparison and each variant's interval say 0.9, not the 0.99 default."""
    slow = str(tmp_path / "slow.cubin")
    _, from_cli = cli_json(capsys, "replay", str(repro), "--compare", slow, "--rounds", "6", "-n", "4",
                           "--confidence", "0.9")
    [from_mcp] = mcp(tmp_path, ("compare", {"reproducer": str(repro), "cubins": [slow], "rounds": 6, "iterations": 4,
                                            "confidence": 0.9}))
    with api.open(repro, compile_worker=False) as s:
        from_api = s.compare(api.CompareRequest(cubins=(slow,), rounds=6, iterations=4, confidence=0.9)).to_dict()
    for doc in (from_cli, from_mcp, from_api):
        assert doc["confidence"] == 0.9 and doc["programs"][1]["interval"]["confidence"] == 0.9, doc


def test_info_is_one_result_in_every_front_end(repro, tmp_path, capsys):
    _, from_cli = cli_json(capsys, "info", str(repro))
    [from_mcp] = mcp(tmp_path, ("info", {"reproducer": str(repro)}))
    assert plain(from_cli) == plain(from_mcp) == plain(api.info(repro))


# -- build: one call to the session in every front end ---------------------------------------------


@pytest.fixture
def compiles(monkeypatch):
    """The axpy fixture has no kernel sources to compile: this stands in for nvcc, writing
    the next numbered variant as recompile does (its bytes pick the simulated kernel)."""
    made = []

    def recompile(root, config=None, *, trust=False, mode="auto", split=False):
        root = Path(root)
        variants = root / "variants"
        variants.mkdir(exist_ok=True)
        tmp = variants / ".build.tmp"
        tmp.write_bytes((root / "source" / "axpy.cu").read_bytes())
        cubin = publish_variant(tmp, variants)
        made.append(cubin)
        return RecompileResult(cubin=cubin, seconds=0.01, command=["nvcc (stand-in)"], log="", mode=mode)

    monkeypatch.setattr("kerncap.session.session.recompile_kernel", recompile)
    return made


def with_source(repro: Path, text: str = "// axpy\n") -> Path:
    (repro / "source").mkdir(exist_ok=True)
    (repro / "source" / "axpy.cu").write_text(text)
    return repro


def row(doc: dict) -> dict:
    """A History row without what differs between two builds of the same source."""
    return {k: v for k, v in doc.items() if k not in ("time", "commit", "build_seconds")}


def test_a_build_is_the_same_in_every_front_end(tmp_path, monkeypatch, capsys, compiles):
    first = with_source(sim.axpy_reproducer(tmp_path / "a", monkeypatch, KERNELS))
    copies = {}
    for name in ("cli", "mcp", "api"):
        copies[name] = tmp_path / name
        shutil.copytree(first, copies[name])
    status, from_cli = cli_json(capsys, "build", str(copies["cli"]))
    [from_mcp] = mcp(tmp_path, ("build", {"reproducer": str(copies["mcp"])}))
    from_api = api.build(copies["api"]).to_dict()
    assert status == 0 and from_cli["status"] == from_mcp["status"] == from_api["status"] == "recorded"
    assert row(from_cli["variant"]) == row(from_mcp["variant"]) == row(from_api["variant"])
    assert row(from_cli["baseline"]) == row(from_mcp["baseline"]) == row(from_api["baseline"])
    v = from_mcp["variant"]
    assert v["id"] == 1 and v["validation"] == "pass" and v["validation_detail"] == "exact · p4" \
        and v["cubin"] == "variants/1.cubin" and v["speedup_low"] is not None
    # the same request again: nothing to build, in every front end
    _, again = cli_json(capsys, "build", str(copies["cli"]))
    [again_mcp] = mcp(tmp_path, ("build", {"reproducer": str(copies["mcp"])}))
    assert again["status"] == again_mcp["status"] == api.build(copies["api"]).status == "unchanged"
    assert len(compiles) == 3


def test_an_mcp_built_variant_is_what_check_and_the_workbench_see(tmp_path, monkeypatch, capsys, compiles):
    repro = with_source(sim.axpy_reproducer(tmp_path, monkeypatch, KERNELS))
    [built] = mcp(tmp_path, ("build", {"reproducer": str(repro)}))
    assert built["status"] == "recorded" and built["variant"]["id"] == 1
    history = json.loads((repro / "history.json").read_text())
    assert [v["id"] for v in history["variants"]] == [0, 1]

    # kerncap check: the captured cubin and the agent's variant, both validated and timed
    status, report = cli_json(capsys, "check", str(repro), "--backend", "serial", "-n", "5")
    assert status == 0, report
    assert [c["key"] for c in report["cases"]] == ["axpy#baseline", "axpy#v1"]
    assert report["cases"][1]["cubin"] == "variants/1.cubin" and report["cases"][1]["status"] == "pass"

    # the workbench's History
    from textual.widgets import DataTable

    from kerncap_tui.app import KerncapApp

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))

    async def run():
        app = KerncapApp(repro)
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause(0.5)
            table = app.query_one("#history-table", DataTable)
            labels = [str(table.get_row_at(i)[1]) for i in range(table.row_count)]
            assert labels == ["baseline", "v1"], labels
            assert str(table.get_cell("1", "valid")).startswith("✓ exact · p4")
            app.exit()

    asyncio.run(run())


def test_build_json_prints_the_documented_keys_and_a_reused_cubin_says_so(tmp_path, monkeypatch, capsys, compiles):
    """`kerncap build --json` prints the keys docs/cli.md lists, `reused` among them; in one
    session (the workbench, MCP) a cubin compiled from this very source whose replay could
    not run is replayed the next time, not compiled again, and the result says so."""
    import re

    doc = (Path(__file__).parents[1] / "docs" / "cli.md").read_text()
    documented = re.findall(r"`(\w+)`", re.search(r"`--json` prints (`status`.*?) lines\.", doc, re.S).group(1))
    assert "reused" in documented, documented
    status, built = cli_json(capsys, "build", str(with_source(sim.axpy_reproducer(tmp_path, monkeypatch, KERNELS))))
    assert status == 0 and sorted(built) == sorted(documented) and built["reused"] is False

    again = with_source(sim.axpy_reproducer(tmp_path / "again", monkeypatch, KERNELS))
    _no_gpu_the_first_time(monkeypatch)
    with api.open_session(again, compile_worker=False) as session:
        with pytest.raises(api.ReplayNotRun):
            session.build()
        second = session.build().to_dict()
    assert len(compiles) == 2 and second["reused"] is True and second["status"] == "recorded"
    assert sorted([*second, "log"]) == sorted(documented)


def _no_gpu_the_first_time(monkeypatch) -> None:
    """The stand-in replay core answers "not built" to the first session start only."""
    from kerncap.errors import NativeUnavailable

    real_start, starts = sim.InProcessClient._start, []

    def start(self):
        starts.append(1)
        if len(starts) == 1:
            raise NativeUnavailable("replay core not built (stand-in)", "a test's")
        real_start(self)

    monkeypatch.setattr(sim.InProcessClient, "_start", start)


def test_a_cubin_compiled_from_this_source_but_gone_since_is_compiled_again(tmp_path, monkeypatch, compiles):
    """A build whose replay could not run keeps its cubin for the next build of the same
    source; when that cubin has been deleted since (variants/ cleaned), the next build
    compiles again and records the new cubin, not `reused` and not a replay of a missing file."""
    repro = with_source(sim.axpy_reproducer(tmp_path, monkeypatch, KERNELS))
    _no_gpu_the_first_time(monkeypatch)
    with api.open_session(repro, compile_worker=False) as session:
        with pytest.raises(api.ReplayNotRun):
            session.build()
        [first] = compiles
        first.unlink()
        second = session.build()
    assert len(compiles) == 2 and second.reused is False and second.status == "recorded"
    assert second.variant.validation == "pass" and (repro / second.variant.cubin).is_file()


def test_a_build_superseded_while_it_was_measured_records_no_variant(tmp_path, monkeypatch, compiles):
    """`cancelled()` is asked again after the timing and validation (a newer save arrived
    meanwhile): the build says superseded and records no variant row, only the baseline it
    had to record first."""
    repro = with_source(sim.axpy_reproducer(tmp_path, monkeypatch, KERNELS))
    asked: list[int] = []

    def cancelled() -> bool:  # not yet after the compile; superseded by the time it was measured
        asked.append(1)
        return len(asked) >= 2

    with api.open_session(repro, compile_worker=False) as s:
        result = s.build(api.BuildRequest(rounds=5, iterations=2), cancelled=cancelled)
        rows = list(s.reload_history().variants)
    assert len(asked) == 2 and result.status == "superseded" and result.variant is None
    assert result.baseline is not None and [v.id for v in rows] == [result.baseline.id], rows


def test_api_build_reports_its_progress(tmp_path, monkeypatch, compiles):
    """api.build's `progress` hears the build's steps as the CLI's does (the compile, the
    baseline, the variant's line with its verdict)."""
    repro = with_source(sim.axpy_reproducer(tmp_path, monkeypatch, KERNELS))
    heard: list[tuple[str, str]] = []
    result = api.build(repro, api.BuildRequest(rounds=5, iterations=2),
                       progress=lambda text, level="": heard.append((text, level)))
    assert result.status == "recorded"
    texts = [t for t, _ in heard]
    assert "recompiling …" in texts and any(t.startswith("baseline: ") for t in texts), texts
    assert heard[-1][1] == "pass" and heard[-1][0].startswith(result.variant.label), heard[-1]


def test_a_built_rows_minimum_is_its_fastest_timed_round_not_above_its_median(tmp_path, monkeypatch, compiles):
    """A History row's min_ms is the fastest of the times its interleaved timing took, for
    the baseline and the variant alike: never above the median (the simulated kernel's
    times vary). Mutation caught: the row's minimum taken as the slowest time."""
    repro = with_source(sim.axpy_reproducer(tmp_path, monkeypatch, KERNELS))
    result = api.build(repro, api.BuildRequest(rounds=5, iterations=4))
    assert result.status == "recorded"
    for v in (result.baseline, result.variant):
        assert v.min_ms is not None and v.median_ms is not None, v
        assert 0 < v.min_ms <= v.median_ms, (v.label, v.min_ms, v.median_ms)


def test_cli_build_opens_the_device_asked_for(tmp_path, monkeypatch, capsys, compiles):
    """`kerncap build --device N`: the replay server opens the capture on GPU N, not 0."""
    repro = with_source(sim.axpy_reproducer(tmp_path, monkeypatch, KERNELS))
    devices: list[int] = []

    class Recording(sim.InProcessClient):
        def __init__(self, capture_dir, device=0, **kw):
            devices.append(device)
            super().__init__(capture_dir, device=device, **kw)

    monkeypatch.setattr("kerncap.replay.client.ReplayClient", Recording)
    status, built = cli_json(capsys, "build", str(repro), "--device", "1", "--rounds", "5", "-n", "2")
    assert status == 0 and built["status"] == "recorded"
    assert devices and set(devices) == {1}, devices


def test_mcp_recompile_and_build_take_every_compile_mode(tmp_path, monkeypatch, compiles):
    """MCP's `mode` offers what the CLI's --full/--reduced and the compiler take, and
    reaches the compile (the stand-in records the mode it was asked for)."""
    from kerncap.recompile.devcompile.build import MODES

    async def schemas():
        async with Client(build_server([tmp_path])) as c:
            return {t.name: t.input_schema for t in (await c.list_tools()).tools}
    tools = anyio.run(schemas)
    for tool in ("recompile", "build"):
        assert tuple(tools[tool]["properties"]["mode"]["enum"]) == MODES == ("auto", "reduced", "full"), tool
        assert tools[tool]["properties"]["mode"]["default"] == "auto"
    repro = with_source(sim.axpy_reproducer(tmp_path, monkeypatch, KERNELS))
    recompiled, built = mcp(tmp_path, ("recompile", {"reproducer": str(repro), "mode": "reduced"}),
                            ("build", {"reproducer": str(repro), "mode": "reduced"}))
    assert recompiled["mode"] == "reduced" and built["compiled"]["mode"] == "reduced"


@pytest.mark.parametrize("flag,mode", [(None, "auto"), ("--reduced", "reduced"), ("--full", "full")])
def test_cli_build_takes_every_compile_mode(tmp_path, monkeypatch, capsys, compiles, flag, mode):
    """`kerncap build --full/--reduced` reach the compile as MCP's `mode` does (the stand-in
    records the mode it was asked for): --reduced is no fallback-allowing auto."""
    repro = with_source(sim.axpy_reproducer(tmp_path, monkeypatch, KERNELS))
    status, built = cli_json(capsys, "build", str(repro), *([flag] if flag else []))
    assert status == 0 and built["compiled"]["mode"] == mode, built["compiled"]


def noisy(m, _s):  # the last bit of some elements of y varies from run to run
    y = m.f32(1)
    out = y + np.float32(0.5) * m.f32(0)
    flip = np.random.default_rng().random(len(out)) < 0.2
    out[flip] = np.nextafter(out[flip], np.float32(np.inf))
    y[:] = out


def faulting(_m, _s):
    raise sim.sticky("cuStreamSynchronize on kernel _Z12axpy_inplacefPKfPfi of 1.cubin failed: "
                     "CUDA_ERROR_ILLEGAL_ADDRESS (700)")


@pytest.mark.parametrize("verdict", ["error", "inconclusive"])
def test_build_exit_status_is_three_for_an_error_or_an_inconclusive_verdict(tmp_path, monkeypatch, capsys, compiles,
                                                                          verdict):
    """docs/cli.md: 0 a pass, 1 a validation failure, 3 what could not be judged: a variant
    that faults (`error`), or one whose only differences lie in a region the captured
    kernel itself varies in and whose dtype is unknown (`inconclusive`)."""
    kernels = dict(KERNELS, **({"1.cubin": faulting} if verdict == "error" else {"captured": noisy, "1.cubin": noisy}))
    repro = with_source(sim.axpy_reproducer(tmp_path, monkeypatch, kernels))
    if verdict == "inconclusive":  # no demangled signature: region 1's dtype is unknown
        manifest = repro / "capture" / "manifest.json"
        m = json.loads(manifest.read_text())
        del m["kernel"]["demangled"]
        manifest.write_text(json.dumps(m))
    status, built = cli_json(capsys, "build", str(repro))
    assert built["variant"]["validation"] == verdict, built["variant"]
    assert status == 3


# -- one declaration per option and default -----------------------------------------------------

# (command, MCP tool, the request record, the fields whose options both render)
DECLARED = [
    ("validate", "validate", api.ValidateRequest, ["runs", "seed", "atol", "rtol", "dtype", "keep", "region_dtypes"]),
    ("validate", "validate", api.SequenceReplay, ["per_launch"]),
    ("replay", "compare", api.CompareRequest, ["rounds", "min_seconds", "max_seconds", "confidence", "inputs"]),
    ("replay", "replay", api.ReplayRequest, ["per_launch", "flush_l2", "warm_l2"]),
    ("build", "build", api.BuildRequest, ["rounds", "iterations", "perturb", "runs", "inputs", "config", "kernel",
                                          "fusion", "intermediates", "trust"]),
    ("check", None, api.MeasureRequest, ["iterations", "warmup", "warm_l2", "runs", "seed", "replay_timeout",
                                          "region_dtypes"]),
    ("apply", "apply", api.options.ApplyRequest, ["variant", "dispatch", "check", "runs", "identify", "timeout"]),
]


@pytest.mark.parametrize("command,tool,request_type,names", DECLARED,
                         ids=[f"{d[0]}-{d[2].__name__}" for d in DECLARED])
def test_argparse_and_the_mcp_schema_render_the_declarations(tmp_path, command, tool, request_type, names):
    """Each field's option (kerncap.core.option) is the one source of the CLI flag, its
    default and help, and the MCP argument's default and bounds."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    actions = {a.dest: a for a in sub._actions}
    schema = None
    if tool is not None:
        async def go():
            async with Client(build_server([tmp_path])) as c:
                return {t.name: t for t in (await c.list_tools()).tools}[tool].input_schema
        schema = anyio.run(go)
    for name in names:
        option = api.options.option_named(request_type, name)
        action = actions[option.name]
        assert option.flag in action.option_strings, (command, name)
        assert action.default == ([] if option.many else option.default), (command, name)
        assert option.help in action.help
        if option.default is not None and not option.many:
            assert f"({option.default_text}" in action.help, action.help
        if schema is not None and not (tool == "build" and name == "trust"):
            prop = schema["properties"][option.mcp_name or option.name]
            assert prop.get("default") == (None if option.many else option.default), (tool, name, prop)
            assert prop["description"] == option.help
            if option.minimum is not None and not option.many:
                bound = prop.get("minimum", next((b.get("minimum") for b in prop.get("anyOf", []) if "minimum" in b),
                                                 None))
                assert bound == option.minimum, (tool, name, prop)


def test_every_request_field_names_its_own_option():
    """A field declared with another field's option would render under the wrong name."""
    import dataclasses

    for request_type in (api.ValidateRequest, api.ReplayRequest, api.CompareRequest, api.BuildRequest,
                         api.MeasureRequest, api.SequenceReplay, api.options.ApplyRequest):
        for f in dataclasses.fields(request_type):
            option = f.metadata.get("kerncap.option")
            if option is not None:
                assert option.name == f.name, (request_type.__name__, f.name, option.name)


@pytest.mark.parametrize("command,tool", [("validate", "validate"), ("replay", "replay"), ("replay", "compare")])
def test_the_sequence_order_is_one_declaration_in_argparse_and_the_mcp_schema(tmp_path, command, tool):
    """--order and MCP's `order` (docs/sequences.md): the same choices from SEQUENCE_ORDER;
    the CLI leaves it unset (None: the replay server's default), MCP says that default."""
    from kerncap.session import options as O

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    action = {a.dest: a for a in sub._actions}[O.SEQUENCE_ORDER.name]
    assert tuple(action.choices) == O.SEQUENCE_ORDERS == api.SEQUENCE_ORDERS and action.default is None

    async def go():
        async with Client(build_server([tmp_path])) as c:
            return {t.name: t for t in (await c.list_tools()).tools}[tool].input_schema
    prop = anyio.run(go)["properties"]["order"]
    assert tuple(prop["enum"]) == O.SEQUENCE_ORDERS and prop["default"] == O.SEQUENCE_ORDER.default == "streams"
    with pytest.raises(UsageError, match="--order 'sideways'"):
        O.check_order("sideways")


def test_the_mcp_validate_defaults_are_the_clis():
    """MCP's validate used to default to 1 determinism run where the CLI and the workbench
    used 3, and to answer another type when perturb was 0."""
    assert api.options.RUNS.default == 3 == api.ValidateRequest().runs == api.BuildRequest().runs
    assert api.MeasureRequest().runs == 3  # kerncap check / sweep too


def test_validate_set_with_a_variant_restores_each_member_once(fake_set, tmp_path, monkeypatch, capsys):
    """`kerncap validate SET --cubin V` validated every member, then timed them in new
    replay servers (each member restored twice); now one server per member does both."""
    sim.install(monkeypatch)
    monkeypatch.setattr(sim, "KERNELS", dict(KERNELS))
    monkeypatch.setattr("kerncap.replay.client.ReplayClient", sim.InProcessClient)
    opened: list[str] = []
    real_start = sim.InProcessClient._start

    def counting_start(self):
        opened.append(self.capture_dir.name)
        return real_start(self)

    monkeypatch.setattr(sim.InProcessClient, "_start", counting_start)
    root = fake_set(tmp_path / "set").set_dir
    (tmp_path / "same.cubin").write_bytes(b"same.cubin")
    status, doc = cli_json(capsys, "validate", str(root), "--cubin", str(tmp_path / "same.cubin"))
    assert status == 0 and doc["verdict"] == "pass" and doc["set_timing"]["weighted_speedup"] is not None
    assert doc["set"] is True  # the report says so itself, as MCP's validate of a set does (issue 45)
    assert sorted(opened) == ["0", "1"], opened  # members/0 and members/1, one replay server each
    assert [m["validation"]["verdict"] for m in doc["set_timing"]["members"]] == ["pass", "pass"]


# -- the verbs that run on the CPU (issue 45): info, list, dump, through every front end -------------


def _without(doc, *paths):
    """The document with each of `paths` (the front ends' own output directories) written as OUT."""
    text = json.dumps(doc)
    for p in paths:
        text = text.replace(str(p), "OUT")
    return json.loads(text)


def test_info_and_list_are_one_result_in_every_front_end(repro, tmp_path, capsys):
    """`kerncap info --json`, MCP's info and the API's (the workbench's) document are one;
    `kerncap list DIR --json` and MCP's list_reproducers give the same row."""
    status, from_cli = cli_json(capsys, "info", str(repro))
    info_mcp, listed = mcp(tmp_path, ("info", {"reproducer": str(repro)}), ("list_reproducers", {}))
    assert status == 0 and plain(from_cli) == plain(info_mcp) == plain(api.info(repro).to_dict())
    _, rows_cli = cli_json(capsys, "list", str(repro))
    row_mcp = [r for r in listed["reproducers"] if r["path"] == str(repro)]
    assert len(rows_cli) == 1 and plain(rows_cli) == plain(row_mcp)
    assert plain(rows_cli) == plain([r.to_dict() for r in api.list_reproducers(tmp_path / "none", [repro])])


def test_a_sets_info_says_set_in_every_front_end(fake_set, tmp_path, capsys):
    """Drift: MCP's info added `"set": true` to a set's document, `kerncap info SET --json`
    did not; the document carries it now, the same through both."""
    root = fake_set(tmp_path / "set").set_dir
    status, from_cli = cli_json(capsys, "info", str(root))
    [from_mcp] = mcp(tmp_path, ("info", {"reproducer": str(root)}))
    assert plain(from_cli) == plain(from_mcp) == plain(api.set_info(root).to_dict()) == plain(api.info(root))
    assert from_cli["set"] is True and "set" not in api.info(root / "members" / "0")


@pytest.mark.parametrize("variant", [None, "abs.cubin"])
def test_dump_is_one_result_in_every_front_end(repro, tmp_path, capsys, variant):
    """`kerncap dump --json`, MCP's dump and the workbench's (api.dump on its open session):
    the captured pre/post states without a replay, and a variant's output and expected
    through the (simulated) replay server; the same files and the same document."""
    cubin = str(tmp_path / variant) if variant else None
    outs = [tmp_path / f"out-{name}" for name in ("cli", "mcp", "session")]
    states = ["pre", "post"] + (["output", "expected"] if cubin else [])
    argv = ["dump", str(repro), "-o", str(outs[0])] + (["--cubin", cubin] if cubin else [])
    status, from_cli = cli_json(capsys, *argv)
    [from_mcp] = mcp(tmp_path, ("dump", {"reproducer": str(repro), "output": str(outs[1]),
                                         **({"cubin": cubin} if cubin else {})}))
    with api.open(repro, compile_worker=False) as s:
        from_session = s.dump((), states, cubin=cubin, output=outs[2]).to_dict()
    assert status == 0
    assert _without(from_cli, outs[0]) == _without(from_mcp, outs[1]) == _without(from_session, outs[2])
    files = [sorted(p.name for p in out.iterdir()) for out in outs]
    assert files[0] == files[1] == files[2] and len(files[0]) == len(states) + 1  # one item: its states, a sidecar
    for name in files[0]:
        if name.endswith(".npy"):
            assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes() == (outs[2] / name).read_bytes()


def test_dump_of_a_perturbed_input_writes_output_and_expected_in_every_front_end(repro, tmp_path, capsys):
    """`kerncap dump --perturbation K` with no cubin: the captured cubin's output on perturbed
    input K and what validate compares it with are written by default (docs/cli.md), by
    MCP's dump as by the CLI: the same states, files and document."""
    outs = [tmp_path / f"out-{name}" for name in ("cli", "mcp")]
    status, from_cli = cli_json(capsys, "dump", str(repro), "-o", str(outs[0]), "--perturbation", "1")
    [from_mcp] = mcp(tmp_path, ("dump", {"reproducer": str(repro), "output": str(outs[1]), "perturbation": 1}))
    assert status == 0
    assert _without(from_cli, outs[0]) == _without(from_mcp, outs[1])
    files = [sorted(p.name for p in out.iterdir()) for out in outs]
    assert files[0] == files[1]
    assert {n.rsplit(".", 2)[-2] for n in files[0] if n.endswith(".npy")} == {"pre", "post", "output", "expected"}, files[0]


def test_dump_of_a_perturbed_input_follows_its_seed_in_every_front_end(repro, tmp_path, capsys):
    """`kerncap dump --perturbation 1 --seed 7` and MCP's dump with `seed` 7 run on the same
    redrawn input (validate's perturbation 1 of seed 7): the same document and the same
    bytes, unlike those of seed 0. Mutation caught: MCP's dump passing seed 0 whatever it
    was given."""
    outs = {name: tmp_path / f"out-{name}" for name in ("cli", "mcp", "mcp0")}
    status, from_cli = cli_json(capsys, "dump", str(repro), "1", "-o", str(outs["cli"]), "--perturbation", "1",
                                "--seed", "7")
    from_mcp, seed0 = mcp(tmp_path,
                          ("dump", {"reproducer": str(repro), "output": str(outs["mcp"]), "items": ["1"],
                                    "perturbation": 1, "seed": 7}),
                          ("dump", {"reproducer": str(repro), "output": str(outs["mcp0"]), "items": ["1"],
                                    "perturbation": 1}))
    assert status == 0
    assert _without(from_cli, outs["cli"]) == _without(from_mcp, outs["mcp"]) != _without(seed0, outs["mcp0"])
    assert "seed 7" in json.dumps(from_mcp) and "seed 7" not in json.dumps(seed0)
    expected = {name: [p.read_bytes() for p in sorted(out.glob("*.expected.npy"))] for name, out in outs.items()}
    assert len(expected["cli"]) == 1 and expected["cli"] == expected["mcp"] != expected["mcp0"]


def test_options_only_the_cli_had_reach_mcp_from_the_request(repro, tmp_path, capsys):
    """validate's --region-shape and compare's --seed existed in the CLI only; the MCP tools
    now render every option their request declares, so both are there with the CLI's
    meaning (a new field of ValidateRequest or CompareRequest reaches both front ends)."""
    bad = str(tmp_path / "abs.cubin")
    _, from_cli = cli_json(capsys, "validate", str(repro), "--cubin", bad, "--perturb", "2", "--region-shape",
                           "1=8,-1")
    assert from_cli.pop("set_timing") is None
    [from_mcp] = mcp(tmp_path, ("validate", {"reproducer": str(repro), "cubin": bad, "perturb": 2,
                                             "region_shapes": {"1": [8, -1]}}))
    assert plain(from_cli) == plain(from_mcp)
    def coords(doc):
        return [len(c["report"]["first"][0]["coords"]) for r in doc["reproducers"] for i in r["inputs"]
                for c in i["checks"] if c.get("report") and c["report"].get("first")]
    _, unshaped = cli_json(capsys, "validate", str(repro), "--cubin", bad, "--perturb", "2")
    assert coords(from_mcp) and set(coords(from_mcp)) == {2} != set(coords(unshaped)), coords(unshaped)
    slow = str(tmp_path / "slow.cubin")
    _, cmp_cli = cli_json(capsys, "replay", str(repro), "--compare", slow, "--rounds", "6", "-n", "4", "--seed", "7")
    [cmp_mcp] = mcp(tmp_path, ("compare", {"reproducer": str(repro), "cubins": [slow], "rounds": 6, "iterations": 4,
                                           "seed": 7}))
    for doc in (cmp_cli, cmp_mcp):
        doc.pop("seconds")
    assert plain(cmp_cli) == plain(cmp_mcp)


def test_mcp_arguments_named_apart_from_their_field_bound_the_timing(repro, tmp_path, capsys):
    """compare's `min_time_s` and `max_time_s` (MCP's names of min_seconds and max_seconds)
    reach the timing: min_time_s runs as many rounds as the CLI's --min-time, more than the
    6 asked, and a limit already spent stops the timing after its first round, too few
    for an interval."""
    slow = str(tmp_path / "slow.cubin")
    base = {"reproducer": str(repro), "cubins": [slow], "rounds": 6, "iterations": 2}
    [longer] = mcp(tmp_path, ("compare", {**base, "min_time_s": 0.0012}))  # ~0.1 ms a round: 13 rounds
    _, cli_longer = cli_json(capsys, "replay", str(repro), "--compare", slow, "--rounds", "6", "-n", "2",
                             "--min-time", "0.0012")
    rounds = [len(p["rounds"]) for p in longer["programs"]]
    assert rounds == [len(p["rounds"]) for p in cli_longer["programs"]] and 6 < rounds[0] == rounds[1] <= 20, rounds

    async def bounded():
        async with Client(build_server([tmp_path])) as c:
            return await c.call_tool("compare", {**base, "max_time_s": 1e-9})
    r = anyio.run(bounded)
    assert r.is_error and "1 rounds are too few for a confidence interval" in r.content[0].text, r.content[0].text


# -- apply (issue 46): the app with a variant in place, one request through every front end ------------

from test_apply import KERNEL, built  # noqa: E402,F401  (the stand-in driver and app, built once: tests/fixtures/apply)

from kerncap.errors import KerncapError  # noqa: E402
from kerncap.reproducer.history import History  # noqa: E402


@pytest.fixture
def applied_app(built, tmp_path, monkeypatch):
    """A reproducer whose History has the stand-in's variants (v1 `fast`: right; v2 `late3`:
    differs from its third launch on; v3 `nokernel`: refused) and the command of the
    stand-in app. The committed capture is not of that app: its target (the kernel's name,
    `scale`, y the written parameter) is the one tests/test_apply.py gives the engine."""
    from kerncap.capture import apply as apply_tool

    monkeypatch.setenv("LD_LIBRARY_PATH", str(built["dir"]))  # the stand-in libcuda.so.1
    target = apply_tool.Target(kernel=KERNEL, demangled="axpy(float*, float const*, int)", sha256="0" * 64,
                               globals=[("scale", 4)], outputs=[0])
    monkeypatch.setattr(apply_tool, "target_of", lambda cap, **_: target)
    repro = sim.axpy_reproducer(tmp_path / "src", monkeypatch, KERNELS)
    (repro / "variants").mkdir()
    rows = [{"id": 0, "time": "2026-12-04T00:00:00Z", "median_ms": 0.01, "validation": "pass"}]
    for vid, image in ((1, "fast"), (2, "late3"), (3, "fast nokernel")):
        (repro / "variants" / f"{vid}.cubin").write_bytes(f"FAKEMOD impl={image}".encode() + b"\0")
        rows.append({"id": vid, "time": "2026-12-04T00:00:00Z", "median_ms": 0.01, "validation": "pass",
                     "cubin": f"variants/{vid}.cubin",
                     **({"speedup": 1.25, "speedup_low": 1.21, "speedup_high": 1.29} if vid == 1 else {})})
    (repro / "history.json").write_text(json.dumps({"version": 1, "variants": rows}))
    command = [str(built["app"]), str(built["inject"]), "5", str(tmp_path / "y.bin")]
    return repro, command


def _apply_everywhere(tmp_path, capsys, repro, command, request: dict):
    """(exit status, document, History row 'in_app') from the CLI, MCP and the session, each
    on a copy of the reproducer; the copies' paths written as OUT."""
    copies = {name: tmp_path / name for name in ("cli", "mcp", "session")}
    for p in copies.values():
        shutil.copytree(repro, p)
    argv = ["apply", str(copies["cli"]), "--identify", "name", "--runs", str(request.get("runs", 5))]
    argv += [f"--variant={request['variant']}"] + (["--check"] if request.get("check") else [])
    argv += [f"--dispatch={','.join(map(str, request['dispatch']))}"] if request.get("dispatch") else []
    status = cli.main([*argv, "--json", "--", *command])
    from_cli = json.loads(capsys.readouterr().out)

    async def go():
        async with Client(build_server([tmp_path])) as c:
            return await c.call_tool("apply", {"reproducer": str(copies["mcp"]), "command": command,
                                               "identify": "name", **request})
    answer = anyio.run(go)
    from_mcp = answer.structured_content
    if not answer.is_error:
        assert from_mcp.pop("app_output_tail")[-1] in ("stdout: ran fast=5", "stdout: ran late3=5",
                                                       "stdout: ran plain=5", "stdout: ran fast=2"), from_mcp
    req = api.options.ApplyRequest(command=tuple(command), identify="name", **{
        k: tuple(v) if isinstance(v, list) else v for k, v in request.items()})
    try:
        with api.open(copies["session"], compile_worker=False) as s:
            from_session, session_status = s.apply(req, output=lambda *_: None).to_dict(), None
    except KerncapError as exc:
        from_session, session_status = exc.to_json(), exc.exit_code
    docs = [_without(d, c) for d, c in zip((from_cli, from_mcp, from_session), copies.values())]
    rows = [History.load(c).get(request["variant"]).in_app for c in copies.values()]
    return status, session_status, answer.is_error, docs, rows


@pytest.mark.parametrize("variant,dispatch,status", [(1, None, 0), (2, None, 1), (1, [1, 3], 0)],
                         ids=["passes", "differs-at-launch-2", "two-launches"])
def test_apply_is_one_result_in_every_front_end(applied_app, tmp_path, capsys, variant, dispatch, status):
    """`kerncap apply --json`, MCP's apply and Session.apply: one document and exit status
    (1 when --check finds a launch that differs), and the same `in_app` on the History row."""
    repro, command = applied_app
    request = {"variant": variant, "check": True, "runs": 0, **({"dispatch": dispatch} if dispatch else {})}
    cli_status, _, is_error, (from_cli, from_mcp, from_session), rows = _apply_everywhere(
        tmp_path, capsys, repro, command, request)
    assert not is_error and cli_status == status == from_mcp["exit_status"]
    assert from_cli == from_mcp == from_session
    assert from_cli["row"] == variant and from_cli["launches"] == 5
    # the row's speedup in the reproducer beside the in-app one (v2: a ratio of medians, no interval)
    assert from_cli["replay_speedup"] == ({"speedup": 1.25, "low": 1.21, "high": 1.29, "bound": None, "timer": "events"}
                                          if variant == 1 else
                                          {"speedup": 1.0, "low": None, "high": None, "bound": None, "timer": "events"})
    assert from_cli["substituted"] == (2 if dispatch else 5)
    mismatch = from_cli["check"]["mismatch"]
    assert (mismatch and (mismatch["launch"], mismatch["param"])) == ((2, 0) if variant == 2 else None)
    for row in rows:
        assert row.pop("time")
    assert rows[0] == rows[1] == rows[2] and rows[0]["check"] == ("fail" if variant == 2 else "pass")
    assert rows[0]["mismatch_launch"] == (2 if variant == 2 else None) and rows[0]["command"].endswith("y.bin")


def test_a_refused_variant_is_one_error_in_every_front_end(applied_app, tmp_path, capsys):
    """A variant without the kernel: exit status 4 from the CLI, MCP's tool error with the
    same JSON error, the session's ApplyRefused; nothing recorded on the row."""
    repro, command = applied_app
    cli_status, session_status, is_error, (from_cli, from_mcp, from_session), rows = _apply_everywhere(
        tmp_path, capsys, repro, command, {"variant": 3, "runs": 0})
    assert cli_status == session_status == 4 and is_error
    assert from_cli == from_mcp == from_session and from_cli["error"]["exit_status"] == 4
    assert "has no kernel" in from_cli["error"]["message"] and rows == [None, None, None]


def test_apply_refuses_the_same_bad_requests_in_every_front_end(applied_app, tmp_path, capsys):
    """Both or neither of cubin/variant, a negative run count: usage errors (2) before the
    app runs, through the CLI, MCP and the request itself; a set is refused by its session."""
    repro, command = applied_app
    status = cli.main(["apply", str(repro), "--cubin", "x", "--variant", "1", "--json", "--", *command])
    assert status == 2 and "not allowed with argument" in capsys.readouterr().err
    assert cli.main(["apply", str(repro), "--json", "--", *command]) == 2
    cli_error = json.loads(capsys.readouterr().out)["error"]

    async def go(args):
        async with Client(build_server([tmp_path])) as c:
            return await c.call_tool("apply", {"reproducer": str(repro), "command": command, **args})
    neither = anyio.run(go, {})
    assert neither.is_error and neither.structured_content["error"] == cli_error
    assert "exactly one of --cubin V and --variant N" in cli_error["message"]
    negative = anyio.run(go, {"variant": 1, "runs": -1})
    assert negative.is_error and "runs" in negative.content[0].text
    with pytest.raises(UsageError, match="--runs -1: must be >= 0"):
        api.options.ApplyRequest(command=("x",), variant=1, runs=-1).checked()


def test_a_sets_variant_runs_in_the_app_through_its_first_member(applied_app, tmp_path, capsys):
    """A set of two members of one module (two copies of the stand-in's reproducer), its
    History row 1 a set variant of one cubin (`fast`): `kerncap apply SET --variant 1` runs
    the stand-in app with it on every launch (the interposer's own substitution), --check
    compares all 5, and the outcome is kept on the set's row."""
    from kerncap.reproducer.history import History

    repro, command = applied_app
    root = tmp_path / "set"
    (root / "variants").mkdir(parents=True)
    for i in (0, 1):
        shutil.copytree(repro, root / "members" / str(i))
    shutil.copy(repro / "variants" / "1.cubin", root / "variants" / "fast.cubin")
    (root / "variants" / "1.json").write_text(json.dumps({"cubins": {"0": "variants/fast.cubin",
                                                                     "1": "variants/fast.cubin"}}))
    members = [{"index": i, "dir": f"members/{i}", "dispatch": i, "weight": 0.5} for i in (0, 1)]
    (root / "set.json").write_text(json.dumps({"format": "kerncap-set", "format_version": 1, "members": members}))
    rows = [{"id": 0, "time": "2026-12-04T00:00:00Z", "median_ms": 0.01, "validation": "pass"},
            {"id": 1, "time": "2026-12-04T00:00:00Z", "median_ms": 0.008, "validation": "pass",
             "cubin": "variants/1.json"}]
    (root / "history.json").write_text(json.dumps({"version": 1, "variants": rows}))
    status = cli.main(["apply", str(root), "--variant", "1", "--check", "--runs", "0", "--identify", "name",
                       "--json", "--", *command])
    doc = json.loads(capsys.readouterr().out)
    assert status == 0, doc
    assert (doc["row"], doc["launches"], doc["substituted"], doc["check"]["compared"]) == (1, 5, 5, 5)
    assert doc["check"]["mismatch"] is None and doc["variant"] == str((root / "variants" / "fast.cubin").resolve())
    # the set's row: 0.01 / 0.008
    assert doc["replay_speedup"] == {"speedup": 1.25, "low": None, "high": None, "bound": None, "timer": "events"}
    kept = History.load(root).get(1).in_app
    assert kept["check"] == "pass" and kept["substituted"] == 5
    assert History.load(root / "members" / "0").get(1).in_app is None  # the member's own row is not the set's


def test_apply_defaults_are_one_declaration():
    """The run count, identification and the per-run timeout: the CLI's flags and MCP's
    arguments are ApplyRequest's (900 s per run of the app, as MCP's profile/extract)."""
    r = api.options.ApplyRequest()
    assert (r.runs, r.identify, r.timeout, r.check) == (5, "cubin", 900.0, False)
    assert api.options.APP_TIMEOUT_S == 900.0
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["apply"]
    assert sub.parse_args(["DIR", "--variant", "1"]).timeout == 900.0


def test_a_set_judges_apply_itself_in_every_front_end(fake_set, tmp_path, capsys):
    """The shape is the session's to judge (issue 45): a set applies its variant through its
    first member when the variant is one cubin (tests/test_check.py), and refuses one of two
    cubins with one usage error, the same through the CLI and MCP."""
    root = fake_set(tmp_path / "set").set_dir
    (root / "variants").mkdir()
    for i in (0, 1):
        (root / "variants" / f"m{i}.cubin").write_bytes(b"cubin %d" % i)
    (root / "variants" / "1.json").write_text(json.dumps({"cubins": {"0": "variants/m0.cubin",
                                                                     "1": "variants/m1.cubin"}}))
    status = cli.main(["apply", str(root), "--cubin", str(root / "variants" / "1.json"), "--json", "--", "true"])
    from_cli = json.loads(capsys.readouterr().out)

    async def go():
        async with Client(build_server([tmp_path])) as c:
            return await c.call_tool("apply", {"reproducer": str(root), "command": ["true"],
                                               "cubin": str(root / "variants" / "1.json")})
    answer = anyio.run(go)
    assert status == 2 and answer.is_error and answer.structured_content == from_cli
    assert "holds 2 cubin(s)" in from_cli["error"]["message"] and "members/<i>" in from_cli["error"]["hint"]


def test_a_set_refuses_sanitize_itself_in_every_front_end(fake_set, tmp_path, capsys):
    """`kerncap validate SET --sanitize` asks the set's session, which refuses (issue 45: the
    CLI tested the shape itself and said other words than the session's)."""
    root = fake_set(tmp_path / "set").set_dir
    status = cli.main(["validate", str(root), "--sanitize", "--json"])
    from_cli = json.loads(capsys.readouterr().out)["error"]
    with pytest.raises(UsageError) as refused, api.open(root) as session:
        session.sanitize()
    assert status == 2 and from_cli["message"] == str(refused.value.args[0])
    assert "is a reproducer set" in from_cli["message"] and "members/0" in from_cli["hint"]


def test_a_sequence_refuses_a_plain_recompile_in_every_front_end(tmp_path, monkeypatch, capsys):
    """recompile of a sequence without a kernel is refused by recompile itself: the same
    usage error from `kerncap recompile SEQ` and MCP's recompile (which tested no shape)."""
    import sequence_sim as S

    S.install(monkeypatch)
    seq = S.synthetic_sequence(tmp_path / "seq")
    status = cli.main(["recompile", str(seq), "--json"])
    from_cli = json.loads(capsys.readouterr().out)

    async def go():
        async with Client(build_server([tmp_path])) as c:
            return await c.call_tool("recompile", {"reproducer": str(seq)})
    answer = anyio.run(go)
    assert status == 2 and answer.is_error and answer.structured_content == from_cli
    assert "is a sequence: pick the kernel to rebuild" in from_cli["error"]["message"]


def test_recompile_of_a_set_is_one_result_in_every_front_end(fake_set, tmp_path, monkeypatch, capsys):
    """`kerncap recompile SET` built the set's variant on a CLI path of its own, and MCP's
    recompile refused a set ("is not a reproducer"); both now ask the set's session
    (SetSession.recompile), so they give one document. nvcc is a stand-in here."""
    def stand_in(root, config=None, *, trust=False, mode="auto", split=False):
        variants = Path(root) / "variants"
        variants.mkdir(exist_ok=True)
        cubin = variants / f"{len(list(variants.glob('*.cubin'))) + 1}.cubin"
        cubin.write_bytes(b"stand-in")
        return RecompileResult(cubin=cubin, seconds=0.01, command=["nvcc (stand-in)"], log="", mode=mode)

    monkeypatch.setattr("kerncap.recompile.set_variant.recompile", stand_in)
    root = fake_set(tmp_path / "set").set_dir
    (root / "source").mkdir(exist_ok=True)
    (root / "source" / "axpy.cu").write_text("// axpy\n")
    status, from_cli = cli_json(capsys, "recompile", str(root))
    [from_mcp] = mcp(tmp_path, ("recompile", {"reproducer": str(root)}))
    assert status == 0 and set(from_cli) == set(from_mcp) == {"variant", "seconds", "builds", "cubins", "commands"}
    assert from_cli["builds"] == from_mcp["builds"] == 1  # the members share one captured cubin
    assert sorted(from_cli["cubins"]) == sorted(from_mcp["cubins"]) == ["0", "1"]
    assert Path(from_cli["variant"]).parent == Path(from_mcp["variant"]).parent == root / "variants"
    assert from_cli["variant"] != from_mcp["variant"]  # two numbered set variants
    assert cli.main(["recompile", str(root), "--kernel", "0"]) == 2  # a set refuses --kernel itself
    assert "--kernel picks one kernel of a sequence" in capsys.readouterr().err



@pytest.mark.parametrize("inputs", [1, 3])
def test_a_builds_inputs_are_the_inputs_its_timing_rotates_over(tmp_path, monkeypatch, compiles, inputs):
    """`build --inputs K` times the baseline and the variant on the captured input and K-1
    perturbed ones, as `compare --inputs K` does: the replay core is given K inputs to
    rotate over (a build that passed on the compare request's default gave it 4)."""
    repro = with_source(sim.axpy_reproducer(tmp_path, monkeypatch, KERNELS))
    given: list[int] = []
    real = sim.SimSession.set_time_inputs

    def recorded(self, specs):
        given.append(len(specs))
        return real(self, specs)

    monkeypatch.setattr(sim.SimSession, "set_time_inputs", recorded)
    result = api.build(repro, api.BuildRequest(inputs=inputs, rounds=5, iterations=2, perturb=1))
    assert result.status == "recorded" and result.variant.speedup_low is not None
    assert given and max(given) == inputs, given  # after each timing: [[]], the captured input again


def fast_axpy(m, s):
    axpy(m, s)


fast_axpy.ms = 0.01  # against the captured 0.05 ms: 5× between the stand-in's events


def test_a_build_records_the_bound_the_events_may_hide_and_apply_shows_it(tmp_path, monkeypatch, compiles):
    """A short variant's History row keeps its speedup with both medians less the launch
    floor (the stand-in's floor 0.002 ms: (0.05 − 0.002) / (0.01 − 0.002) = 6×, above the
    medians' 5×); a variant as fast as the captured one records none. The row's bound
    reaches apply's reproducer line (kerncap.session.Session._kept_in_app)."""
    from kerncap.reproducer.history import History

    kernels = {**KERNELS, "1.cubin": fast_axpy}
    repro = with_source(sim.axpy_reproducer(tmp_path / "fast", monkeypatch, kernels))
    result = api.build(repro, api.BuildRequest(rounds=5, iterations=2, perturb=1))
    v = result.variant
    assert result.status == "recorded" and v.speedup == pytest.approx(5.0, rel=0.05)
    assert v.speedup_bound == pytest.approx(6.0, rel=0.05)
    assert History.load(repro).get(1).speedup_bound == v.speedup_bound
    assert api.speedup_phrase(v).endswith(f", up to {v.speedup_bound:.2f}× without the events")
    from kerncap.capture.apply import ApplyRequest, ApplyResult

    applied = ApplyResult(variant=repro / v.cubin, launches=5, substituted=5, check=None, timing=None,
                          skipped_globals=[], row=1)
    with api.open(repro) as session:
        kept = session._kept_in_app(applied, ApplyRequest(command=("app",), variant=1))
    assert kept.replay["bound"] == v.speedup_bound and f"up to {v.speedup_bound:.3f}×" in kept.text()
    same = with_source(sim.axpy_reproducer(tmp_path / "same", monkeypatch, KERNELS))
    assert api.build(same, api.BuildRequest(rounds=5, iterations=2, perturb=1)).variant.speedup_bound is None


def test_a_build_on_the_kernel_timer_keeps_the_kernels_speedup_and_apply_says_the_clock(
        tmp_path, monkeypatch, compiles):
    """`build --timer kernel` times on CUPTI's kernel records (the stand-in: the events add its
    0.002 ms floor): the row keeps the kernels' own 5× and `timer: "kernel"`, no bound (an
    events figure), the phrase says the timer, and apply's reproducer line names the clock."""
    from kerncap.capture.apply import ApplyRequest, ApplyResult
    from kerncap.reproducer.history import History

    repro = with_source(sim.axpy_reproducer(tmp_path, monkeypatch, {**KERNELS, "1.cubin": fast_axpy}))
    v = api.build(repro, api.BuildRequest(rounds=5, iterations=2, perturb=1, timer="kernel")).variant
    assert v.timer == "kernel" and v.speedup == pytest.approx(5.0, rel=0.05) and v.speedup_bound is None
    assert History.load(repro).get(1).timer == "kernel"
    assert "(kernel timer)" in api.speedup_phrase(v)
    applied = ApplyResult(variant=repro / v.cubin, launches=5, substituted=5, check=None, timing=None,
                          skipped_globals=[], row=1)
    with api.open(repro) as session:
        kept = session._kept_in_app(applied, ApplyRequest(command=("app",), variant=1))
    assert kept.replay["timer"] == "kernel" and "CUPTI's kernel records as here" in kept.text()
    with pytest.raises(UsageError, match="--timer"):
        api.build(repro, api.BuildRequest(timer="cupti"))
