"""`kerncap check` on the CPU: the corpus of committed H200 captures (and the demo
reproducer with its recorded variants) on the real engine, whose GPU steps answer "no
replay core / no GPU" here and are marked as GPU steps; the verdict logic (pass, FAIL,
regression against a baseline, JUnit, exit statuses, stack warnings) with the replay
server's stand-in (tests/fake_replay_server.py) answering; and a local Dask cluster.
The GPU suite runs it on ≥ 10 real reproducers (tests/gpu/test_check_gpu.py)."""

from __future__ import annotations

import json
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kerncap import api
from kerncap.cli import main
from kerncap.errors import UsageError
from kerncap.fleet.check import find_corpus
from kerncap.reproducer.history import best_variant

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "captures"
DEMO = HERE.parent / "kerncap_tui" / "demo" / "reproducer"
FAKE = [sys.executable, str(HERE / "fake_replay_server.py")]


@pytest.fixture
def corpus(tmp_path) -> Path:
    c = tmp_path / "corpus"
    c.mkdir()
    for name in ("axpy_small", "graph_explicit"):
        shutil.copytree(FIXTURES / name, c / "cuda" / name)
    shutil.copytree(DEMO, c / "demo", ignore=shutil.ignore_patterns("dot-git"))
    return c


def fake(**kw) -> api.MeasureRequest:
    return api.MeasureRequest(iterations=5, warmup=1, server_cmd=FAKE, **kw)


def test_corpus_keys_and_cases(corpus):
    found = dict(find_corpus([corpus]))
    assert sorted(found) == ["cuda/axpy_small", "cuda/graph_explicit", "demo"]
    assert dict(find_corpus([corpus / "demo"])) == {"demo": corpus / "demo"}
    best = best_variant(corpus / "demo")
    assert (best.label, best.cubin) == ("v2", "variants/2.cubin")  # the fastest passing one; v3 failed


