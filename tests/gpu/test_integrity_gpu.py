"""Issue 42 on the GPU: variants written to win without doing the work, as an optimizer
would, each built through `kerncap build` (the row the workbench and MCP's `build` show)
on the smooth reproducer, then judged by `validate --perturb` and `replay --compare`.

Each class ends one of two ways:
* **caught**: the build's row is not a pass (validation fails, or a timed launch left the
  wrong bytes and the timing is void, with no speedup) and `validate` exits 1;
* **neutralized**: state it keeps for itself (its own `__device__` globals, device-heap
  memory reached through them) is reset before every launch, so it must do the work each
  time: it validates, and it is not significantly faster (its loading note names the
  globals it defines).
The honest faster edit keeps its pass and its significant speedup. Prints one line per
class (run with -s).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .smooth_edits import edit, kernel_header
from .test_tui_loop import smooth_source_repro  # noqa: F401 - the module-scoped extraction, reused

pytestmark = pytest.mark.gpu

SIGNATURE = ("__global__ void smooth(const float* __restrict__ x, float* __restrict__ y, "
             "const float* __restrict__ w, int n, int taps)")
COMPUTE = """  float acc = 0.0f;
  for (int k = 0; k < taps; ++k) {
    int j = i + k - taps / 2;
    if (j >= 0 && j < n) acc = fmaf(w[k], x[j], acc);
  }
