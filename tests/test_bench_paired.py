"""The paired measure's analysis without a GPU (bench/common.py paired_cost, bench/paired.py):
on a faked machine that switches between a fast and a slow CPU state within a run, as the
H200 machines do (docs/facts.md §28), the a-p-p-a groups recover the dispatcher's true cost
per launch where whole-process medians cannot; the rows and goals print as they should.
The switch itself and the same analysis over the stand-in driver: tests/test_entry_hooks.py."""

from __future__ import annotations

import json
import random
import statistics
import sys

import pytest

from bench_module import load_bench


@pytest.fixture(scope="module")
def common():
    return load_bench("common")


def fake_blocks(common, *, cost: float, base: float, per_block: int, n_blocks: int, seed: int,
                slow_from: int | None = None, noise: float = 0.01) -> list[tuple[str, float]]:
    """Block times (ns) of one process: pass-through `base` ns per launch, armed `base + cost`;
    from block `slow_from` on the whole machine runs 1.4x slower, and every block drifts a
    little (the machine warming up)."""
    rng = random.Random(seed)
    out = []
    for i, mode in enumerate(common.abba_order(n_blocks)):
        speed = 1.4 if slow_from is not None and i >= slow_from else 1.0
        speed *= 1 + 0.001 * i
        per_launch = (base + (cost if mode == "a" else 0.0)) * speed
        out.append((mode, per_launch * per_block * rng.uniform(1 - noise, 1 + noise)))
    return out


def test_paired_groups_see_through_a_speed_state_change(common):
    blocks = fake_blocks(common, cost=35.0, base=2500.0, per_block=4096, n_blocks=64, seed=3, slow_from=30)
    got = common.paired_cost(blocks, 4096)
    assert got["groups"] == 15  # 16 groups, the first dropped as warm-up
    lo, hi = got["interval"]
    # The state change scales the cost too (1.4x slower), so the truth lies between 35 and 49 ns;
    # block noise is +-1 % of 2500 ns, so one group is +-25 ns: the median of 15 lands near.
    assert 20 < got["per_launch"] < 60 and lo < got["per_launch"] < hi
    # Two whole processes, one armed in the fast state and one not in the slow state,
    # would have measured a 1000 ns "saving": the state, not kerncap.
    fast_armed = common.median([v / 4096 for m, v in blocks[:30] if m == "a"])
    slow_plain = common.median([v / 4096 for m, v in blocks[30:] if m == "p"])
    assert fast_armed - slow_plain < -900


def test_paired_cost_cancels_drift_exactly_without_noise(common):
    blocks = fake_blocks(common, cost=12.0, base=1000.0, per_block=1000, n_blocks=40, seed=1, noise=0.0)
    got = common.paired_cost(blocks, 1000, skip=0)
    # A linear drift of 0.1 % per block: a-p and a-p (reversed) cancel it to first order.
    assert got["per_launch"] == pytest.approx(12.0 * (1 + 0.001 * 19.5), rel=0.02)
    assert got["ratio"] == pytest.approx(1.012, abs=0.001)


def test_paired_cost_refuses_blocks_out_of_order(common):
    with pytest.raises(ValueError, match="ABBA"):
        common.paired_cost([("a", 1.0), ("a", 1.0), ("p", 1.0), ("p", 1.0)], 1)
    with pytest.raises(ValueError, match="no complete"):
        common.paired_cost([("a", 1.0), ("p", 1.0), ("p", 1.0), ("a", 1.0)], 1)  # skip=1 leaves none
    text = "switch=paired\nblock=0 mode=a wall_ns=10 cpu_ns=7\nblock=1 mode=p wall_ns=9 cpu_ns=6\nother line\n"
    assert common.parse_blocks(text) == [("a", 7.0), ("p", 6.0)]
    assert common.parse_blocks(text, "wall_ns") == [("a", 10.0), ("p", 9.0)]