def test_corpus_errors(tmp_path, corpus):
    with pytest.raises(UsageError, match="does not exist"):
        find_corpus([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no reproducer under"):
        find_corpus([tmp_path / "empty"])
    shutil.copytree(FIXTURES / "axpy_small", tmp_path / "other" / "demo")
    with pytest.raises(UsageError, match="two reproducers have the key 'demo'"):
        find_corpus([corpus / "demo", tmp_path / "other" / "demo"])


def test_history_outside_the_reproducer_or_damaged(corpus):
    demo = corpus / "demo"
    hist = json.loads((demo / "history.json").read_text())
    for v in hist["variants"]:
        if v["id"] == 2:
            v["cubin"] = "../../../etc/hostname"
    (demo / "history.json").write_text(json.dumps(hist))
    assert best_variant(demo).label == "v1"  # v2's cubin leads out of the reproducer: not followed
    (demo / "history.json").write_text("{broken")
    with api.open_fanout(backend="serial") as f:
        report = api.check([demo], f, options=fake())
    [case] = report.cases  # the captured cubin is still checked
    assert any("history.json is not valid JSON" in w for w in case.warnings)


def test_cpu_machine_reports_gpu_steps_as_could_not_run(corpus, tmp_path, capsys):
    junit = tmp_path / "j.xml"
    status = main(["check", str(corpus), "--backend", "serial", "--junit", str(junit), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 3 == out["exit_status"]
    assert [c["key"] for c in out["cases"]] == ["cuda/axpy_small#baseline", "cuda/graph_explicit#baseline",
                                                 "demo#baseline", "demo#v2"]
    for c in out["cases"]:
        assert c["status"] == "error" and c["gpu_step"] is True
        assert [s["name"] for s in c["steps"]][:2] == ["open", "validate"]
        assert c["steps"][0]["status"] == "ok" and c["steps"][0]["gpu"] is False
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == "4" and suite.get("errors") == "4"
    assert all(tc.find("error") is not None and "(a GPU step)" in tc.find("error").text for tc in suite.iter("testcase"))


def test_verdicts_baseline_and_regression(corpus, tmp_path, monkeypatch):
    base = tmp_path / "base.json"
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps({"captured": 0.010, "variants/2.cubin": 0.008}))
    with api.open_fanout(backend="serial") as f:
        first = api.check([corpus], f, options=fake())
    assert first.exit_status == 0 and {c.status for c in first.cases} == {"pass"}
    api.write_check_baseline(first, base)
    stored = json.loads(base.read_text())
    assert stored["format"] == "kerncap-check-baseline"
    assert stored["cases"]["demo#v2"]["median_ms"] == 0.008

    # the recorded best variant got slower (25 % > 10 %): a regression, exit status 1
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps({"captured": 0.0102, "variants/2.cubin": 0.010}))
    with api.open_fanout(backend="serial") as f:
        second = api.check([corpus], f, options=fake(), baseline=base, threshold_pct=10)
    by = {c.key: c for c in second.cases}
    assert by["demo#v2"].status == "regressed" and round(by["demo#v2"].change_pct) == 25
    assert by["demo#baseline"].status == "pass" and round(by["demo#baseline"].change_pct) == 2
    assert second.exit_status == 1
    junit = tmp_path / "j.xml"
    api.write_junit(second, junit)
    failures = [tc for tc in ET.parse(junit).getroot().iter("testcase") if tc.find("failure") is not None]
    assert [(tc.get("classname"), tc.get("name")) for tc in failures] == [("demo", "v2")]
    assert "above the baseline" in failures[0].find("failure").get("message")
    text = api.format_check(second)
    assert "REGRESSED" in text and "+25.0%" in text

    # a variant that no longer validates is a failure too
    monkeypatch.setenv("FAKE_FAIL", "variants/2.cubin")
    with api.open_fanout(backend="serial") as f:
        third = api.check([corpus], f, options=fake(), baseline=base)
    by = {c.key: c for c in third.cases}
    assert by["demo#v2"].status == "fail" and "differ from the captured post-state" in by["demo#v2"].message
    assert by["demo#v2"].timing is None  # not timed after a failed validation



def test_a_new_baseline_keeps_no_regressed_median(corpus, tmp_path, monkeypatch):
    """--write-baseline after a run with a regression stores the passing cases only: the
    regressed variant's slow median must not become the bar the next run is held to
    (it is then a new case, timed and not compared). Mutation caught: every timed case
    written, the regression included."""
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps({"captured": 0.010, "variants/2.cubin": 0.008}))
    with api.open_fanout(backend="serial") as f:
        api.write_check_baseline(api.check([corpus], f, options=fake()), first)
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps({"captured": 0.010, "variants/2.cubin": 0.012}))
    with api.open_fanout(backend="serial") as f:
        regressed = api.check([corpus], f, options=fake(), baseline=first)
    assert {c.key: c.status for c in regressed.cases}["demo#v2"] == "regressed"
    api.write_check_baseline(regressed, second)
    stored = json.loads(second.read_text())["cases"]
    assert "demo#v2" not in stored
    assert stored["demo#baseline"]["median_ms"] == 0.010 and "cuda/axpy_small#baseline" in stored
    with api.open_fanout(backend="serial") as f:
        again = api.check([corpus], f, options=fake(), baseline=second)
    v2 = {c.key: c for c in again.cases}["demo#v2"]
    assert v2.status == "pass" and v2.baseline_ms is None
    assert "not in the baseline (new case): timed, not compared" in v2.warnings

def test_the_cli_holds_a_median_to_the_threshold_given(corpus, tmp_path, capsys, monkeypatch):
    """`kerncap check --baseline F --threshold PCT`: the CLI's threshold is the one the
    verdict uses (not the default 10 %). The best variant 15 % slower than the baseline the
    CLI wrote is within --threshold 20 (exit 0) and regressed beyond --threshold 5 (exit 1)."""
    from dataclasses import replace

    from kerncap.commands import fanout_args

    parsed = fanout_args.options  # the command line's request, answered by the replay stand-in
    monkeypatch.setattr(fanout_args, "options", lambda args: replace(parsed(args), server_cmd=tuple(FAKE)))
    demo, base = corpus / "demo", tmp_path / "base.json"
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps({"captured": 0.010, "variants/2.cubin": 0.008}))
    assert main(["check", str(demo), "--backend", "serial", "--iterations", "5", "--write-baseline", str(base)]) == 0
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps({"captured": 0.010, "variants/2.cubin": 0.0092}))
    capsys.readouterr()
    for threshold, status, v2 in (("20", 0, "pass"), ("5", 1, "regressed")):
        got = main(["check", str(demo), "--backend", "serial", "--iterations", "5", "--baseline", str(base),
                    "--threshold", threshold, "--json"])
        out = json.loads(capsys.readouterr().out)
        by = {c["key"]: c for c in out["cases"]}
        assert (got, out["exit_status"], out["threshold_pct"]) == (status, status, float(threshold))
        assert by["demo#v2"]["status"] == v2 and round(by["demo#v2"]["change_pct"]) == 15
        assert by["demo#baseline"]["status"] == "pass"


