"""`run_profile` against a fake app whose two processes (parent and child) each write
profile-<pid>.json into $KERNCAP_OUT at exit, the way the capture library does."""

from __future__ import annotations

import json
import signal
import sys
import textwrap

import pytest
from kerncap.capture.profile import ProfileResult, run_profile
from kerncap.cli import main
from kerncap.errors import KerncapError

PROFILING_APP = textwrap.dedent(
    r'''
    import json, os, subprocess, sys, time
    out = os.environ["KERNCAP_OUT"]
    spec = json.loads(os.environ.get("FAKE_SPEC", "{}"))
    assert os.environ["KERNCAP_MODE"] == "profile"
    assert os.environ.get("CUDA_MODULE_LOADING", "default") == spec.get("loading", "default")
    for var, value in spec.get("env", {}).items():
        assert os.environ.get(var) == value, (var, os.environ.get(var))

    def write(kind, data):
        path = os.path.join(out, "%s-%d.json" % (kind, os.getpid()))
        open(path + ".tmp", "w").write(json.dumps(data))
        os.rename(path + ".tmp", path)

    def report():
        child = len(sys.argv) > 1 and sys.argv[1] == "child"
        write("proc", {"pid": os.getpid(), "errors": spec.get("errors", []), "kernels_seen": {},
                       **spec.get("child_proc" if child else "proc", {})})
        if spec.get("kernels") is not None:
            write("profile", {"pid": os.getpid(), "kernels": spec["kernels"], "dropped_records": 0,
                              **spec.get("extra", {}), **(spec.get("child_extra", {}) if child else {})})

    if len(sys.argv) > 1 and sys.argv[1] == "child":
        report()
        sys.exit(0)
    print("app stdout line")
    if spec.get("child"):
        subprocess.run([sys.executable, __file__, "child"], check=True)
    try:
        time.sleep(spec.get("sleep", 0))
    except KeyboardInterrupt:
        pass  # like a Python app unwinding on Ctrl-C: its atexit handlers still run
    report()
    print("\n".join(spec.get("stderr", [])), file=sys.stderr)
    sys.exit(spec.get("exit", 0))
    '''
)

KERNELS = [
    {"name": "_Z4gemmPf", "demangled": "gemm(float*)", "calls": 10, "total_ns": 9_000_000, "min_ns": 800_000,
     "max_ns": 1_000_000, "grid": [64, 64, 1], "block": [256, 1, 1]},
    {"name": "add_kernel", "demangled": "add_kernel", "calls": 1000, "total_ns": 1_000_000, "min_ns": 900,
     "max_ns": 1100, "grid": [4, 1, 1], "block": [128, 1, 1]},
]


@pytest.fixture
def app(tmp_path, monkeypatch):
    path = tmp_path / "app.py"
    path.write_text(PROFILING_APP)
    lib = tmp_path / "libkerncap_inject.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("KERNCAP_INJECT_LIB", str(lib))
    return path


def profile(app, spec, **kw):
    return run_profile([sys.executable, str(app)], env={"FAKE_SPEC": json.dumps(spec)},
                       output=lambda s, d: None, **kw)


def test_two_processes_are_merged(app):
    res = profile(app, {"kernels": KERNELS, "child": True})
    assert res.processes == 2
    assert [k.name for k in res.kernels] == ["_Z4gemmPf", "add_kernel"]
    assert res.kernels[0].calls == 20 and res.total_ns == 20_000_000 and res.dispatches == 2020
    assert res.kernels[0].percent == pytest.approx(90.0)
    assert res.warnings == [] and res.exit_status == 0