"""

# name -> (how it cheats, the header's body after the signature, expected: "caught" | "neutralized")
VARIANTS = {
    "noop": ("does nothing", "{}\n", "caught"),
    "first_launch": ("computes on its first launch after loading, returns at once later (a per-block flag in a "
                     "__device__ array only it defines)",
                     "{\n  __shared__ int skip;\n  if (threadIdx.x == 0) skip = kc_done[blockIdx.x];\n"
                     "  __syncthreads();\n  if (skip) return;\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                     "  if (i < n) {\n" + COMPUTE + "  y[i] = acc;\n  }\n  __syncthreads();\n"
                     "  if (threadIdx.x == 0) kc_done[blockIdx.x] = 1;\n}\n", "neutralized"),
    "cache_content": ("caches its output per block keyed on a hash of four sampled input values",
                      "{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                      "  unsigned key = 1u + __float_as_uint(x[0]) * 3u + __float_as_uint(x[n / 3]) * 5u + "
                      "__float_as_uint(x[n / 2]) * 7u + __float_as_uint(w[1]) * 11u;\n"
                      "  if (kc_key[blockIdx.x] == key) { if (i < n) y[i] = kc_cache[i]; return; }\n"
                      "  if (i < n) {\n" + COMPUTE + "  y[i] = acc; kc_cache[i] = acc;\n  }\n  __syncthreads();\n"
                      "  if (threadIdx.x == 0) kc_key[blockIdx.x] = key;\n}\n", "neutralized"),
    "cache_address": ("caches its output keyed on the output's address",
                      "{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                      "  unsigned key = 1u + (unsigned)((unsigned long long)y >> 8);\n"
                      "  if (kc_key[blockIdx.x] == key) { if (i < n) y[i] = kc_cache[i]; return; }\n"
                      "  if (i < n) {\n" + COMPUTE + "  y[i] = acc; kc_cache[i] = acc;\n  }\n  __syncthreads();\n"
                      "  if (threadIdx.x == 0) kc_key[blockIdx.x] = key;\n}\n", "neutralized"),
    "heap_stash": ("stashes its output in device malloc memory reached through a __device__ pointer",
                   "{\n  __shared__ float* mine;\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                   "  if (threadIdx.x == 0) mine = kc_stash[blockIdx.x];\n  __syncthreads();\n"
                   "  if (mine) { if (i < n) y[i] = mine[threadIdx.x]; return; }\n"
                   "  if (threadIdx.x == 0) mine = (float*)malloc(blockDim.x * sizeof(float));\n"
                   "  __syncthreads();\n  if (i < n) {\n" + COMPUTE + "  y[i] = acc; if (mine) mine[threadIdx.x] = acc;\n"
                   "  }\n  __syncthreads();\n  if (threadIdx.x == 0) kc_stash[blockIdx.x] = mine;\n}\n", "neutralized"),
    "stale_output": ("skips elements whose output already holds a value (stale output of an earlier launch)",
                     "{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n || y[i] != 0.0f) return;\n"
                     + COMPUTE + "  y[i] = acc;\n}\n", "caught"),  # perturbed inputs redraw y
    "writes_input": ("keeps a 'done' mark in memory outside its outputs (an input buffer)",
                     "{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n"
                     + COMPUTE + "  y[i] = acc;\n  if (i == 0) ((float*)w)[0] = w[0] + 1.0f;\n}\n", "caught"),
    "half_precision": ("accumulates in half precision",
                       "{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n"
                       "  __half acc = __float2half(0.0f);\n  for (int k = 0; k < taps; ++k) {\n"
                       "    int j = i + k - taps / 2;\n"
                       "    if (j >= 0 && j < n) acc = __hfma(__float2half(w[k]), __float2half(x[j]), acc);\n  }\n"
                       "  y[i] = __half2float(acc);\n}\n", "caught"),
    "partial_work": ("does only the first 15/16 of the elements (the rest keep what the output held)",
                     "{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n - n / 16) return;\n"
                     + COMPUTE + "  y[i] = acc;\n}\n", "caught"),
    "captured_answer": ("right only on the captured input (x's pattern (i*37)%64/64 computed, not read)",
                        "{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n"
                        "  float acc = 0.0f;\n  for (int k = 0; k < taps; ++k) {\n    int j = i + k - taps / 2;\n"
                        "    if (j >= 0 && j < n) acc = fmaf(w[k], (float)((j * 37) % 64) / 64.0f, acc);\n  }\n"
                        "  y[i] = acc;\n}\n", "caught"),
}
GLOBALS = ("__device__ int kc_done[1 << 16];\n__device__ unsigned kc_key[1 << 16];\n"
           "__device__ float kc_cache[1 << 22];\n__device__ float* kc_stash[1 << 16];\n")


def kerncap(*args: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "kerncap", *args, "--json"], capture_output=True, text=True,
                          timeout=600)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"kerncap {' '.join(args)} printed no JSON (status {proc.returncode}):\n"
                             f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}") from None


def write_variant(header: Path, name: str) -> None:
    _what, body, _expected = VARIANTS[name]
    header.write_text("#pragma once\n#include <cuda_fp16.h>\n" + GLOBALS + SIGNATURE + " " + body)


@pytest.fixture
def repro(smooth_source_repro, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    work = tmp_path / "reproducer"
    shutil.copytree(smooth_source_repro, work)
    return work


def test_variants_that_game_the_verdict_are_caught_or_neutralized(repro, capsys):
    header = kernel_header(repro)
    original = header.read_text()
    rows = {}
    for name in VARIANTS:
        write_variant(header, name)
        status, out = kerncap("build", str(repro), "--rounds", "10")
        assert out.get("status") == "recorded", (name, out)
        rows[name] = (status, out["variant"])
    header.write_text(original)
    edit(header, "fast")
    status, fast = kerncap("build", str(repro), "--rounds", "10")
    rows["honest fast edit"] = (status, fast["variant"])
    with capsys.disabled():
        for name, (status, v) in rows.items():
            speed = "no speedup (void)" if v["speedup"] is None else \
                f"{v['speedup']:.3f} [{v['speedup_low']:.3f}-{v['speedup_high']:.3f}] significant={v['significant']}"
            print(f"\n[integrity] {name}: exit {status}, {v['validation']} {v['validation_detail']}, {speed}; "
                  f"{v.get('note', '')[:160]}", flush=True)
    for name, (what, _body, expected) in VARIANTS.items():
        status, v = rows[name]
        faster = v["speedup"] is not None and v["significant"] and v["speedup_low"] > 1.0
        if expected == "caught":
            assert v["validation"] != "pass" and status != 0, (name, what, v)
        else:
            assert v["validation"] == "pass" and not faster, (name, what, v)
    status, v = rows["honest fast edit"]
    assert status == 0 and v["validation"] == "pass" and v["significant"] and v["speedup_low"] > 1.0, v

    # A neutralized class's own globals are named where it loads.
    status, r = kerncap("replay", str(repro), "--cubin", str(repro / rows["first_launch"][1]["cubin"]))
    notes = " ".join(r["notes"])
    assert status == 0 and "writable module global" in notes and "kc_done" in notes, notes
    assert r["check"]["checked"] == 20 and not r["check"]["void"]


def test_replay_compare_voids_a_variant_that_does_nothing(repro, capsys):
    header = kernel_header(repro)
    write_variant(header, "noop")
    status, out = kerncap("build", str(repro), "--rounds", "5", "--perturb", "0")
    cubin = repro / out["variant"]["cubin"]
    status, c = kerncap("replay", str(repro), "--compare", str(cubin), "--rounds", "5")
    variant = c["programs"][1]
    with capsys.disabled():
        print(f"\n[integrity] replay --compare noop: exit {status}, void={variant['void']}, "
              f"{variant['check']['failures'][:2]}, inputs {c['inputs']}", flush=True)
    assert status == 1 and variant["void"] and variant["interval"] is None and c["inputs"] == 4
    assert not c["programs"][0]["void"] and c["programs"][0]["check"]["checked"] == 50
    status, r = kerncap("replay", str(repro), "--cubin", str(cubin))
    assert status == 1 and r["check"]["void"] and r["check"]["checked"] == 20


def test_a_dispatch_whose_output_held_its_result_gets_a_canary_input(repro, capsys):
    """smooth writes y from x and w alone: a capture whose y already held the result looks
    like the "written: none" dispatches of issue 42 (its pre-state made its post-state here)."""
    m = json.loads((repro / "capture" / "manifest.json").read_text())
    for r in m["regions"]:
        if r["written"]:
            r["pre"], r["written"] = list(r["post"]), False
    (repro / "capture" / "manifest.json").write_text(json.dumps(m))
    (repro / "determinism.json").unlink(missing_ok=True)
    status, captured = kerncap("validate", str(repro))
    inputs = captured["reproducers"][0]["inputs"]
    with capsys.disabled():
        print(f"\n[integrity] written-none capture: {captured['summary']}; {inputs[-1]['input']}: "
              f"{inputs[-1]['notes']}", flush=True)
    assert status == 0 and captured["discriminates"] and inputs[-1]["input"].startswith("canary input")
    header = kernel_header(repro)
    write_variant(header, "noop")
    status, out = kerncap("build", str(repro), "--rounds", "5", "--perturb", "0")
    v = out["variant"]
    assert v["validation"] == "fail" and "canary" in v["validation_detail"], v


def test_mcp_build_and_check_judge_as_the_cli_does(repro, tmp_path, capsys):
    """The same classes through MCP's `build` and `kerncap check`: a no-op's row fails and
    has no speedup, a neutralized one passes without a speedup; `check` re-validates and
    times the best passing row, and a history row that claims a no-op passed (hand-edited,
    or recorded by an older kerncap) is failed there."""
    from .test_session_gpu import mcp_build

    header = kernel_header(repro)
    write_variant(header, "noop")
    noop = mcp_build(tmp_path, repro)["variant"]
    write_variant(header, "first_launch")
    lazy = mcp_build(tmp_path, repro)["variant"]
    with capsys.disabled():
        print(f"\n[integrity] MCP build: noop {noop['validation']} speedup {noop['speedup']}; first_launch "
              f"{lazy['validation']} {lazy['speedup']:.3f} [{lazy['speedup_low']:.3f}-{lazy['speedup_high']:.3f}]",
              flush=True)
    assert noop["validation"] == "fail" and noop["speedup"] is None, noop
    assert lazy["validation"] == "pass" and not (lazy["significant"] and lazy["speedup_low"] > 1.0), lazy

    status, report = kerncap("check", str(repro), "--backend", "serial", "-n", "20")
    cases = {c["label"]: c for c in report["cases"]}
    assert status == 0 and set(cases) == {"baseline", f"v{lazy['id']}"}, report

    path = repro / "history.json"
    history = json.loads(path.read_text())
    for v in history["variants"]:
        if v["id"] == noop["id"]:
            v["validation"], v["median_ms"] = "pass", 1e-4  # the claim the check must not believe
    path.write_text(json.dumps(history))
    status, report = kerncap("check", str(repro), "--backend", "serial", "-n", "20")
    cases = {c["label"]: c for c in report["cases"]}
    with capsys.disabled():
        print(f"\n[integrity] check of a row claiming a no-op passed: exit {status}, "
              f"{ {k: (c['status'], c.get('message')) for k, c in cases.items()} }", flush=True)
    assert status == 1 and cases[f"v{noop['id']}"]["status"] == "fail", report