def test_cli_usage_errors_and_a_damaged_baseline(corpus, tmp_path, capsys):
    assert main(["check", str(tmp_path / "nope")]) == 2
    assert main(["check", str(corpus), "--baseline", str(tmp_path / "missing.json")]) == 2
    (tmp_path / "bad.json").write_text('{"format": "something else"}')
    assert main(["check", str(corpus), "--backend", "serial", "--baseline", str(tmp_path / "bad.json")]) == 3
    assert "unreadable" in capsys.readouterr().err


def test_stack_differences_are_warnings(corpus, monkeypatch):
    demo = corpus / "cuda" / "axpy_small"
    rec = json.loads((demo / "reproducer.json").read_text())
    rec["provenance"] = {"kerncap": "0.0.1", "packages": {"torch": "1.0.0"}, "driver": "1.0",
                         "gpu": {"name": "NVIDIA A100"}}
    (demo / "reproducer.json").write_text(json.dumps(rec))
    with api.open_fanout(backend="serial") as f:
        report = api.check([demo], f, options=fake())
    [case] = report.cases
    assert case.status == "pass"
    assert any("kerncap: recorded 0.0.1, running" in w for w in case.warnings)


def test_local_dask_cluster_runs_check(corpus, monkeypatch, tmp_path):
    pytest.importorskip("distributed")
    monkeypatch.setenv("PYTHONPATH", f"{HERE.parent / 'engine'}:{HERE.parent}")
    monkeypatch.setenv("KERNCAP_WORKER_CACHE", str(tmp_path / "cache"))
    with api.open_fanout(backend="dask", gpus=["0", "1"], compile_workers=1) as f:
        assert "local Dask cluster: 2 GPU worker(s)" in f.description
        real = api.check([corpus], f)  # the real engine: GPU steps cannot run here
        faked = api.check([corpus], f, options=fake())
        shipped = api.check([corpus], f, options=fake(), ship=True)
    assert real.exit_status == 3 and all(c.gpu_step for c in real.cases)
    assert {c.worker["name"] for c in real.cases} <= {"gpu-0", "gpu-1"}
    assert faked.exit_status == 0 and len(faked.cases) == 4
    assert shipped.exit_status == 0
    # shipped: each worker wrote the reproducers it ran into its cache, by content digest
    copies = sorted(p.name for p in (tmp_path / "cache").glob("*/*") if (p / "capture" / "manifest.json").is_file())
    assert set(copies) == {"axpy_small", "graph_explicit", "demo"}


def test_a_shipped_reproducer_edited_since_reaches_the_worker_as_edited(tmp_path, monkeypatch):
    """check/sweep --ship: a worker writes each bundle once into its cache, keyed by the
    bundle's digest. A reproducer whose file changed since (same paths, other bytes: an
    edited record or source, a variant rebuilt under its old name) is a new digest, and
    the worker runs the edit, not the copy it cached before; an unchanged one reuses it.
    Mutation caught: the digest taken over the paths alone."""
    from kerncap.fleet.ship import make_bundle, materialize

    monkeypatch.setenv("KERNCAP_WORKER_CACHE", str(tmp_path / "cache"))
    repro = tmp_path / "axpy_small"
    shutil.copytree(FIXTURES / "axpy_small", repro)
    (repro / "variants").mkdir()
    (repro / "variants" / "1.cubin").write_bytes(b"first build")
    first = make_bundle(repro)
    on_worker = materialize(first)
    assert (on_worker / "variants" / "1.cubin").read_bytes() == b"first build"
    assert make_bundle(repro).digest == first.digest and materialize(make_bundle(repro)) == on_worker

    (repro / "variants" / "1.cubin").write_bytes(b"other build")  # rebuilt: same name and size
    record = repro / "reproducer.json"
    record.write_text(record.read_text().replace("axpy", "axpz", 1))
    edited = make_bundle(repro)
    assert set(edited.files) == set(first.files) and edited.digest != first.digest
    now = materialize(edited)
    assert now != on_worker and (now / "variants" / "1.cubin").read_bytes() == b"other build"
    assert (now / "reproducer.json").read_bytes() == record.read_bytes()
    assert (on_worker / "variants" / "1.cubin").read_bytes() == b"first build"  # the old copy is its own