def test_paired_bench_rows_and_goals(common, monkeypatch, tmp_path, capsys):
    """bench/paired.py end to end with its app runs faked: 30 ns single-thread, 16 threads
    at 1.1x (both goals met), 8 threads at 1.8x (no goal there), the preloaded row a few ns."""
    paired = load_bench("paired")
    cost = {1: 30.0, 2: 32.0, 8: 54.0, 16: 33.0}
    calls = {"n": 0}

    def fake_armed(row, command, workdir, n, build=None):
        calls["n"] += 1
        threads = int(command[2]) if row in ("cudart", "graph") else 1
        c = cost[threads] if row == "cudart" else {"graph": 80.0, "torch": 120.0, "triton": 400.0}[row]
        per_block = int(command[4]) * threads if row in ("cudart", "graph") else int(command[-1])
        blocks = fake_blocks(common, cost=c, base=2000.0, per_block=per_block, n_blocks=32, seed=calls["n"],
                             slow_from=16 if n == 1 else None, noise=0.002)
        return "switch=paired\n" + "\n".join(f"block={i} mode={m} wall_ns={v:.0f} cpu_ns={v:.0f}"
                                             for i, (m, v) in enumerate(blocks))

    rng = random.Random(5)
    monkeypatch.setattr(paired, "armed_run", fake_armed)
    monkeypatch.setattr(paired, "plain_cpu_per_launch",
                        lambda command, per_block, preload: 2000.0 * rng.uniform(0.9, 1.1) + (2.5 if preload else 0))
    monkeypatch.setattr(paired, "build_testapps", lambda d: d)
    out = tmp_path / "p.json"
    monkeypatch.setattr(sys, "argv", ["paired.py", "--repeat", "2", "--blocks", "32", "--per-block", "1024",
                                      "--json", str(out)])
    paired.main()
    printed = capsys.readouterr().out
    lines = {line.split()[0] + (" " + line.split()[1] if line.startswith("cudart") else ""): line
             for line in printed.splitlines() if line and line.split()[0] in ("cudart", "graph", "torch", "triton")}
    assert "<= 40 ns" in lines["cudart x1"] and lines["cudart x1"].rstrip().endswith("ok")
    assert "<= 1.5x" in lines["cudart x16"] and lines["cudart x16"].rstrip().endswith("ok")
    assert "1.8" in lines["cudart x8"]  # 54 / 30, shown, no goal on 8 threads
    assert lines["graph"].split()[1].startswith("8")  # ~80 ns
    assert "preloaded but not attached vs no library" in printed
    saved = json.loads(out.read_text())["results"]
    assert saved["cudart x1"]["estimates"] and len(saved["cudart x1"]["processes"]) == 2
    assert set(saved["preloaded"]["cpu_ns_per_launch"]) == {"none", "preloaded"}


def test_the_decomposition_rows_run_the_cudart_app_with_their_switch(monkeypatch, tmp_path, capsys, common):
    """--rows wrapper,skip-launch,skip-fastpath: the cudart app at one thread, each row's
    process told which part to leave out (KC_PAIRED_ARMED / KERNCAP_BENCH_SKIP reach
    extract's env)."""
    paired = load_bench("paired")
    seen = []

    def fake_extract(target, command, *, env, output_sink, **_):
        seen.append((command[1:3], env.get("KC_PAIRED_ARMED"), env.get("KERNCAP_BENCH_SKIP")))
        armed = "armed=wrapper" if env.get("KC_PAIRED_ARMED") == "wrapper" else "armed=full"
        blocks = fake_blocks(common, cost=10.0, base=2000.0, per_block=1024, n_blocks=32, seed=len(seen))
        text = f"switch=paired\n{armed}\n" + "\n".join(f"block={i} mode={m} wall_ns={v:.0f} cpu_ns={v:.0f}"
                                                       for i, (m, v) in enumerate(blocks))
        output_sink("stdout", text.encode())
        from kerncap.errors import KerncapError
        raise KerncapError("kc_never never ran")

    import kerncap.capture.extract as ex
    monkeypatch.setattr(ex, "extract", fake_extract)
    monkeypatch.setattr(paired, "build_testapps", lambda d: d)
    monkeypatch.setattr(sys, "argv", ["paired.py", "--repeat", "1", "--blocks", "32", "--per-block", "1024",
                                      "--rows", "wrapper,skip-launch,skip-fastpath"])
    paired.main()
    printed = capsys.readouterr().out
    assert seen == [(["kernel", "1"], "wrapper", None), (["kernel", "1"], None, "launch"),
                    (["kernel", "1"], None, "fastpath")]
    for row in ("wrapper ", "skip-launch ", "skip-fastpath "):
        assert any(line.startswith(row) for line in printed.splitlines()), row


