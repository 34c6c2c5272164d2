"""The verbs on an open reproducer, declared once (kerncap.frontends.verbs, issue 45): the
CLI's subcommand and MCP's tool are rendered from the declaration: every option of the
verb's request is a flag and a tool argument, and one request gives one document through
both. Shown on every declared verb (apply, sanitize), on `sanitize` run through both
front ends over the stand-in compute-sanitizer, and on a verb this test declares itself:
what adding a verb takes is its request, its call and one entry of VERBS."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import replay_sim as sim

pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

from mcp import Client  # noqa: E402
from test_inspect_tools import fake_tools, repro  # noqa: E402,F401  (the stand-in tools, a copy of axpy_small)

from kerncap import api, cli  # noqa: E402
from kerncap.core.option import Option, check_fields  # noqa: E402
from kerncap.frontends import verbs  # noqa: E402
from kerncap.frontends.mcp_server import build_server  # noqa: E402


def _parsers() -> dict:
    parser = cli.build_parser()
    return next(a for a in parser._actions if a.dest == "command").choices


def _schemas(root: Path) -> dict:
    async def go():
        async with Client(build_server([root])) as c:
            return {t.name: t.input_schema for t in (await c.list_tools()).tools}
    return anyio.run(go)


def _call(root: Path, tool: str, args: dict):
    async def go():
        async with Client(build_server([root])) as c:
            return await c.call_tool(tool, args)
    return anyio.run(go)


def _rendered_from_the_declaration(verb: verbs.Verb, root: Path) -> None:
    """Every option the verb's request declares is its CLI flag (default, help) and its MCP
    argument (default, description, bound), and nothing else but the front ends' own."""
    actions = {a.dest: a for a in _parsers()[verb.name]._actions}
    schema = _schemas(root)[verb.name]
    declared = api.options.options_of(verb.request)
    assert declared
    for option in declared:
        action = actions[option.name]
        assert option.flag in action.option_strings, (verb.name, option.name)
        assert action.default == ([] if option.many else option.default), (verb.name, option.name)
        assert option.help in action.help
        prop = schema["properties"][option.mcp_name or option.name]
        assert prop.get("default") == (None if option.many else option.default), (verb.name, option.name, prop)
        assert prop["description"] == verb.descriptions.get(option.name, option.help)
        if not option.many:  # every bound the option declares is in the tool argument's schema
            bounds = [prop, *prop.get("anyOf", [])]
            for key, bound in (("minimum", option.minimum), ("maximum", option.maximum),
                               ("exclusiveMinimum", option.above), ("exclusiveMaximum", option.below)):
                if bound is not None:
                    assert bound in [b.get(key) for b in bounds], (verb.name, option.name, key, prop)
        if option.choices is not None:
            assert tuple(prop["enum"]) == option.choices and tuple(action.choices) == option.choices
    own_cli = {"help", "path", "json"} | ({"quiet", "cmd"} if verb.runs_app else set())
    assert set(actions) == {o.name for o in declared} | own_cli, verb.name
    own_mcp = {"reproducer"} | ({"command", "cwd", "env"} if verb.runs_app else set())
    assert set(schema["properties"]) == {o.mcp_name or o.name for o in declared} | own_mcp, verb.name


@pytest.mark.parametrize("verb", verbs.VERBS, ids=[v.name for v in verbs.VERBS])
def test_every_declared_verb_is_a_command_and_a_tool_rendered_from_its_request(verb, tmp_path):
    _rendered_from_the_declaration(verb, tmp_path)


# -- sanitize: the verb MCP lacked (the CLI had `validate --sanitize`) -----------------------------


def _sanitized(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in ("seconds", "created")}  # the run's own time


@pytest.mark.parametrize("mode,log,status", [("ok", "clean.memcheck.log", 0),
                                             ("fault", "axpy_oob.memcheck.log", 1)])