def test_perturbed_validation_reaches_each_variant(tmp_path, monkeypatch):
    """MeasureRequest(perturb=K): a worker validates each variant on K perturbed inputs
    too (the replay core simulated in numpy, tests/replay_sim.py), so a variant that is
    exact only on the captured input fails and is not timed."""
    import replay_sim as sim

    from kerncap.fleet import tasks

    repro = sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": sim.axpy, "same.cubin": sim.axpy,
                                                        "abs.cubin": sim.axpy_abs})
    monkeypatch.setattr(tasks, "_pool", None)
    options = api.MeasureRequest(perturb=2, seed=4, time=False)
    good = tasks.measure(str(repro), "same", str(tmp_path / "same.cubin"), options)
    bad = tasks.measure(str(repro), "abs", str(tmp_path / "abs.cubin"), options)
    assert good.status == "ok" and good.validation["verdict"] == "pass" and good.validation["perturbed"] == 2
    assert bad.status == "fail" and bad.problem.message.startswith("FAIL on 3 inputs")
    assert bad.validation["failing"] and all(f["input"].startswith("perturbation") for f in bad.validation["failing"])
    plain = tasks.measure(str(repro), "abs", str(tmp_path / "abs.cubin"), api.MeasureRequest(time=False))
    assert plain.status == "ok"  # the captured input alone cannot tell


def test_an_inconclusive_validation_is_no_pass_and_is_not_timed(tmp_path, monkeypatch):
    """A worker whose validation can judge nothing (the captured kernel varies run to run
    in a region of unknown dtype: `kerncap validate` says inconclusive, exit 3) reports
    the variant as could-not-run, says what to do, and does not time it, as a failed
    validation is not timed. Mutation caught: the inconclusive verdict taken for a pass
    (the case passed, a speedup was measured for a variant nobody checked)."""
    import numpy as np
    import replay_sim as sim

    from kerncap.fleet import tasks

    noise = np.random.default_rng(5)

    def noisy(m, _s):  # float atomics: the last bit of some elements varies from run to run
        y = m.f32(1)
        out = y + np.float32(0.5) * m.f32(0)
        flip = noise.random(len(out)) < 0.2
        out[flip] = np.nextafter(out[flip], np.float32(np.inf))
        y[:] = out

    repro = sim.axpy_reproducer(tmp_path, monkeypatch, {"captured": noisy, "same.cubin": noisy})
    manifest = repro / "capture" / "manifest.json"
    m = json.loads(manifest.read_text())
    del m["kernel"]["demangled"]  # no signature: region 1's dtype is unknown
    manifest.write_text(json.dumps(m))
    monkeypatch.setattr(tasks, "_pool", None)
    out = tasks.measure(str(repro), "same", str(tmp_path / "same.cubin"), api.MeasureRequest(iterations=5, warmup=1))
    assert out.validation["verdict"] == "inconclusive"
    assert out.status == "error" and out.problem.name == "validate", out.steps
    assert "kerncap validate DIR --perturb K" in out.problem.hint
    assert out.timing is None and [(s.name, s.status) for s in out.steps][-1] == ("time", "skipped")


# -- --apply: each winner in its app (issue 46) ---------------------------------------------------


