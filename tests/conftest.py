"""Fixtures shared by the CPU tests; the fuzz tests (test_fuzz.py) count the cases they
tried and the total is printed at the end of the run. When every selected test of the
fuzz module passed (in any order, among any others), a total under FUZZ_GOAL fails the
run at its end."""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import textwrap
from pathlib import Path

import pytest

FUZZ_CASES: dict[str, int] = {}
# The fuzz tests' exploring half (test_fuzz.fuzz) draws new cases each run from this seed,
# printed in the header and the summary; KERNCAP_FUZZ_SEED=N runs those cases again.
# Under pytest-xdist the workers take the controller's (pytest_configure below).
FUZZ_SEED = int(os.environ.get("KERNCAP_FUZZ_SEED") or secrets.randbits(32))


@pytest.fixture(autouse=True)
def _fresh_stack_look():
    """kerncap.core.stack answers from a look taken seconds ago: no test sees another's."""
    from kerncap.core import stack

    stack._recent_stacks.clear()
    yield
    stack._recent_stacks.clear()


@pytest.fixture(autouse=True)
def _worker_pool_per_test():
    """kerncap.fleet.tasks keeps one SessionPool per worker process, its replay servers
    up between cases. Here the worker is this process (a serial `check`, tasks.measure):
    the pool one test made, with its fake replay servers, lived on for the rest of the
    run. Each test's pool is closed, and forgotten, when the test ends."""
    yield
    tasks = sys.modules.get("kerncap.fleet.tasks")
    if tasks is not None:
        with tasks._state_lock:
            pool, tasks._pool = tasks._pool, None
        if pool is not None:
            pool.close_all()


def pytest_collection_finish(session):
    """The selected test files' native builds (a module-level PREBUILD: the ASan unit
    tests, tests/native_build.py) start now, in the background, and compile on the other
    core while the first tests run; their fixtures wait for them."""
    if session.config.option.collectonly:
        return
    started = set()
    for item in session.items:
        module = getattr(item, "module", None)
        prebuild = getattr(module, "PREBUILD", None)
        if callable(prebuild) and module.__name__ not in started:
            started.add(module.__name__)
            prebuild()


# -- the order files reach pytest-xdist's workers ------------------------------------------
# `--dist loadfile` hands each worker a file at a time, in collection order (pyproject's
# addopts turn xdist's own reorder, by test count, off). A slow file of few tests handed
# out last kept one core busy while the other idled: the files go out slowest first
# (longest processing time first), by FILE_COSTS, the seconds each took in a measured run
# (KERNCAP_STORE_COSTS=FILE writes a run's; a file not listed counts as the median). The
# order within each file stays pytest-random-order's.
FILE_COSTS = Path(__file__).with_name("file_costs.json")
_file_seconds: dict[str, float] = {}