def test_sanitize_is_one_result_through_the_cli_and_mcp(repro, fake_tools, tmp_path, capsys, mode, log, status):
    """`kerncap sanitize DIR --json`, MCP's `sanitize` and `kerncap validate DIR --sanitize
    --json`: one document (the variant named relative to the reproducer through MCP), the
    exit status 0 clean, 1 errors."""
    fake_tools(mode, log=log)
    variant = repro / "variants" / "1.cubin"
    assert cli.main(["sanitize", str(repro), "--cubin", str(variant), "--tool", "memcheck", "--timeout", "60",
                     "--json"]) == status
    from_cli = json.loads(capsys.readouterr().out)
    assert cli.main(["validate", str(repro), "--cubin", str(variant), "--sanitize", "memcheck", "--timeout", "60",
                     "--json"]) == status
    from_validate = json.loads(capsys.readouterr().out)
    answer = _call(tmp_path, "sanitize", {"reproducer": str(repro), "cubin": "variants/1.cubin", "timeout_s": 60})
    assert not answer.is_error, answer.content[0].text
    assert _sanitized(answer.structured_content) == _sanitized(from_cli) == _sanitized(from_validate)
    assert from_cli["label"] == "variants/1.cubin" and bool(from_cli["errors"]) == bool(status)


def test_sanitize_runs_the_tool_named_through_the_cli_and_mcp(repro, fake_tools, tmp_path, capsys):
    """`--tool racecheck` (MCP's `tool`) is the tool compute-sanitizer runs and the one the
    result and its stored log name, not the default memcheck."""
    argv_file = fake_tools("ok", log="race.racecheck.log")
    assert cli.main(["sanitize", str(repro), "--tool", "racecheck", "--json"]) == 1
    from_cli = json.loads(capsys.readouterr().out)
    ran = json.loads(argv_file.read_text())
    assert ran[ran.index("--tool") + 1] == "racecheck", ran
    assert from_cli["tool"] == "racecheck" and from_cli["log"].endswith("racecheck.log"), from_cli
    argv_file.unlink()
    answer = _call(tmp_path, "sanitize", {"reproducer": str(repro), "tool": "racecheck"})
    assert not answer.is_error, answer.content[0].text
    ran = json.loads(argv_file.read_text())
    assert ran[ran.index("--tool") + 1] == "racecheck", ran
    assert _sanitized(answer.structured_content) == _sanitized(from_cli)


def test_a_set_refuses_sanitize_in_both_front_ends(fake_set, tmp_path, capsys):
    root = fake_set(tmp_path / "set").set_dir
    assert cli.main(["sanitize", str(root), "--json"]) == 2
    from_cli = json.loads(capsys.readouterr().out)
    answer = _call(tmp_path, "sanitize", {"reproducer": str(root)})
    assert answer.is_error and answer.structured_content == from_cli
    assert "is a reproducer set" in from_cli["error"]["message"]


def test_sanitize_refuses_a_bad_option_in_both_front_ends(repro, tmp_path, capsys):
    assert cli.main(["sanitize", str(repro), "--tool", "leakcheck"]) == 2
    assert "invalid choice: 'leakcheck'" in capsys.readouterr().err
    assert cli.main(["sanitize", str(repro), "--timeout", "0"]) == 2
    assert _call(tmp_path, "sanitize", {"reproducer": str(repro), "tool": "leakcheck"}).is_error
    assert _call(tmp_path, "sanitize", {"reproducer": str(repro), "timeout_s": 0}).is_error


# -- a verb declared here: what adding one takes --------------------------------------------------

LIMIT = Option("limit", "--limit", int, 3, "list at most N regions", minimum=1, maximum=100, metavar="N")
ROLE = Option("role", "--role", str, "any", "which regions", choices=("any", "written"))
SCALE = Option("scale", "--scale", float, 1.0, "a factor echoed back", above=0.0, metavar="F", mcp_name="scale_x")
TAGS = Option("tags", "--tag", str, (), "a tag echoed back (repeatable)", metavar="T", many=True)
CUBIN = Option("cubin", "--cubin", str, None, "a variant cubin", metavar="V", nullable=True)


@dataclass(frozen=True)
class RegionsRequest:
    cubin: str | None = CUBIN.field()
    limit: int = LIMIT.field()
    role: str = ROLE.field()
    scale: float = SCALE.field()
    tags: tuple[str, ...] = TAGS.field()


