"""Sequences (issue 29, docs/sequences.md) on the GPU: a window of launches captured as one
reproducer, replayed byte-exact with its streams and events (and serially, and as one CUDA
graph), a kernel of it rebuilt unmodified (byte-exact) and changed (the launch it breaks
found), two launches fused into one user kernel that validates on what is live after them
and is timed against the pair; the refusals. Apps: testapps/cuda/seq_pipeline.cu (two
streams, events, a device copy, a fill, a host copy between five kernels) and
testapps/python/seq_layer.py (a decoder layer: Triton RMSNorm, GEMMs, SDPA, elementwise;
eager inside NVTX ranges, and recorded with torch.cuda.graph).

Every failure prints what kerncap said (the extract summary, the validation report).
Run with -s to see the timings (fusion vs the pair, per-launch tables)."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from kerncap import api
from kerncap.errors import KerncapError

from .apps import TESTAPPS, AppSpec, Once, app_env

pytestmark = pytest.mark.gpu

N = 1 << 20  # seq_pipeline.cu: n
PIPELINE_KERNELS = ["sp_scale", "sp_square", "sp_add", "sp_combine", "sp_bias"]
LAYERS = 2  # seq_layer.py --layers


def replay_per_launch(reproducer, *, iterations: int, warmup: int):
    """A sequence replayed through its session, each launch timed too."""
    with api.open(reproducer, compile_worker=False) as s:
        return s.replay(api.ReplayRequest(iterations=iterations, warmup=warmup, per_launch=True))


def localize(reproducer, variant):
    """Where `variant`'s state first departs from the captured sequence's (its session's localize)."""
    with api.open(reproducer, compile_worker=False) as s:
        return s.localize(str(variant))


def pipeline_app(mode: str = "pipeline") -> AppSpec:
    return AppSpec("seq_pipeline", "", args=(mode,), timeout=120.0)


def layer_app(mode: str) -> AppSpec:
    return AppSpec("seq_layer", "", python=True, args=("--mode", mode, "--layers", str(LAYERS)), timeout=400.0)


class Extracts:
    """One extract per label per module; a failed extract fails every test that needs it,
    with kerncap's own message."""

    def __init__(self, build: Path, root: Path):
        self.build, self.root, self.once = build, root, Once()

    def run(self, label: str, spec: AppSpec, kernel: str, **kwargs):
        work = self.root / label
        work.mkdir(parents=True)
        res = api.extract(kernel, spec.command(self.build), output=work / "reproducer", timeout=spec.timeout,
                          env=app_env(spec, work), **kwargs)
        report = json.loads((work / "report.json").read_text()) if (work / "report.json").exists() else {}
        print(f"\n[{label}]\n{api.format_extract(res)}")
        for w in res.warnings:
            print(f"  warning: {w}")
        return res, report, work

    def get(self, label: str, spec: AppSpec, kernel: str, **kwargs):
        return self.once.get(label, lambda: self.run(label, spec, kernel, **kwargs))


@pytest.fixture(scope="module")
def seqs(testapps_build, tmp_path_factory) -> Extracts:
    return Extracts(testapps_build, tmp_path_factory.mktemp("sequences"))


def pipeline(seqs, testapps_build):
    """Instance 1 of the NVTX range "pipeline" (the second round), with the kernels' sources."""
    return seqs.get("pipeline", pipeline_app(), "", sequence=api.SequenceRequest("nvtx"),
                    selection=api.Selection(nvtx="pipeline"), dispatch=1, source_dir=TESTAPPS / "cuda",
                    build_dir=testapps_build)


def validated(path, *, cubin=None, order=None, runs: int = 2):
    report = api.validate_request([path], api.ValidateRequest(cubin=None if cubin is None else str(cubin), runs=runs),
                                  order=order)
    text = api.format_trust_report(report)
    print(text)
    return report, text


def copy_of(res, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(res.reproducer_dir, dst, symlinks=True)
    return dst


def kernel_index(cap, name: str) -> int:
    (k,) = [k.id for k in cap.sequence.kernels if name in (k.demangled or k.name)]
    return k


# -- the CUDA C++ pipeline ---------------------------------------------------------------------


def test_the_pipeline_sequence_holds_every_launch_copy_fill_and_event(seqs, testapps_build):
    np = pytest.importorskip("numpy")
    res, report, _ = pipeline(seqs, testapps_build)
    cap = res.capture
    seq = cap.sequence
    print(api.format_info(api.info(res.reproducer_dir)))
    names = [seq.kernel_of(i).demangled.split("(")[0] for i in range(len(seq.launches))]
    assert names == PIPELINE_KERNELS, names
    streams = [l.stream for l in seq.launches]
    assert streams[0] == streams[2] == streams[3] == streams[4] != streams[1], streams
    ops = [(s.op, s.kind) for s in seq.steps]
    for want in [("record", ""), ("wait", ""), ("copy", "d2d"), ("memset", ""), ("copy", "h2d")]:
        assert want in ops, (want, ops)
    copy = next(s for s in seq.steps if s.op == "copy" and s.kind == "d2d")
    assert (copy.dst, copy.src, copy.bytes) == (report["z"], report["tmp"], 4 * N)
    h2d = next(s for s in seq.steps if s.op == "copy" and s.kind == "h2d")
    assert h2d.dst == report["bias"] and h2d.bytes == 4096
    host = np.frombuffer(cap.read_bytes(list(h2d.payload), h2d.bytes), dtype=np.float32)
    expected = np.array([0.25 * (i % 7) + 1.0 for i in range(1024)], dtype=np.float32)  # round 1's pageable buffer
    assert np.array_equal(host, expected), "the h2d payload is not the app's (freed) pageable host data"
    fill = next(s for s in seq.steps if s.op == "memset")
    assert fill.dst == report["scratch"] and fill.element in (1, 4)
    # the post-state is the app's result (round 1: x = (i % 1009) * 0.002 - 3)
    region = cap.region_of(report["out"])
    out = np.frombuffer(cap.read_bytes(region.post, region.size), dtype=np.float32, count=N,
                        offset=report["out"] - region.base)
    # sp_init's `float(i % 1009) * k - 3.0f` is one fma (nvcc contracts it): the exact
    # product and sum in float64 (a 24-bit by 24-bit product is exact there), rounded once
    x = ((np.arange(N) % 1009).astype(np.float64) * np.float64(np.float32(0.002)) - 3.0).astype(np.float32)
    tmp = np.float32(2.0) * x + np.float32(0.5)
    want = (tmp + np.float32(1.0)) + tmp * tmp
    want = want + (expected[np.arange(N) % 1024] + np.float32(7.0))
    assert np.array_equal(out, want), f"{int((out != want).sum())} elements of out differ from the app's result"
    entries = {e["name"]: e for e in (json.loads((res.reproducer_dir / "reproducer.json").read_text())
                                       ["sequence"]["kernels"])}
    assert all(e["sources"] == "cuda" for e in entries.values()), entries


@pytest.mark.parametrize("order", ["streams", "serial", "graph"])
def test_the_pipeline_replays_byte_exact_in_each_order(seqs, testapps_build, order):
    res, _, _ = pipeline(seqs, testapps_build)
    report, text = validated(res.reproducer_dir, order=order)
    assert report.verdict == "pass", text


def test_each_launch_of_the_pipeline_is_timed_on_its_stream(seqs, testapps_build):
    res, _, _ = pipeline(seqs, testapps_build)
    r = replay_per_launch(res.reproducer_dir, iterations=10, warmup=2)
    print(api.format_replay(r))
    print(api.format_sequence_launches(r.launches))
    assert [re.search(r"\((\w+)\(", l["label"]).group(1) for l in r.launches] == PIPELINE_KERNELS
    assert all(l["median_ms"] > 0 for l in r.launches)
    assert r.median_ms >= 0.5 * sum(l["median_ms"] for l in r.launches)  # two streams may overlap, never more


def test_an_unmodified_rebuild_of_one_kernel_validates_byte_exact(seqs, testapps_build, tmp_path):
    res, _, _ = pipeline(seqs, testapps_build)
    repro = copy_of(res, tmp_path)
    built, variant = api.recompile_sequence_kernel(repro, "sp_add")
    print(f"rebuilt {built.cubin} in {built.seconds:.2f} s ({built.mode}); variant {variant}")
    report, text = validated(repro, cubin=variant)
    assert report.verdict == "pass", text
    where = localize(repro, variant)
    print(api.format_localization(where))
    assert not where["diverged"] and where["launches_checked"] == 5, where


def test_a_changed_kernel_is_localized_to_its_launch(seqs, testapps_build, tmp_path):
    res, _, _ = pipeline(seqs, testapps_build)
    repro = copy_of(res, tmp_path)
    k = kernel_index(res.capture, "sp_add")
    source = repro / "kernels" / str(k) / "source" / "seq_pipeline.cu"
    text = source.read_text()
    assert "tmp[i] + 1.0f" in text, f"{source} is not the app's source"
    source.write_text(text.replace("tmp[i] + 1.0f", "tmp[i] + 1.25f"))
    _, variant = api.recompile_sequence_kernel(repro, "sp_add")
    report, text = validated(repro, cubin=variant, runs=1)
    assert report.verdict == "fail", text
    where = localize(repro, variant)
    print(api.format_localization(where))
    assert where["diverged"] and "launch 2 (sp_add" in where["at"], where


def _fused_body(config: dict, report: dict) -> tuple[str, dict[str, str]]:
    by_address = {p["address"]: p["name"] for p in config["params"] if p["kind"] == "buffer"}
    names = {key: by_address[report[key]] for key in ("tmp", "y", "w", "out")}
    n = next(p["name"] for p in config["params"] if p["kind"] == "scalar")
    body = (f"  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"  if (i < {n}) {names['out']}[i] = ({names['tmp']}[i] + 1.0f) + {names['w']}[i];\n")
    return body, names


def test_two_launches_fused_into_one_kernel_validate_and_are_timed_against_the_pair(seqs, testapps_build, tmp_path):
    """sp_add (y = tmp + 1) and sp_combine (out = y + w) replaced by one kernel writing out
    from tmp and w: y only carries values between them, so it is inferred an intermediate,
    left out of the comparison and named; the fused sequence validates byte-exact on the
    rest; its time against the pair's, with an interval."""
    res, report, _ = pipeline(seqs, testapps_build)
    repro = copy_of(res, tmp_path)
    source = api.fuse_skeleton(repro, 2, 3, "pair")
    print(source.read_text())
    config = json.loads((source.parent / "fusion.json").read_text())
    body, names = _fused_body(config, report)
    source.write_text(source.read_text().replace("  // TODO: the work of the replaced launches\n", body))
    variant = api.fuse_build(repro, "pair")
    fuse = json.loads(variant.read_text())["fuse"]
    print(json.dumps(fuse["excluded"], indent=1))
    assert [(e["name"], e["why"], e["address"]) for e in fuse["excluded"]] == [(names["y"], "inferred", report["y"])]
    report_v, text = validated(repro, cubin=variant)
    assert report_v.verdict == "pass", text
    assert f"not compared: {names['y']}" in text, text
    where = localize(repro, variant)
    print(api.format_localization(where))
    assert not where["diverged"], where
    with api.open(repro, compile_worker=False) as session:
        comparison = session.compare(api.CompareRequest(cubins=(str(variant),), rounds=20, iterations=10))
    print(api.format_comparison(comparison))
    fused = comparison.programs[-1].interval
    assert fused is not None and fused.low <= fused.speedup <= fused.high
    with api.open_session(repro) as s:
        base = s._resident().sequence_time(None, iterations=10)
        var = s._resident().sequence_time(str(variant), iterations=10)
    pair = base["launches"][2]["median_ms"] + base["launches"][3]["median_ms"]
    one = var["launches"][2]["median_ms"]
    print(f"fusion: the pair sp_add + sp_combine {pair:.4f} ms, the fused kernel {one:.4f} ms ({pair / one:.2f}x); "
          f"sequence {base['median_ms']:.4f} ms -> {var['median_ms']:.4f} ms; whole-sequence speedup "
          f"{fused.speedup:.3f} [{fused.low:.3f}, {fused.high:.3f}]")


def test_the_pipeline_over_mcp_validates_per_launch_times_each_launch_and_fuses(seqs, testapps_build, tmp_path):
    """The same flow through the MCP server (the SDK's client, in memory; the replay servers
    are the real ones): validate per_launch (PASS, byte-exact, every launch compared),
    replay per_launch (a time for every launch), the graph order, then the fusion of
    sp_add + sp_combine written by fuse_skeleton/fuse_build alone (the body as the API test
    writes it), validated per_launch with y named as not compared, and timed."""
    pytest.importorskip("mcp")
    anyio = pytest.importorskip("anyio")
    from mcp import Client

    from kerncap.frontends.mcp_server import build_server

    res, report, _ = pipeline(seqs, testapps_build)
    repro = copy_of(res, tmp_path)
    log: list[str] = []

    async def go():
        async with Client(build_server([tmp_path])) as c:
            async def call(tool, **args):  # not `name`: fuse_skeleton and fuse_build take one
                r = await c.call_tool(tool, {"reproducer": repro.name, **args})
                text = "\n".join(getattr(x, "text", "") for x in r.content)
                log.append(f"{tool} {json.dumps(args)[:100]} -> {'ERROR ' + text[:2000] if r.is_error else 'ok'}")
                assert not r.is_error, "\n".join(log)
                return r.structured_content

            validated_ = await call("validate", per_launch=True, runs=2)
            timed = await call("replay", per_launch=True, iterations=10, warmup=2)
            graph = await call("validate", runs=1, order="graph")
            skeleton = await call("fuse_skeleton", first=2, last=3, name="pair")
            body, names = _fused_body(skeleton, report)
            built = await call("fuse_build", name="pair", source=skeleton["text"].replace(
                "  // TODO: the work of the replaced launches\n", body))
            variant = built["variant"]
            fused = await call("validate", cubin=variant, per_launch=True, runs=2)
            fused_timed = await call("replay", cubin=variant, per_launch=True, iterations=10, warmup=2)
            compared = await call("compare", cubins=[variant], rounds=10, iterations=5)
            return validated_, timed, graph, names, built, fused, fused_timed, compared

    try:
        validated_, timed, graph, names, built, fused, fused_timed, compared = anyio.run(go)
    finally:
        print("\n".join(log))
    assert validated_["verdict"] == "pass" and validated_["mode"] == "exact", validated_["summary"]
    assert all(r["mismatched_bytes"] == 0 for r in validated_["regions"]) and validated_["regions"]
    local = validated_["per_launch"]
    assert not local["diverged"] and local["launches_checked"] == len(PIPELINE_KERNELS), local
    print(api.format_sequence_launches(timed["launches"]))
    assert [re.search(r"\((\w+)\(", l["label"]).group(1) for l in timed["launches"]] == PIPELINE_KERNELS
    assert all(l["median_ms"] > 0 for l in timed["launches"]), timed["launches"]
    assert graph["verdict"] == "pass", graph["summary"]
    assert [(e["name"], e["why"], e["address"]) for e in built["excluded"]] == [(names["y"], "inferred", report["y"])]
    notes = [n for i in fused["reproducers"][0]["inputs"] for n in i["notes"]]
    assert fused["verdict"] == "pass", (fused["summary"], notes)
    assert any(n.startswith(f"not compared: {names['y']}") for n in notes), notes
    assert not fused["per_launch"]["diverged"], fused["per_launch"]
    assert fused["per_launch"]["launches_checked"] == len(PIPELINE_KERNELS) - 1  # the fused pair counts as one
    print(api.format_sequence_launches(fused_timed["launches"]))
    assert len(fused_timed["launches"]) == len(PIPELINE_KERNELS) - 1 and all(
        l["median_ms"] > 0 for l in fused_timed["launches"])
    pair = timed["launches"][2]["median_ms"] + timed["launches"][3]["median_ms"]
    one = fused_timed["launches"][2]["median_ms"]
    interval = compared["programs"][1]["interval"]
    print(f"over MCP: the pair {pair:.4f} ms, the fused kernel {one:.4f} ms; whole-sequence speedup "
          f"{interval['speedup']:.3f} [{interval['low']:.3f}, {interval['high']:.3f}]")
    assert interval["low"] <= interval["speedup"] <= interval["high"]


def test_a_fused_kernel_whose_parameters_differ_from_its_skeleton_is_named(seqs, testapps_build, tmp_path):
    res, report, _ = pipeline(seqs, testapps_build)
    repro = copy_of(res, tmp_path)
    source = api.fuse_skeleton(repro, 2, 3, "bad")
    config = json.loads((source.parent / "fusion.json").read_text())
    body, _ = _fused_body(config, report)
    last = config["params"][-1]["name"]
    text = source.read_text().replace("  // TODO: the work of the replaced launches\n", body)
    # drop the skeleton's last parameter from the kernel's list
    text = re.sub(rf",\s*//[^\n]*\n\s*\w[\w ]*\s{last}\s*//[^\n]*\n", "   // dropped\n", text)
    source.write_text(text)
    variant = api.fuse_build(repro, "bad")
    with pytest.raises(KerncapError) as e:
        validated(repro, cubin=variant, runs=1)
    print(e.value.message)
    assert last in e.value.message and "skeleton" in e.value.message, e.value.message


def test_runs_bounded_by_a_count_and_by_a_kernel(seqs, testapps_build):
    res, _, _ = seqs.get("run-count", pipeline_app(), "sp_scale", sequence=api.SequenceRequest("run", count=3))
    names = [res.capture.sequence.kernel_of(i).demangled.split("(")[0] for i in range(len(res.capture.sequence.launches))]
    assert names == PIPELINE_KERNELS[:3], names
    report, text = validated(res.reproducer_dir, runs=1)
    assert report.verdict == "pass", text
    res, _, _ = seqs.get("run-until", pipeline_app(), "sp_scale", dispatch=1,
                         sequence=api.SequenceRequest("run", until="sp_combine"))
    names = [res.capture.sequence.kernel_of(i).demangled.split("(")[0] for i in range(len(res.capture.sequence.launches))]
    assert names == PIPELINE_KERNELS[:4], names
    report, text = validated(res.reproducer_dir, runs=1)
    assert report.verdict == "pass", text


@pytest.mark.parametrize("label, mode, kernel, kwargs, words", [
    ("unclosed", "unclosed", "", dict(sequence=api.SequenceRequest("nvtx"), selection=api.Selection(nvtx="pipeline")),
     ["never closed", "pipeline"]),
    ("unopened", "pipeline", "", dict(sequence=api.SequenceRequest("nvtx"), selection=api.Selection(nvtx="pipelne")),
     ["never began", "pipeline"]),
    ("graph-host", "graph_host", "sp_add", dict(sequence=api.SequenceRequest("graph")), ["host node"]),
    ("crossproc", "crossproc", "sp_scale", dict(sequence=api.SequenceRequest("run", until="sp_marker")),
     ["crosses processes", "sp_marker"]),
    ("ctx2", "ctx2", "sp_scale", dict(sequence=api.SequenceRequest("run", count=5)), ["crosses CUDA contexts"]),
])
def test_a_sequence_kerncap_cannot_capture_is_refused_with_the_reason(seqs, label, mode, kernel, kwargs, words):
    with pytest.raises(KerncapError) as e:
        seqs.run(label, pipeline_app(mode), kernel, **kwargs)
    print(f"[{label}] {e.value.message}\n  hint: {e.value.hint}")
    for w in words:
        assert w in e.value.message, e.value.message


# -- the PyTorch decoder layer -----------------------------------------------------------------


def test_a_decoder_layer_replays_byte_exact_and_is_timed_per_launch(seqs):
    res, _, _ = seqs.get("layer", layer_app("eager"), "", sequence=api.SequenceRequest("nvtx"),
                         selection=api.Selection(nvtx="step.1/layer.1"))
    seq = res.capture.sequence
    names = [seq.kernel_of(i).demangled or seq.kernel_of(i).name for i in range(len(seq.launches))]
    print("\n".join(f"  {i}: {n[:120]}" for i, n in enumerate(names)))
    assert sum("kc_seq_rmsnorm" in n for n in names) == 2, names  # Triton
    assert len(seq.launches) >= 8, names
    for order in ("streams", "graph"):
        report, text = validated(res.reproducer_dir, order=order)
        assert report.verdict == "pass", f"{order}: {text}"
    r = replay_per_launch(res.reproducer_dir, iterations=10, warmup=3)
    print(api.format_replay(r))
    print(api.format_sequence_launches(r.launches))
    assert len(r.launches) == len(seq.launches)


def test_a_cuda_graph_launch_replays_byte_exact(seqs):
    # kc_seq_rmsnorm runs twice per layer: the warm-up is dispatches 0..2L-1, replay 1 starts at 4L.
    res, _, _ = seqs.get("graph", layer_app("graph"), "kc_seq_rmsnorm", dispatch=4 * LAYERS,
                         sequence=api.SequenceRequest("graph"))
    seq = res.capture.sequence
    print(json.dumps(seq.graph, indent=1))
    assert seq.graph and seq.graph["exec_launch"] == 1, seq.graph
    assert sum("kc_seq_rmsnorm" in (seq.kernel_of(i).demangled or seq.kernel_of(i).name)
               for i in range(len(seq.launches))) == 2 * LAYERS
    for order in ("streams", "graph"):
        report, text = validated(res.reproducer_dir, order=order)
        assert report.verdict == "pass", f"{order}: {text}"


# -- pruned sequences (docs/prune.md, "Sequences") ------------------------------------------------


def _pruned(report, what: str):
    print(f"[{what}] {report.summary()}\n  {report.by_reason_text()}")
    for rid, why in sorted(report.reasons.items()):
        print(f"  region {rid:<4} {why}")
    assert report.kept == "pruned" and report.validated, f"{what}: kept {report.kept}: {report.reason}"
    assert report.regions_pruned < report.regions_full and report.logical_pruned < report.logical_full, report.summary()


def _kerncap(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "kerncap", *args], capture_output=True, text=True, timeout=600)
    print(f"$ kerncap {' '.join(args)}  -> {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc


def test_a_pruned_pipeline_drops_what_no_launch_reaches_and_still_validates_everywhere(seqs, testapps_build,
                                                                                       tmp_path):
    """The pipeline's window reaches every buffer but `flag` (sp_marker's, launched only in
    crossproc mode): prune drops it, validates on the GPU, and the pruned sequence then
    validates, replays, packs, unpacks, lists, shows its info and passes `kerncap check`."""
    res, report, _ = pipeline(seqs, testapps_build)
    repro = copy_of(res, tmp_path)
    full = api.open_capture(repro)
    pr = api.prune(repro)
    _pruned(pr, "pipeline")
    cap = api.open_capture(repro)
    kept = {r.id for r in cap.regions}
    flag = full.region_of(report["flag"])
    assert flag is not None, f"no region holds flag at {report['flag']:#x}"
    assert flag.id not in kept, pr.reasons.get(flag.id)
    for key in ("x", "tmp", "y", "z", "w", "out", "bias", "scratch"):
        assert full.region_of(report[key]).id in kept, key
    assert cap.sequence.steps == full.sequence.steps and (repro / "kernels").is_dir()
    cap.verify()
    for order in ("streams", "graph"):
        v, text = validated(repro, order=order)
        assert v.verdict == "pass", f"{order}: {text}"
    r = replay_per_launch(repro, iterations=5, warmup=1)
    assert len(r.launches) == len(PIPELINE_KERNELS)
    packed = api.pack(repro, tmp_path / "pruned.kcap")
    api.unpack(packed.path, tmp_path / "unpacked")
    v, text = validated(tmp_path / "unpacked")
    assert v.verdict == "pass", text
    info = _kerncap("info", str(repro))
    assert info.returncode == 0 and "pruned      from" in info.stdout and "kept for arguments" in info.stdout
    listed = _kerncap("list", str(tmp_path))
    assert listed.returncode == 0 and "sequence (nvtx): 5 launches" in listed.stdout
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "pipeline").symlink_to(repro)
    checked = _kerncap("check", str(corpus), "--iterations", "20")
    assert checked.returncode == 0, checked.stdout[-2000:]


def chain(seqs, testapps_build, *, prune: bool):
    return seqs.get("chain-pruned" if prune else "chain", pipeline_app("chain"), "",
                    sequence=api.SequenceRequest("nvtx"), selection=api.Selection(nvtx="chain"), prune=prune)


def test_a_pointer_one_launch_stores_and_the_next_follows_is_kept_and_the_prune_validates(seqs, testapps_build):
    """extract --sequence nvtx --nvtx chain --prune: sp_stash stores hidden's address in
    table, sp_follow reads hidden through it. Only table's post-state holds that address,
    so hidden is kept for it; mark is kept for the window's fill; the 16 MiB ballast is
    dropped; the pruned reproducer validated byte-exact before it replaced the full one."""
    res, report, _ = chain(seqs, testapps_build, prune=True)
    assert res.prune is not None, res.notes
    _pruned(res.prune, "chain")
    cap = res.capture
    ids = {r.id for r in cap.regions}
    table, hidden = cap.region_of(report["table"]), cap.region_of(report["hidden"])
    mark, sink = cap.region_of(report["mark"]), cap.region_of(report["sink"])
    assert None not in (table, hidden, mark, sink) and cap.region_of(report["ballast"]) is None
    why = res.prune.reasons
    assert why[hidden.id] == f"pointer at region {table.id}+0x0 (stored in the window)", why
    fill = next(i for i, st in enumerate(cap.sequence.steps) if st.op == "memset")
    assert why[mark.id] == f"step {fill}: fill", why
    assert why[table.id] == "launch 0: argument 0" and why[sink.id] == "launch 1: argument 1", why
    assert res.prune.by_reason["pointers stored in the window"]["regions"] == 1, res.prune.by_reason
    assert res.prune.logical_full - res.prune.logical_pruned >= 16 << 20
    assert {hidden.id, table.id, mark.id, sink.id} <= ids
    v, text = validated(res.reproducer_dir)
    assert v.verdict == "pass", text


def test_without_the_post_state_the_chain_prune_fails_its_validation_and_keeps_the_full_one(seqs, testapps_build,
                                                                                            tmp_path, monkeypatch):
    """The control: a closure of pre-states only drops hidden; replaying sp_follow then
    faults or reads nothing, the GPU validation says so, and the full reproducer stays."""
    from kerncap.prune import closure as closure_mod
    from kerncap.prune.roots import sequence_roots

    def pre_only(cap):
        roots = sequence_roots(cap)
        roots.post = False
        return roots

    res, report, _ = chain(seqs, testapps_build, prune=False)
    repro = copy_of(res, tmp_path)
    monkeypatch.setattr(closure_mod, "sequence_roots", pre_only)
    pr = api.prune(repro)
    print(f"[chain, pre-states only] {pr.summary()}")
    assert pr.kept == "full", pr.summary()
    assert pr.reason.startswith(("replaying the pruned reproducer failed", "the pruned reproducer does not replay "
                                 "byte-exact")), pr.reason
    assert api.open_capture(repro).region_of(report["hidden"]) is not None


def test_a_sequence_writing_memory_no_pointer_reaches_is_not_pruned(seqs, testapps_build, tmp_path):
    """sp_hide writes hidden through an address it computes (masked ^ key) and stores
    nowhere: prune refuses before any replay, naming the region and the launches."""
    res, report, _ = seqs.get("hidden", pipeline_app("hidden"), "", sequence=api.SequenceRequest("nvtx"),
                              selection=api.Selection(nvtx="hidden"))
    repro = copy_of(res, tmp_path)
    hidden = api.open_capture(repro).region_of(report["hidden"])
    assert hidden.written
    pr = api.prune(repro)
    print(f"[hidden] {pr.summary()}")
    assert pr.kept == "full" and not pr.validated, pr.summary()
    from kerncap.core.units import human_bytes

    assert pr.reason.startswith(f"the sequence wrote region {hidden.id} ({hidden.base:#x}, {human_bytes(hidden.size)}), "
                                "which no pointer"), pr.reason
    assert "one of its 2 launches (launch 0 (sp_scale" in pr.reason and "launch 1 (sp_hide" in pr.reason, pr.reason
    record = json.loads((repro / "reproducer.json").read_text())["prune"]
    assert record["kept"] == "full" and record["reason"] == pr.reason


def test_a_pruned_decoder_layer_drops_the_ballast_and_validates(seqs, tmp_path):
    """The eager layer.1 of step.1 (Triton, cuBLAS, cuDNN, elementwise): the 64 MiB ballast
    segment is reached by no launch and dropped; the pruned layer validates byte-exact."""
    res, report, _ = seqs.get("layer", layer_app("eager"), "", sequence=api.SequenceRequest("nvtx"),
                              selection=api.Selection(nvtx="step.1/layer.1"))
    repro = copy_of(res, tmp_path)
    ballast = api.open_capture(repro).region_of(report["ballast"])
    assert ballast is not None and ballast.size >= 64 << 20
    pr = api.prune(repro)
    _pruned(pr, "layer")
    assert ballast.id not in pr.reasons and api.open_capture(repro).region_of(report["ballast"]) is None
    v, text = validated(repro, order="graph")
    assert v.verdict == "pass", text


# -- the workbench on a real sequence ------------------------------------------------------------


async def settle(pilot):
    """Let the workbench's thread workers finish (a superseded exclusive worker ends cancelled)."""
    from textual.worker import WorkerCancelled

    await pilot.pause()
    ours = [w for w in pilot.app.workers if w.group in ("profile", "git", "build", "source-locate", "fuse", "fusion")]
    if ours:
        try:
            await pilot.app.workers.wait_for_complete(ours)
        except WorkerCancelled:
            pass
    await pilot.pause()


def log_text(app) -> str:
    """The log pane's text, also what it holds back until its tab is first shown."""
    log = app.query_one("#log")
    pending = [getattr(d.content, "plain", str(d.content)) for d in getattr(log, "_deferred_renders", ())]
    return "\n".join([line.text for line in log.lines] + pending)


def test_the_workbench_rebuilds_a_kernel_of_the_pipeline_and_records_the_sequence(seqs, testapps_build, tmp_path,
                                                                                   monkeypatch):
    """The pipeline sequence open in the workbench (Textual's pilot): its five launches
    listed with their replayed times; the cursor on sp_add's launch opens kernels/<k>/source;
    a save (unchanged text) rebuilds sp_add, replays and validates the whole sequence and
    records a History row: PASS (byte-exact), the sequence's time and sp_add's launch's."""
    import asyncio

    from textual.widgets import DataTable

    from kerncap_tui.app import KerncapApp
    from kerncap_tui.messages import SourceChanged
    from kerncap_tui.widgets.history_pane import HistoryPane
    from kerncap_tui.widgets.profile_pane import ProfilePane
    from kerncap_tui.widgets.source_pane import SourcePane

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    res, _, _ = pipeline(seqs, testapps_build)
    repro = copy_of(res, tmp_path)
    seq = api.open_capture(repro).sequence
    k = kernel_index(api.open_capture(repro), "sp_add")
    row = next(l.index for l in seq.launches if l.kernel == k)

    async def run():
        app = KerncapApp(repro)
        async with app.run_test(size=(160, 40)) as pilot:
            await settle(pilot)
            profile = app.query_one(ProfilePane)
            table = profile.query_one(DataTable)
            times = [str(table.get_row_at(i)[1]) for i in range(table.row_count)]
            print(f"launch times on screen: {times}; status: {profile.query_one('#profile-status').content}")
            assert table.row_count == len(PIPELINE_KERNELS) and all(t != "…" and float(t) > 0 for t in times), times
            table.focus()
            for _ in range(row):
                await pilot.press("down")
            await settle(pilot)
            source = app.query_one(SourcePane)
            assert app.launch == row and source.source_dir == repro / "kernels" / str(k) / "source", source.source_dir
            assert source.path is not None, "no source file open for sp_add's kernel entry"
            source.action_save()
            app.post_message(SourceChanged(source.path))
            await pilot.pause(0.6)  # the debounce
            for _ in range(600):  # the build: recompile, baseline, interleaved timing, validation (no timing asserted)
                await settle(pilot)
                said = log_text(app)
                if len(app.session.history.variants) >= 2 or "build: " in said or "replay could not run" in said:
                    break
                await pilot.pause(0.5)
            history = app.session.history
            log = log_text(app)
            assert len(history.variants) == 2, f"no History row after the save; the log:\n{log}"
            base, v = history.variants
            print(f"baseline {base.median_ms:.4f} ms {base.launch_ms}; v1 {v.median_ms:.4f} ms {v.launch_ms} "
                  f"validation {v.validation} {v.validation_detail}")
            assert v.validation == "pass", f"{v.validation} {v.note}\n{log}"
            assert v.kernel == k and v.median_ms > 0 and len(v.launch_ms) == len(PIPELINE_KERNELS)
            assert api.changed_launch_ms(v, app.capture) > 0
            cells = [str(c) for c in app.query_one(HistoryPane).query_one(DataTable).get_row_at(1)]
            assert cells[1] == "v1" and cells[8].startswith(f"{k} sp_add") and cells[9] != "—", cells

    asyncio.run(run())


def test_the_workbench_fuses_two_launches_of_the_pipeline_and_records_the_fusion(seqs, testapps_build, tmp_path,
                                                                                 monkeypatch):
    """The fusion of sp_add + sp_combine made in the workbench (Textual's pilot) alone: m on
    launch 2 and on launch 3 marks the range in Profile, F and a name write the skeleton,
    which opens in Source; the body the API test writes, saved, builds the fusion
    (Session.build_fusion in the build worker): the fused sequence timed against the
    captured one, validated on what is live after the range, and a History row that is a
    fusion — PASS, y named as not compared, the fused launch's time against the pair's."""
    import asyncio

    from textual.widgets import DataTable, Input, TextArea

    from kerncap_tui.app import KerncapApp
    from kerncap_tui.messages import SourceChanged
    from kerncap_tui.screens.fuse_screen import FuseScreen
    from kerncap_tui.widgets.history_pane import HistoryPane
    from kerncap_tui.widgets.profile_pane import ProfilePane
    from kerncap_tui.widgets.source_pane import SourcePane

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    res, report, _ = pipeline(seqs, testapps_build)
    repro = copy_of(res, tmp_path)

    async def run():
        app = KerncapApp(repro)
        async with app.run_test(size=(160, 44)) as pilot:
            await settle(pilot)
            profile = app.query_one(ProfilePane)
            table = profile.query_one(DataTable)
            table.focus()
            for row in (2, 3):
                table.move_cursor(row=row)
                await settle(pilot)
                await pilot.press("m")
            assert profile.marked == (2, 3), (profile.marked, log_text(app))
            await pilot.press("F")
            await settle(pilot)
            assert isinstance(app.screen, FuseScreen), f"no fusion dialog; the log:\n{log_text(app)}"
            app.screen.query_one("#fuse-name", Input).value = "pair"
            await pilot.press("enter")
            await settle(pilot)
            source = app.query_one(SourcePane)
            d = repro / "fusions" / "pair"
            assert source.fusion == "pair" and source.path == d / "fused.cu", (source.fusion, source.path,
                                                                               log_text(app))
            config = json.loads((d / "fusion.json").read_text())
            body, names = _fused_body(config, report)
            editor = source.query_one(TextArea)
            assert "  // TODO: the work of the replaced launches\n" in editor.text, editor.text
            editor.load_text(editor.text.replace("  // TODO: the work of the replaced launches\n", body))
            source.action_save()
            app.post_message(SourceChanged(source.path))  # what the watchdog posts (also without inotify)
            await pilot.pause(0.6)  # the debounce
            for _ in range(600):  # compile, baseline, interleaved timing, validation, per-launch times
                await settle(pilot)
                said = log_text(app)
                if len(app.session.history.variants) >= 2 or "build: " in said or "replay could not run" in said:
                    break
                await pilot.pause(0.5)
            log = log_text(app)
            history = app.session.history
            assert len(history.variants) == 2, f"no History row after the save; the log:\n{log}"
            base, v = history.variants
            f = v.fusion
            print(f"baseline {base.median_ms:.4f} ms {base.launch_ms}\nv1 {v.median_ms:.4f} ms {v.launch_ms} "
                  f"validation {v.validation} {v.validation_detail}; speedup {v.speedup} "
                  f"[{v.speedup_low}, {v.speedup_high}]\nfusion {f}\n{api.fusion_phrase(v)}")
            assert v.validation == "pass", f"{v.validation} {v.note}\n{log}"
            assert f is not None and (f["name"], f["first"], f["last"]) == ("pair", 2, 3), f
            assert [(e["name"], e["why"], e["address"]) for e in f["excluded"]] == [
                (names["y"], "inferred", report["y"])], f
            assert f["fused_ms"] > 0 and f["replaced_ms"] > 0, f
            assert len(v.launch_ms) == len(PIPELINE_KERNELS) - 1 and v.cubin == "variants/fuse-pair.json"
            assert v.speedup_low is not None and v.speedup_low <= v.speedup <= v.speedup_high
            pane = app.query_one(HistoryPane)
            cells = [str(c) for c in pane.query_one(DataTable).get_row_at(1)]
            assert cells[1] == "v1" and cells[8] == "fused 2-3 pair" and "(was " in cells[9], cells
            status = str(pane.query_one("#history-status").content)
            assert f"not compared: {names['y']}" in status, status
            assert f"not compared: {names['y']}" in log or f"{names['y']} (inferred)" in log, log

    asyncio.run(run())