def test_builds_interleave_process_by_process_and_each_gets_its_own_row(monkeypatch, tmp_path, capsys, common):
    """--builds: every row's processes alternate between the builds (drift reaches each
    alike), each process loads its build's libraries (KERNCAP_INJECT_LIB while extract
    runs, restored after), and each build has its own rows, goals and 16-thread ratio."""
    paired = load_bench("paired")
    for name in ("v1", "v3"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "libkerncap_inject.so").write_bytes(b"")
    cost = {None: 30.0, str(tmp_path / "v1" / "libkerncap_inject.so"): 2.0,
            str(tmp_path / "v3" / "libkerncap_inject.so"): 12.0}
    seen = []

    def fake_extract(target, command, *, env, output_sink, **_):
        import os
        lib = os.environ.get("KERNCAP_INJECT_LIB")
        seen.append((command[2], lib and lib.split("/")[-2]))
        threads = int(command[2])
        blocks = fake_blocks(common, cost=cost[lib] * (1.2 if threads == 16 else 1), base=2000.0,
                             per_block=1024 * threads, n_blocks=32, seed=len(seen), noise=0.0002)
        output_sink("stdout", ("switch=paired\narmed=full\n" + "\n".join(
            f"block={i} mode={m} wall_ns={v:.0f} cpu_ns={v:.0f}" for i, (m, v) in enumerate(blocks))).encode())
        from kerncap.errors import KerncapError
        raise KerncapError("kc_never never ran")

    import kerncap.capture.extract as ex
    monkeypatch.setattr(ex, "extract", fake_extract)
    monkeypatch.setattr(paired, "build_testapps", lambda d: d)
    monkeypatch.delenv("KERNCAP_INJECT_LIB", raising=False)
    out = tmp_path / "p.json"
    monkeypatch.setattr(sys, "argv", ["paired.py", "--repeat", "2", "--blocks", "32", "--per-block", "1024",
                                      "--rows", "cudart", "--threads", "1,16", "--json", str(out),
                                      "--builds", f"base=installed,v1={tmp_path / 'v1'},v3={tmp_path / 'v3'}"])
    paired.main()
    import os
    assert "KERNCAP_INJECT_LIB" not in os.environ
    assert seen == [("1", None), ("1", "v1"), ("1", "v3")] * 2 + [("16", None), ("16", "v1"), ("16", "v3")] * 2
    saved = json.loads(out.read_text())["results"]
    assert set(saved) == {f"cudart x{t} [{b}]" for t in (1, 16) for b in ("base", "v1", "v3")}
    assert saved["cudart x1 [v1]"]["build"] == "v1" and len(saved["cudart x1 [v1]"]["processes"]) == 2
    assert statistics.median(saved["cudart x1 [v3]"]["estimates"]) == pytest.approx(12.0, rel=0.2)
    lines = {" ".join(line.split()[:3]): line for line in capsys.readouterr().out.splitlines()
             if line.startswith("cudart")}
    assert lines["cudart x1 [base]"].rstrip().endswith("ok") and "<= 40 ns" in lines["cudart x1 [v1]"]
    ratio = float(lines["cudart x16 [v3]"].split("x [")[0].split()[-1])
    assert 1.1 < ratio < 1.3 and "<= 1.5x" in lines["cudart x16 [v3]"]


@pytest.mark.parametrize("builds, message", [("v1", "NAME=DIR"), ("a=installed,a=installed", "NAME=DIR"),
                                             ("a=/nonexistent", "no libkerncap_inject.so")])
def test_builds_are_checked_before_anything_runs(monkeypatch, capsys, builds, message):
    paired = load_bench("paired")
    monkeypatch.setattr(paired, "build_testapps", lambda d: pytest.fail("ran"))
    monkeypatch.setattr(sys, "argv", ["paired.py", "--rows", "cudart", "--builds", builds])
    with pytest.raises(SystemExit):
        paired.main()
    assert message in capsys.readouterr().err