def slowest_files_first(nodeids: list[str], costs: dict[str, float]) -> list[int]:
    """The order (indexes into `nodeids`) that puts the files of larger cost first, each
    file's tests in their order and files of equal cost as they came; a file `costs` does
    not list counts as the median."""
    default = sorted(costs.values())[len(costs) // 2] if costs else 0.0
    first: dict[str, int] = {}
    for i, nodeid in enumerate(nodeids):
        first.setdefault(nodeid.split("::")[0], i)

    def key(i: int) -> tuple[float, int]:
        f = nodeids[i].split("::")[0]
        return -costs.get(f, default), first[f]

    return sorted(range(len(nodeids)), key=key)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    if not hasattr(config, "workerinput") or not FILE_COSTS.is_file():
        return  # serial runs keep random-order's order of files too
    order = slowest_files_first([item.nodeid for item in items], json.loads(FILE_COSTS.read_text()))
    items[:] = [items[i] for i in order]


def _store_costs(config) -> None:
    path = os.environ.get("KERNCAP_STORE_COSTS")
    if path and _file_seconds and not hasattr(config, "workerinput"):
        Path(path).write_text(json.dumps({f: round(s, 1) for f, s in sorted(_file_seconds.items())}, indent=1) + "\n")


FUZZ_MODULE = "test_fuzz.py"
FUZZ_GOAL = 10_000
_fuzz_collected: set[str] = set()  # before -k / -m deselect any
_fuzz_passed: set[str] = set()


def pytest_itemcollected(item):
    if item.path.name == FUZZ_MODULE:
        _fuzz_collected.add(item.nodeid)


def pytest_runtest_logreport(report):
    f = report.nodeid.split("::")[0]
    _file_seconds[f] = _file_seconds.get(f, 0.0) + report.duration
    if report.nodeid in _fuzz_collected and report.when == "call" and report.passed:
        _fuzz_passed.add(report.nodeid)


def fuzz_shortfall() -> str | None:
    """Once every test of the fuzz module passed, in whatever order they ran: why the
    cases they tried fall short of FUZZ_GOAL (None when they do not, or when only part
    of the module ran)."""
    if not _fuzz_collected or _fuzz_passed != _fuzz_collected:
        return None
    total = sum(FUZZ_CASES.values())
    return None if total >= FUZZ_GOAL else f"fuzz: only {total} cases tried, fewer than {FUZZ_GOAL:,}"


# pytest-xdist (`-n`, pyproject's addopts): the tests run in worker processes. Each worker
# gets the controller's fuzz seed and hands back the fuzz cases it counted and the fuzz
# tests it collected; the controller sees every test's report, so it checks the total.


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput["kerncap_fuzz_seed"] = FUZZ_SEED


def pytest_configure(config):
    global FUZZ_SEED
    if hasattr(config, "workerinput"):  # before collection: test_fuzz.py imports the seed
        FUZZ_SEED = config.workerinput["kerncap_fuzz_seed"]
    # A suite started as a script's background job (`pytest &`) has SIGINT ignored, and so
    # would every kerncap it starts: the tests that send SIGINT would test nothing (or fail,
    # as three loaded runs did). Run as from a terminal, however the suite was started.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    out = getattr(node, "workeroutput", {})
    for name, n in out.get("kerncap_fuzz_cases", {}).items():
        FUZZ_CASES[name] = FUZZ_CASES.get(name, 0) + n
    _fuzz_collected.update(out.get("kerncap_fuzz_collected", ()))


def pytest_sessionfinish(session, exitstatus):
    _store_costs(session.config)
    if hasattr(session.config, "workerinput"):  # a worker: the controller checks the total
        session.config.workeroutput["kerncap_fuzz_cases"] = dict(FUZZ_CASES)
        session.config.workeroutput["kerncap_fuzz_collected"] = sorted(_fuzz_collected)
        return
    if fuzz_shortfall() and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_report_header(config):
    return f"fuzz seed: {FUZZ_SEED} (KERNCAP_FUZZ_SEED={FUZZ_SEED} repeats this run's exploring fuzz cases)"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if FUZZ_CASES:
        total = sum(FUZZ_CASES.values())
        parts = ", ".join(f"{name} {n}" for name, n in sorted(FUZZ_CASES.items()))
        terminalreporter.write_line(f"fuzz: {total} cases tried ({parts}); none raised anything but KerncapError")
        terminalreporter.write_line(f"fuzz: half of them new this run, seed {FUZZ_SEED} "
                                    f"(KERNCAP_FUZZ_SEED={FUZZ_SEED} repeats them)")
    shortfall = fuzz_shortfall()
    if shortfall:
        terminalreporter.write_line(f"{shortfall}: FAILED (the run exits 1)", red=True)


SET_CAPTURE = Path(__file__).parent / "fixtures" / "captures" / "axpy_small" / "capture"
SET_KERNEL = "_Z12axpy_inplacefPKfPfi"

SET_APP = textwrap.dedent(
    r'''
    import json, os, shutil, sys, time
    out = os.environ["KERNCAP_OUT"]
    spec = json.loads(os.environ["FAKE_SPEC"])
    assert os.environ["KERNCAP_DISPATCH"] == "3,17" and os.environ["KERNCAP_SET"] == "1"
    for bucket, dispatch in zip(spec.get("member_buckets", (0, 1)), (3, 17)):
        partial = os.path.join(out, "capture-%d.partial-%d" % (dispatch, os.getpid()))
        shutil.copytree(spec["capture"], partial)
        m = json.load(open(os.path.join(partial, "manifest.json")))
        m["provenance"]["dispatch_index"] = dispatch
        m["provenance"]["bucket"] = bucket
        json.dump(m, open(os.path.join(partial, "manifest.json"), "w"))
        os.rename(partial, os.path.join(out, "capture-%d" % dispatch))
    def bucket(i, grid, n, launches, total, **kw):
        b = {"id": i, "kernel": spec["kernel"], "grid": [grid, 1, 1], "block": [256, 1, 1], "shared_mem_bytes": 0,
             "scalars_known": True, "scalars": [{"index": 0, "size": 4, "hex": "0000003f"},
                                                 {"index": 3, "size": 4, "hex": n.to_bytes(4, "little").hex()}],
             "launches": launches, "timed": launches, "total_ns": total, "min_ns": 1, "max_ns": total,
             "first_dispatch": -1, "captured_dispatch": -1, "capture_dir": None, "refused": None, "failed": False}
        b.update(kw)
        return b
    table = [bucket(0, 16, 4096, 30, 3000000, captured_dispatch=3), bucket(1, 64, 16384, 2, 1000000, captured_dispatch=17),
             bucket(2, 32, 8192, 0, 0, refused="executable graph #1: the target kernel runs inside the body of a conditional")]
    def publish(name, doc):  # as the capture library does: whole or not at all (kerncap may stop us any time)
        tmp = os.path.join(out, "." + name + ".tmp")
        with open(tmp, "w") as f:
            f.write(json.dumps(doc))
        os.replace(tmp, os.path.join(out, name))
    time.sleep(spec.get("buckets_after", 0))  # the library writes its table after the last capture
    publish("buckets-%d.json" % os.getpid(),
            {"pid": os.getpid(), "kernel": spec["kernel"], "final": False, "dispatches_counted": 18, "buckets": table})
    publish("proc-%d.json" % os.getpid(), {"pid": os.getpid(), "errors": [], "captured": True, "target_matches": 18})
    time.sleep(30)
    '''
)


@pytest.fixture
def fake_set(tmp_path, monkeypatch):
    """extract(..., dispatch=[3, 17]) of a fake app that publishes capture-3 and capture-17
    (copies of a real H200 capture), buckets-<pid>.json and proc-<pid>.json the way the
    capture library does for a set (`member_buckets`: the bucket each capture stands for);
    returns the SetExtractResult."""
    from kerncap.capture.extract import extract

    app = tmp_path / "app.py"
    app.write_text(SET_APP)
    lib = tmp_path / "libkerncap_inject.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("KERNCAP_INJECT_LIB", str(lib))

    def run(output: Path, member_buckets=(0, 1), buckets_after: float = 0, **kwargs):
        spec = {"capture": str(SET_CAPTURE), "kernel": SET_KERNEL, "member_buckets": list(member_buckets),
                "buckets_after": buckets_after}
        return extract("axpy", [sys.executable, str(app)], output=output, dispatch=[17, 3],
                       env={"FAKE_SPEC": json.dumps(spec)}, output_sink=lambda s, d: None, timeout=60, **kwargs)

    return run