def test_a_profile_is_sampled_only_when_every_process_sampled(app):
    """`--sampled` where one process (here the child) fell back to CUPTI's record of every
    launch: the profile's timing is "exact" ("sampled" or "exact", every process's), so no
    90 % intervals are claimed for it, and the warning names the process that fell back; with
    both processes sampled it is "sampled". Mutation caught: "sampled" when any process was."""
    sampled = {"timing": "sampled", "sampling": {}}
    fell_back = {"profile_timing": {"requested": "sampled", "used": "exact", "why": "no entry points"}}
    mixed = profile(app, {"kernels": KERNELS, "child": True, "extra": sampled, "child_extra": {"timing": "exact"},
                          "child_proc": fell_back})
    assert mixed.processes == 2 and mixed.timing == "exact"
    assert [w for w in mixed.warnings if "timed every launch through CUPTI (no entry points)" in w]
    assert ProfileResult.from_dict(json.loads(json.dumps(mixed.to_dict()))).timing == "exact"
    both = profile(app, {"kernels": KERNELS, "child": True, "extra": sampled})
    assert both.processes == 2 and both.timing == "sampled"


def test_cupti_detached_is_known_only_when_every_process_that_used_cupti_said_so(app):
    """cupti_finalized: True when every process that used CUPTI detached ("ok"), False when
    one did not, and unknown (None) when no process used CUPTI (a sampled run: "not used")
    or one did not say. Mutation caught: `finalize or None not in finalize`, which read a
    run without CUPTI as detached and a silent process as a failed detach."""
    def finalized(parent, child):
        spec = {"kernels": KERNELS, "child": True, "proc": {"cupti_finalize": parent} if parent else {},
                "child_proc": {"cupti_finalize": child} if child else {}}
        return profile(app, spec).cupti_finalized

    assert finalized("ok", "ok") is True
    assert finalized("ok", "not used") is True
    assert finalized("ok", "unsubscribed") is False
    assert finalized("not used", "not used") is None
    assert finalized("ok", None) is None


def test_user_module_loading_is_respected(app):
    res = run_profile([sys.executable, str(app)], output=lambda s, d: None,
                      env={"FAKE_SPEC": json.dumps({"kernels": KERNELS, "loading": "LAZY"}),
                           "CUDA_MODULE_LOADING": "LAZY"})
    assert res.kernels


def test_app_failure_without_profile_shows_stderr(app):
    with pytest.raises(KerncapError) as e:
        profile(app, {"kernels": None, "exit": 2, "stderr": ["CUDA error: out of memory"]})
    assert "exited with status 2" in e.value.message and "CUDA error: out of memory" in e.value.message


def test_app_failure_with_profile_is_a_warning(app):
    res = profile(app, {"kernels": KERNELS, "exit": 1})
    assert res.kernels and any("exited with status 1" in w for w in res.warnings)


def test_timeout_interrupts_so_the_profile_is_still_written(app):
    # 3 s, not 1: the interrupt must reach the app's sleep, not its interpreter's start-up
    res = profile(app, {"kernels": KERNELS, "sleep": 60}, timeout=3.0)
    assert res.kernels and any("--timeout 3 s" in w for w in res.warnings)