def test_pool_gathers_the_groups_of_rows_from_earlier_runs(monkeypatch, tmp_path, capsys):
    """--pool FILE:ROW ...: the groups of one build measured in several runs, one median
    and interval over all of them; a missing row or a file that is not a run's is named."""
    paired = load_bench("paired")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"results": {"cudart x1 [full]": {"estimates": [30.0] * 10 + [50.0] * 10}}}))
    b.write_text(json.dumps({"results": {"cudart x1": {"estimates": [20.0] * 30}}}))
    monkeypatch.setattr(sys, "argv", ["paired.py", "--pool", f"{a}:cudart x1 [full]", f"{b}:cudart x1"])
    paired.main()
    out = capsys.readouterr().out
    assert "pooled: 20.0 ns" in out and "over 50 a-p-p-a groups" in out and out.rstrip().endswith("ok)")
    a.write_text(json.dumps({"results": {"cudart x16 [full]": {"estimates": [30.0] * 10 + [50.0] * 10}}}))
    monkeypatch.setattr(sys, "argv", ["paired.py", "--pool", f"{a}:cudart x16 [full]", "--over", f"{b}:cudart x1"])
    paired.main()
    out = capsys.readouterr().out  # 16 threads over one: median 40 (of 30s and 50s) over 20
    assert "groups\n" in out  # no 40 ns goal for a 16-thread pool
    assert "over 20.0 ns (30 groups): 2.00x" in out and out.rstrip().endswith("(goal <= 1.5x: MISSED)")
    for bad, message in ((f"{b}:cudart x16", "has no row 'cudart x16'"), (f"{tmp_path}/none.json:x", "is not a")):
        monkeypatch.setattr(sys, "argv", ["paired.py", "--pool", bad])
        with pytest.raises(SystemExit):
            paired.main()
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("substituted,ok", [(16 * 1024, True), (32 * 1024, False)])
def test_the_apply_row_runs_under_apply_with_the_redirect_switch(monkeypatch, tmp_path, capsys, common,
                                                                  substituted, ok):
    """--rows apply (issue 46): launch_paired at one thread through Session.apply, the
    variant the kernel's own captured cubin, the app told to hold the redirect back in its
    p blocks; a - p is the substitution's cost with its goal (<= 100 ns). A run in which
    every launch was substituted (the switch did nothing) stops the bench."""
    import contextlib
    from pathlib import Path
    import types

    from kerncap import api

    paired = load_bench("paired")
    seen = []

    def fake_extract(build, work, output):
        output.mkdir()
        (work / "k.cubin").write_bytes(b"cubin")
        seen.append(("extract", build))
        return output, work / "k.cubin"

    def fake_apply(request, output):
        seen.append((request.command[1:3], request.env, Path(request.cubin).read_bytes(), request.runs))
        blocks = fake_blocks(common, cost=60.0, base=2000.0, per_block=1024, n_blocks=32, seed=len(seen))
        output("stdout", ("switch=paired\narmed=apply\n" + "\n".join(
            f"block={i} mode={m} wall_ns={v:.0f} cpu_ns={v:.0f}" for i, (m, v) in enumerate(blocks))).encode())
        return types.SimpleNamespace(launches=32 * 1024, substituted=substituted)

    monkeypatch.setitem(sys.modules, "apply_cost", types.SimpleNamespace(extract_tiny=fake_extract))
    monkeypatch.setattr(api, "open", lambda root, **_: contextlib.nullcontext(types.SimpleNamespace(apply=fake_apply)))
    monkeypatch.setattr(paired, "build_testapps", lambda d: d)
    monkeypatch.setattr(sys, "argv", ["paired.py", "--repeat", "2", "--blocks", "32", "--per-block", "1024",
                                      "--rows", "apply", "--build-dir", str(tmp_path / "b")])
    if not ok:
        with pytest.raises(SystemExit, match="32768 of 32768 launches substituted"):
            paired.main()
        return
    paired.main()
    env = {"KERNCAP_BENCH_PASSTHROUGH": "1", "KC_PAIRED_ARMED": "apply"}
    assert seen == [("extract", tmp_path / "b"), (("kernel", "1"), env, b"cubin", 0),
                    (("kernel", "1"), env, b"cubin", 0)]  # one capture for both processes, no timing runs
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("apply ")]
    assert line.split()[1].startswith(("5", "6")) and "<= 100 ns" in line and line.rstrip().endswith("ok")