@dataclass
class Regions:
    doc: dict

    def to_dict(self) -> dict:
        return self.doc


def _regions(session, request: RegionsRequest, _run) -> Regions:
    check_fields(request)
    regions = [r for r in session.capture.regions if request.role == "any" or getattr(r, "written", False)]
    return Regions({"kernel": session.capture.kernel["name"], "regions": [r.id for r in regions][:request.limit],
                    "cubin": None if request.cubin is None else Path(request.cubin).name, "scale": request.scale,
                    "tags": list(request.tags)})


REGIONS = verbs.Verb("regions", "RegionsRequest", _regions, help="list regions", description="List regions.",
                     doc="List regions.", status=lambda r: 0 if r.doc["regions"] else 1,
                     text=lambda r: " ".join(map(str, r.doc["regions"])))


@dataclass(frozen=True)
class CountRequest:  # no cubin: nothing to resolve under MCP's roots
    limit: int = LIMIT.field()


COUNT = verbs.Verb("count", "CountRequest", lambda session, request, _run: Regions(
    {"regions": min(request.limit, len(session.capture.regions))}), help="count regions",
    description="Count regions.", doc="Count regions.", status=lambda r: 0, text=lambda r: str(r.doc["regions"]))


@pytest.fixture
def declared(monkeypatch):
    """The verbs `regions` and `count` declared: their requests in api.options and their
    entries in VERBS."""
    monkeypatch.setattr(api.options, "RegionsRequest", RegionsRequest, raising=False)
    monkeypatch.setattr(api.options, "CountRequest", CountRequest, raising=False)
    monkeypatch.setattr(verbs, "VERBS", (*verbs.VERBS, REGIONS, COUNT))
    cli.build_parser.cache_clear()
    yield REGIONS
    cli.build_parser.cache_clear()


def test_a_new_verb_is_its_declaration(declared, tmp_path, monkeypatch, capsys):
    """Declared once, the verb is a command and a tool with every option of its request, and
    one request gives one document and one exit status through both."""
    repro = sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": sim.axpy, "1.cubin": sim.axpy})
    _rendered_from_the_declaration(declared, tmp_path)
    status = cli.main(["regions", str(repro), "--limit", "1", "--role", "written", "--scale", "2.5", "--tag", "a",
                       "--tag", "b", "--cubin", str(tmp_path / "1.cubin"), "--json"])
    from_cli = json.loads(capsys.readouterr().out)
    answer = _call(tmp_path, "regions", {"reproducer": str(repro), "limit": 1, "role": "written", "scale_x": 2.5,
                                         "tags": ["a", "b"], "cubin": str(tmp_path / "1.cubin")})
    assert not answer.is_error, answer.content[0].text
    assert status == 0 and answer.structured_content == from_cli
    assert from_cli["cubin"] == "1.cubin" and from_cli["scale"] == 2.5 and from_cli["tags"] == ["a", "b"]
    assert len(from_cli["regions"]) == 1
    assert cli.main(["regions", str(repro), "--limit", "0"]) == 2  # the option's bound, in both
    assert "must be >= 1" in capsys.readouterr().err
    assert _call(tmp_path, "regions", {"reproducer": str(repro), "limit": 0}).is_error
    assert cli.main(["regions", str(repro), "--limit", "101"]) == 2  # and its maximum, in both
    assert "must be <= 100" in capsys.readouterr().err
    assert _call(tmp_path, "regions", {"reproducer": str(repro), "limit": 101}).is_error


def test_a_new_verb_without_a_cubin_option(declared, tmp_path, monkeypatch, capsys):
    repro = sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": sim.axpy})
    _rendered_from_the_declaration(COUNT, tmp_path)
    assert cli.main(["count", str(repro), "--limit", "2", "--json"]) == 0
    from_cli = json.loads(capsys.readouterr().out)
    answer = _call(tmp_path, "count", {"reproducer": str(repro), "limit": 2})
    assert not answer.is_error, answer.content[0].text
    assert answer.structured_content == from_cli == {"regions": 2}