def test_timeout_interrupts_an_app_started_from_a_background_job(app):
    """A script's background job (`kerncap profile --timeout … &`) has SIGINT ignored, and
    exec keeps that: the app ignored kerncap's SIGINT and died of the SIGTERM after it with
    its profile unwritten (three loaded suite runs started with `&` failed the test above
    so). kerncap now ignores it with a handler, which exec resets in the app."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        res = profile(app, {"kernels": KERNELS, "sleep": 60}, timeout=3.0)
        assert signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, signal.SIG_DFL)  # still ignored, by a handler
    finally:
        signal.signal(signal.SIGINT, previous)
    assert res.kernels and any("--timeout 3 s" in w for w in res.warnings)


def test_cupti_subscriber_without_data_is_an_error(app):
    err = [{"kind": "cupti_subscriber", "message": "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"}]
    with pytest.raises(KerncapError) as e:
        profile(app, {"kernels": None, "errors": err})
    assert "another CUPTI subscriber" in e.value.message and "torch.profiler" in e.value.hint


def test_no_kernels(app):
    with pytest.raises(KerncapError, match="launched no CUDA kernels"):
        profile(app, {"kernels": []})


def test_cli_json_and_workspace(app, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_SPEC", json.dumps({"kernels": KERNELS}))
    ws = tmp_path / "ws"
    rc = main(["profile", "--json", "--workspace", str(ws), "--", sys.executable, str(app)])
    captured = capsys.readouterr()
    assert rc == 0
    data = json.loads(captured.out)  # only the JSON on stdout: the app's stdout went to stderr
    assert data["kernels"][0]["name"] == "_Z4gemmPf"
    assert "app stdout line" in captured.err
    saved = list((ws / "profiles").glob("*.json"))
    assert len(saved) == 1 and ProfileResult.load(saved[0]).dispatches == 1010


def test_cli_table(app, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_SPEC", json.dumps({"kernels": KERNELS}))
    out = tmp_path / "p.json"
    rc = main(["profile", "--top", "1", "--output", str(out), "--cmd", f"{sys.executable} {app}"])
    text = capsys.readouterr().out
    assert rc == 0 and out.is_file()
    assert "gemm" in text and "9.000" in text and "90.0" in text and "64x64" in text
    assert "add_kernel" not in text
    assert "1 more not shown" in text


# What the capture library adds with --by-nvtx / --buckets / --nvtx (launch_attribution.cpp,
# launch_buckets.cpp, nvtx_ranges.cpp).
NVTX_ROWS = [
    {"path": "forward.S1024/layer.5", "kernel": "_Z4gemmPf", "calls": 4, "total_ns": 4_000_000, "min_ns": 900_000,
     "max_ns": 1_100_000},
    {"path": "", "kernel": "add_kernel", "calls": 1000, "total_ns": 1_000_000, "min_ns": 900, "max_ns": 1100},
]
BUCKETS = [
    {"id": 0, "kernel": "_Z4gemmPf", "grid": [64, 64, 1], "block": [256, 1, 1], "shared_mem_bytes": 0,
     "scalars_known": True, "scalars": [{"index": 1, "size": 4, "hex": "00040000"}], "launches": 8, "timed": 8,
     "total_ns": 8_000_000, "min_ns": 1, "max_ns": 2},
    {"id": 1, "kernel": "_Z4gemmPf", "grid": [16, 64, 1], "block": [256, 1, 1], "shared_mem_bytes": 0,
     "scalars_known": True, "scalars": [{"index": 1, "size": 4, "hex": "00010000"}], "launches": 2, "timed": 2,
     "total_ns": 1_000_000, "min_ns": 1, "max_ns": 2},
]


def test_by_nvtx_and_buckets_tables_are_merged_and_printed(app, capsys):
    from kerncap.commands.profile import print_bucket_table, print_nvtx_table

    inject = str(app.parent / "libkerncap_inject.so")
    spec = {"kernels": KERNELS, "child": True, "extra": {"nvtx_ranges": NVTX_ROWS, "buckets": BUCKETS},
            "env": {"KERNCAP_PROFILE_NVTX": "1", "KERNCAP_PROFILE_BUCKETS": "1", "NVTX_INJECTION64_PATH": inject}}
    res = profile(app, spec, by_nvtx=True, buckets=True)
    rows = {r["path"]: r for r in res.nvtx_ranges}
    assert rows["forward.S1024/layer.5"]["calls"] == 8 and rows["forward.S1024/layer.5"]["demangled"] == "gemm(float*)"
    assert rows["forward.S1024/layer.5"]["percent"] == pytest.approx(80.0)
    assert [(b["grid"][0], b["launches"]) for b in res.buckets] == [(64, 16), (16, 4)]
    print_nvtx_table(res)
    print_bucket_table(res)
    text = capsys.readouterr().out
    assert "forward.S1024/layer.5" in text and "(no range)" in text
    assert "gemm: 2 bucket(s)" in text and "88.9" in text and "grid 16x64 block 256 smem 0 | #1=256" in text
    again = ProfileResult.from_dict(json.loads(json.dumps(res.to_dict())))
    assert again.buckets == res.buckets and again.nvtx_ranges == res.nvtx_ranges


def test_cli_by_nvtx_and_buckets_tables_follow_top(app, tmp_path, capsys, monkeypatch):
    """`profile --by-nvtx --buckets --top 1` prints the NVTX and bucket tables after the
    kernel table, each cut to --top rows with a line for the rest."""
    monkeypatch.setenv("FAKE_SPEC", json.dumps({"kernels": KERNELS,
                                                "extra": {"nvtx_ranges": NVTX_ROWS, "buckets": BUCKETS}}))
    rc = main(["profile", "--by-nvtx", "--buckets", "--top", "1", "--output", str(tmp_path / "p.json"),
               "--", sys.executable, str(app)])
    text = capsys.readouterr().out
    assert rc == 0
    nvtx = text[text.index("GPU time per NVTX range and kernel"):]
    assert "forward.S1024/layer.5" in nvtx and "(no range)" not in nvtx
    assert "(1 more rows; --top 0 shows all)" in nvtx
    assert "gemm: 2 bucket(s)" in text
    assert main(["profile", "--by-nvtx", "--top", "0", "--output", str(tmp_path / "q.json"),
                 "--", sys.executable, str(app)]) == 0
    text = capsys.readouterr().out
    assert "(no range)" in text and "more rows" not in text


def test_nvtx_filter_that_keeps_nothing_lists_the_ranges_seen(app):
    seen = {"pattern": "layer.9", "names": ["forward.S1024", "layer.5", "layer.8"], "paths": ["forward.S1024/layer.8"]}
    spec = {"kernels": [], "extra": {"nvtx": seen}, "env": {"KERNCAP_NVTX": "layer.9", "KERNCAP_NVTX_MATCH": "substring"}}
    with pytest.raises(KerncapError) as e:
        profile(app, spec, nvtx="layer.9")
    listed = [line.strip() for line in e.value.message.splitlines()[1:]]
    assert set(listed[:2]) == {"layer.5", "layer.8"} and "forward.S1024" in listed


def test_nvtx_rows_of_several_processes_merge_their_counts_and_extremes():
    """One (range, kernel) row from each of two processes: calls and time add up, the minimum
    is the smaller of the two minima and the maximum the larger of the maxima; the table is
    ranked by total time and each row's percent is of the whole table."""
    from kerncap.capture.nvtx_summary import merge

    gemm = {"path": "fwd/layer.0", "kernel": "_Z4gemmPf"}
    reports = [
        {"pid": 1, "nvtx_ranges": [{**gemm, "calls": 2, "total_ns": 3_000, "min_ns": 1_000, "max_ns": 2_000},
                                   {"path": "", "kernel": "k", "calls": 1, "total_ns": 1_000, "min_ns": 1_000,
                                    "max_ns": 1_000}]},
        {"pid": 2, "nvtx_ranges": [{**gemm, "calls": 3, "total_ns": 6_000, "min_ns": 1_500, "max_ns": 2_500}]},
        {"pid": 3, "nvtx_ranges": [{**gemm, "calls": 1, "total_ns": 500, "min_ns": 500, "max_ns": 500}]},
    ]
    rows = merge(reports, {"_Z4gemmPf": "gemm(float*)"})
    assert [(r.path_text, r.kernel) for r in rows] == [("fwd/layer.0", "_Z4gemmPf"), ("(no range)", "k")]
    g = rows[0]
    assert (g.calls, g.total_ns, g.min_ns, g.max_ns, g.demangled) == (6, 9_500, 500, 2_500, "gemm(float*)")
    assert g.avg_ns == pytest.approx(9_500 / 6) and g.percent == pytest.approx(100 * 9_500 / 10_500)