def test_apply_runs_no_recorded_command_before_trust(corpus, capsys, monkeypatch):
    """A corpus may come from someone else: --apply without --trust names the commands it
    would run and stops (exit 2) before anything is replayed or run."""
    from kerncap.fleet import fanout

    monkeypatch.setattr(fanout.Fanout, "run", lambda *a, **k: pytest.fail("the corpus ran before --trust"))
    status = main(["check", str(corpus), "--backend", "serial", "--apply"])
    err = capsys.readouterr().err
    assert status == 2 and "/tmp/kc-testapps/smooth 65536 (in /work/main)" in err and "--trust" in err
    assert main(["check", str(corpus), "--backend", "serial", "--apply", "--trust", "--apply-runs", "-1"]) == 2


class _Applied:
    """Session.apply's stand-in: records each request; the app's --check passes unless
    `mismatch` names a launch."""

    def __init__(self, monkeypatch, mismatch: int | None = None):
        from kerncap.capture import apply as apply_tool
        from kerncap.session.session import Session

        self.requests, self.roots = [], []

        def apply(session, request, *, output=None, cancelled=None):
            r = request.checked()
            self.requests.append(r)
            self.roots.append(session.root)
            bad = None if mismatch is None else apply_tool.Mismatch(mismatch, 1, 4, 4096)
            return apply_tool.ApplyResult(variant=session.root / "variants" / "2.cubin", launches=10, substituted=10,
                                          check=apply_tool.CheckResult(10, 10, bad), timing=None, skipped_globals=[],
                                          row=r.variant)
        monkeypatch.setattr(Session, "apply", apply)


def test_apply_runs_each_winner_in_its_recorded_app(corpus, monkeypatch):
    """--apply --trust: the demo's winner (v2) runs in the command, directory and settings
    its capture recorded (kerncap's own KERNCAP_* left out) with --check; the outcome is a
    case of its own, a FAIL when the app's outputs differ (exit 1), and a winner whose
    replay check failed in this run is not applied."""
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps({"captured": 0.010, "variants/2.cubin": 0.008}))
    applied = _Applied(monkeypatch)
    with api.open_fanout(backend="serial") as f:
        report = api.check([corpus], f, options=fake(), apply=True, trust=True, apply_runs=0)
    by = {c.key: c for c in report.cases}
    assert list(by)[-1] == "demo#v2-in-app" and report.exit_status == 0
    case = by["demo#v2-in-app"]
    assert case.status == "pass" and case.in_app["check"]["compared"] == 10
    [r] = applied.requests
    assert (r.variant, r.check, r.runs, r.command, r.cwd) == (2, True, 0, ("/tmp/kc-testapps/smooth", "65536"),
                                                              "/work/main")
    assert r.env is None  # the demo recorded only kerncap's own variables
    assert applied.roots == [corpus / "demo"]
    assert "in app: 10 of 10 launch(es) substituted; 10 compared, byte-exact" in api.format_check(report)

    _Applied(monkeypatch, mismatch=2)
    with api.open_fanout(backend="serial") as f:
        failed = api.check([corpus], f, options=fake(), apply=True, trust=True, apply_runs=0)
    case = {c.key: c for c in failed.cases}["demo#v2-in-app"]
    assert case.status == "fail" and "FAIL at launch 2 (the 3rd)" in case.message and failed.exit_status == 1

    monkeypatch.setenv("FAKE_FAIL", "variants/2.cubin")
    skipped = _Applied(monkeypatch)
    with api.open_fanout(backend="serial") as f:
        third = api.check([corpus], f, options=fake(), apply=True, trust=True)
    case = {c.key: c for c in third.cases}["demo#v2-in-app"]
    assert case.status == "error" and "did not pass its replay check (fail)" in case.message
    assert skipped.requests == []


def test_apply_of_a_corpus_without_winners_says_so(tmp_path, monkeypatch):
    shutil.copytree(FIXTURES / "axpy_small", tmp_path / "c" / "axpy")
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps({"captured": 0.010}))
    with api.open_fanout(backend="serial") as f:
        report = api.check([tmp_path / "c"], f, options=fake(), apply=True)  # nothing to run: no --trust needed
    assert [c.label for c in report.cases] == ["baseline"]
    assert report.warnings == ["--apply: no reproducer has a passing recorded variant to apply"]


def _set_with_a_winner(fake_set, root: Path, cubins: dict[int, bytes]) -> Path:
    """A set (tests/conftest.py fake_set: two members of one real H200 capture) whose History
    row 1 is a set variant giving member i the cubin `cubins[i]`."""
    set_dir = fake_set(root).set_dir
    (set_dir / "variants").mkdir()
    names = {}
    for i, data in cubins.items():
        (set_dir / "variants" / f"1-{i}.cubin").write_bytes(data)
        names[str(i)] = f"variants/1-{i}.cubin"
    (set_dir / "variants" / "1.json").write_text(json.dumps({"format": "kerncap-set-variant", "cubins": names}))
    rows = [{"id": 0, "time": "2026-12-04T00:00:00Z", "median_ms": 0.01, "validation": "pass"},
            {"id": 1, "time": "2026-12-04T00:00:00Z", "median_ms": 0.008, "validation": "pass",
             "cubin": "variants/1.json"}]
    (set_dir / "history.json").write_text(json.dumps({"version": 1, "variants": rows}))
    return set_dir


def test_a_sets_winner_is_applied_once_through_its_first_member(fake_set, tmp_path, monkeypatch):
    """A set's members share the captured module, so its variant is one cubin standing in
    for the kernel in every launch: applied once, through member 0, the outcome kept on the
    set's History row; `check --apply` finds the winner in the set's History."""
    from kerncap.reproducer.history import History

    set_dir = _set_with_a_winner(fake_set, tmp_path / "corpus" / "myset", {0: b"SAME", 1: b"SAME"})
    applied = _Applied(monkeypatch)
    with api.open(set_dir) as session:
        r = session.apply(api.options.ApplyRequest(command=("app",), variant=1, check=True, runs=0))
    [req] = applied.requests
    assert applied.roots == [set_dir / "members" / "0"]
    assert (req.variant, Path(req.cubin).read_bytes()) == (None, b"SAME")
    assert r.row == 1 and History.load(set_dir).get(1).in_app["check"] == "pass"

    monkeypatch.setenv("FAKE_MEDIANS", json.dumps({"captured": 0.010}))
    with api.open_fanout(backend="serial") as f:
        report = api.check([tmp_path / "corpus"], f, options=fake(), apply=True, trust=True, apply_runs=0)
    case = report.cases[-1]
    assert (case.key, case.status, case.reproducer) == ("myset#v1-in-app", "pass", str(set_dir))
    recorded = api.Capture.open(set_dir / "members" / "0").provenance["command"]  # the member's H200 capture
    assert applied.requests[-1].command == tuple(recorded) and applied.roots[-1] == set_dir / "members" / "0"


def test_a_set_variant_of_several_cubins_is_refused_by_apply(fake_set, tmp_path, monkeypatch):
    set_dir = _set_with_a_winner(fake_set, tmp_path / "set", {0: b"ONE", 1: b"OTHER"})
    applied = _Applied(monkeypatch)
    with pytest.raises(UsageError, match=r"its variant holds 2 cubin\(s\); kerncap apply substitutes one module"):
        with api.open(set_dir) as session:
            session.apply(api.options.ApplyRequest(command=("app",), variant=1))
    assert applied.requests == []


def test_apply_passes_only_the_recorded_settings_it_knows_and_shows_them(corpus, capsys, monkeypatch):
    """A reproducer is someone else's words: of its recorded environment only the capture
    library's own variables reach the app (a planted LD_PRELOAD and PATH do not), and those
    are named before --trust; a winner with no recorded command is a case saying so."""
    demo = corpus / "demo"
    manifest = demo / "capture" / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["provenance"]["env"] = {"LD_PRELOAD": "/tmp/evil.so", "PATH": "/tmp/evil", "TRITON_CACHE_DIR": "/tmp/tc",
                                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "KERNCAP_MODE": "capture"}
    manifest.write_text(json.dumps(doc))
    assert main(["check", str(demo), "--backend", "serial", "--apply"]) == 2
    assert ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True TRITON_CACHE_DIR=/tmp/tc /tmp/kc-testapps/smooth 65536"
            in capsys.readouterr().err)
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps({"captured": 0.010, "variants/2.cubin": 0.008}))
    applied = _Applied(monkeypatch)
    with api.open_fanout(backend="serial") as f:
        api.check([demo], f, options=fake(), apply=True, trust=True, apply_runs=0)
    assert applied.requests[0].env == {"TRITON_CACHE_DIR": "/tmp/tc", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}

    del doc["provenance"]["command"]
    manifest.write_text(json.dumps(doc))
    with api.open_fanout(backend="serial") as f:
        report = api.check([demo], f, options=fake(), apply=True)  # nothing to run: no --trust asked
    case = report.cases[-1]
    assert (case.label, case.status) == ("v2-in-app", "error") and "recorded no command" in case.message


def test_a_baseline_measured_on_another_gpu_is_not_compared(corpus, tmp_path, monkeypatch):
    """A baseline case recorded on another GPU model is not held against this run (an
    A100's median says nothing of an H200's): the case passes, with a warning naming both
    GPUs, and carries no change. The same GPU is compared as usual. Mutation caught: the
    GPU check skipped (a slower GPU's run reported as a regression)."""
    from kerncap.fleet import baseline as baseline_file
    from kerncap.fleet import tasks

    here = dict(tasks.worker_stack(fake()), gpu={"name": "NVIDIA H200"})
    monkeypatch.setattr(tasks, "_stack", here)  # the worker's GPU, as NVML would name it
    base = tmp_path / "base.json"
    baseline_file.save(base, {"demo#baseline": {"median_ms": 0.005, "gpu": "NVIDIA A100"},
                              "demo#v2": {"median_ms": 0.004, "gpu": "NVIDIA H200"}})
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps({"captured": 0.010, "variants/2.cubin": 0.008}))
    with api.open_fanout(backend="serial") as f:
        report = api.check([corpus / "demo"], f, options=fake(), baseline=base)
    by = {c.key: c for c in report.cases}
    assert by["demo#baseline"].gpu == "NVIDIA H200"
    assert by["demo#baseline"].status == "pass" and by["demo#baseline"].change_pct is None
    assert "baseline measured on NVIDIA A100, this run on NVIDIA H200: not compared" in by["demo#baseline"].warnings
    assert by["demo#v2"].status == "regressed" and round(by["demo#v2"].change_pct) == 100  # same GPU: compared
    assert report.exit_status == 1


def test_a_baseline_with_a_zero_median_is_unreadable(corpus, tmp_path):
    """A baseline whose median is 0 (hand-edited, or a broken timer) is refused as
    unreadable before anything runs: every change against it would be a division by
    zero. Mutation caught: a zero median accepted (only negative ones refused)."""
    from kerncap.errors import KerncapError
    from kerncap.fleet import baseline as baseline_file

    base = tmp_path / "zero.json"
    baseline_file.save(base, {"demo#baseline": {"median_ms": 0, "gpu": None}})
    with api.open_fanout(backend="serial") as f, pytest.raises(KerncapError) as info:
        api.check([corpus / "demo"], f, options=fake(), baseline=base)
    assert "median_ms 0 is not a positive number" in info.value.message and "unreadable" in info.value.message


def test_junit_escapes_control_characters_in_attributes(tmp_path):
    """A reproducer's strings (its path, a kernel name in a message) become JUnit
    attributes; a control character there would make the report unparseable XML, which
    CI then drops whole. Each is escaped (ESC -> \\x1b) in attributes as in text.
    Mutation caught: attributes written as given."""
    from kerncap.fleet import junit

    case = junit.JUnitCase(classname="cuda/ax\x1bpy", name="v\x072", seconds=0.5, status="fail",
                           message="kernel k\x1b[31m differs", detail="k\x1b[31m differs",
                           properties={"reproducer": "/data/ax\x1bpy"})
    path = junit.write(tmp_path / "j.xml", "kerncap check", [case], 1.0)
    [tc] = ET.parse(path).getroot().iter("testcase")
    assert (tc.get("classname"), tc.get("name")) == ("cuda/ax\\x1bpy", "v\\x072")
    assert tc.find("failure").get("message") == "kernel k\\x1b[31m differs"
    assert tc.find("failure").text == "k\\x1b[31m differs"
    assert tc.find("properties/property").get("value") == "/data/ax\\x1bpy"
