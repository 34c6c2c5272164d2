"""The CPU side of the paths issue 44 named, on REAL small captures made on the H200 by
tests/gpu/make_small_fixtures.py (docs/testing.md, fixtures): a sequence (seq_small:
seq_pipeline's NVTX range, 5 launches on 2 streams with a device copy, a fill and a host
copy), mapped host memory (hostmem_small: zero_copy_gather), a texture object over a
cudaArray (texture_small: tex_bilinear) and a Triton kernel (triton_small:
triton_autotune's kc_autotune_add, pruned). Each: `kerncap info` (text and --json) shows
what kind of capture it is, `list` lists it, pack/unpack round-trips it byte for byte,
prune without a GPU keeps what the launches reach, `dump` writes its pre/post states
(no GPU), the replay's address planner accepts it, and the sequence and the Triton
kernel validate byte-exact over the simulated replay core (tests/sequence_sim.py,
tests/replay_sim.py) with numpy kernels. Expected values come from each manifest (ids,
names, addresses), never typed here.

The file skips itself while a fixture directory is absent (unpack small_fixtures.tgz
into tests/fixtures/, as docs/testing.md says)."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "captures"
NAMES = ("seq_small", "hostmem_small", "texture_small", "triton_small")
_ABSENT = [n for n in NAMES if not (FIXTURES / n / "capture" / "manifest.json").is_file()]
if _ABSENT:
    pytest.skip(f"small real captures absent under tests/fixtures/captures/: {', '.join(_ABSENT)} "
                "(tests/gpu/make_small_fixtures.py makes them on the GPU machine)", allow_module_level=True)

from kerncap import api  # noqa: E402
from kerncap.cli import main  # noqa: E402
from kerncap.reproducer.format import Capture  # noqa: E402

SEQ, HOST, TEX, TRITON = (FIXTURES / n for n in NAMES)


def manifest(path: Path) -> dict:
    return json.loads((path / "capture" / "manifest.json").read_text())


def sequence_json(path: Path) -> dict:
    return json.loads((path / "capture" / "sequence.json").read_text())


def run_cli(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(list(args))
    return rc, capsys.readouterr().out


def info(capsys, path: Path) -> tuple[str, dict]:
    rc, text = run_cli(capsys, "info", str(path))
    assert rc == 0, text
    rc, out = run_cli(capsys, "info", "--json", str(path))
    assert rc == 0, out
    return text, json.loads(out)


def copy(path: Path, tmp_path: Path) -> Path:
    dst = tmp_path / path.name
    shutil.copytree(path, dst)
    return dst


def pointed_regions(params) -> set[int]:
    """Region ids the parameter words point into (manifest or sequence.json params)."""
    return {p["pointer"]["region"] for p in params if p.get("pointer")}


# -- every fixture ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_each_fixture_opens_with_every_payload_and_its_provenance(name):
    path = FIXTURES / name
    cap = Capture.open(path)
    cap.verify()  # every payload there, every hash right
    record = json.loads((path / "reproducer.json").read_text())
    stack = record["provenance"]
    assert stack["driver"] and "H200" in stack["gpu"]["name"]
    assert cap.provenance["interception"] == "entry points"


@pytest.mark.parametrize("name", NAMES)
def test_list_names_each_fixture_with_its_kind_and_sizes(name, tmp_path, capsys):
    path = FIXTURES / name
    cap = Capture.open(path)
    rc, out = run_cli(capsys, "list", "--json", "--verify", "--workspace", str(tmp_path / "ws"), str(path))
    assert rc == 0, out
    (row,) = json.loads(out)
    assert row["payloads"] == "ok" and row["problems"] == [] and row["error"] is None
    assert row["logical"] == cap.logical_bytes
    assert row["mangled"] == manifest(path)["kernel"]["name"]
    if name == "seq_small":
        seq = sequence_json(path)
        assert row["sequence"]["launches"] == len(seq["launches"])
        assert row["sequence"]["kernels"] == len(seq["kernels"])
        assert row["sequence"]["streams"] == len(seq["streams"])
        assert row["sequence"]["steps"] == len(seq["steps"])
        assert row["kernel"].startswith(f"sequence ({seq['mode']}): {len(seq['launches'])} launches")
    else:
        assert row["sequence"] is None
        assert row["kernel"] == (cap.kernel.get("demangled") or cap.kernel["name"]).split("(")[0]


@pytest.mark.parametrize("name", NAMES)
def test_pack_and_unpack_round_trip_every_file_byte_for_byte(name, tmp_path):
    path = FIXTURES / name
    kcap = tmp_path / f"{name}.kcap"
    api.pack(path, kcap)
    out = tmp_path / "unpacked"
    api.unpack(kcap, out)
    files = {p.relative_to(path): p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    back = {p.relative_to(out): p for p in out.rglob("*") if p.is_file()}
    assert set(back) == set(files)
    for rel, p in files.items():
        assert back[rel].read_bytes() == p.read_bytes(), rel
    Capture.open(out).verify()


@pytest.mark.parametrize("name", NAMES)
def test_dump_writes_the_captured_pre_and_post_states_without_a_gpu(name, tmp_path):
    path = FIXTURES / name
    cap = Capture.open(path)
    written = {r.id for r in cap.regions if r.written}
    assert written, "each small capture's kernel writes a region"
    r = api.dump(path, [str(i) for i in sorted(written)], ("pre", "post"), output=tmp_path / "dump")
    by_region = {r.id: r for r in cap.regions}
    got = {(a.item, a.state) for a in r.arrays}
    assert got == {(f"region {i}", s) for i in written for s in ("pre", "post")}
    for a in r.arrays:
        region = by_region[int(a.item.split()[1])]
        raw = cap.read_bytes(region.pre if a.state == "pre" else region.post, region.size)
        data = np.load(a.path)
        assert data.tobytes() == raw, (a.item, a.state)
        assert (Path(a.path).parent / f"{a.item.replace(' ', '')}.json").is_file()  # the layout sidecar
    # the post state differs from the pre state in every written region (the kernels write)
    for i in written:
        reg = by_region[i]
        assert cap.read_bytes(reg.pre, reg.size) != cap.read_bytes(reg.post, reg.size), f"region {i}"


@pytest.mark.parametrize("name", ["hostmem_small", "texture_small", "triton_small"])
def test_the_replay_address_plan_places_every_region_and_avoids_host_ranges(name):
    from kerncap.replay.host_memory import plan_replay

    cap = Capture.open(FIXTURES / name)
    plan, host_ranges, device_backed = plan_replay(cap, 2 << 20)
    for r in cap.regions:
        assert any(sp.base <= r.base and r.base + r.size <= sp.end for sp in plan.spans), f"region {r.id}"
        assert any(b <= r.base and r.base + r.size <= b + s for b, s in plan.maps), f"region {r.id} unmapped"
    snap = cap.snapshotted_host_regions
    assert len(host_ranges) + len(device_backed) == len({h.id for h in snap}) or not snap
    for hr in host_ranges:  # a host range the spans must leave free
        assert all(hr.base + hr.size <= sp.base or sp.end <= hr.base for sp in plan.spans)


def test_the_sequence_address_plan_places_every_region():
    from kerncap.replay.plan import plan_address_space

    cap = Capture.open(SEQ)
    plan = plan_address_space(cap.regions, 2 << 20)
    for r in cap.regions:
        assert any(sp.base <= r.base and r.base + r.size <= sp.end for sp in plan.spans), f"region {r.id}"


# -- the sequence ----------------------------------------------------------------------------------


def test_info_shows_the_sequence_its_launches_and_steps(capsys):
    seq = sequence_json(SEQ)
    text, j = info(capsys, SEQ)
    names = [seq["kernels"][launch["kernel"]]["name"] for launch in seq["launches"]]
    assert [launch["mangled"] for launch in j["sequence"]["launches"]] == names
    assert [launch["stream"] for launch in j["sequence"]["launches"]] == [launch["stream_id"] for launch in seq["launches"]]
    ops: dict[str, int] = {}
    for st in seq["steps"]:
        key = f"copy {st['kind']}" if st["op"] == "copy" else st["op"]
        ops[key] = ops.get(key, 0) + 1
    assert j["sequence"]["steps"] == ops
    assert j["sequence"]["selection"]["nvtx"] == seq["selection"]["nvtx"]
    assert j["sequence"]["selection"]["instance"] == seq["selection"]["instance"]
    streams = len({launch["stream_id"] for launch in seq["launches"]})
    assert f"sequence    {len(names)} launches of {len(seq['kernels'])} kernels" in text
    assert f"on {streams} stream(s)" in text
    for k in seq["kernels"]:
        assert k["demangled"].split("(")[0] in text
    # every kernel of the window has its rebuildable entry (kernels/<id>/, the sources copied)
    for k in seq["kernels"]:
        assert (SEQ / "kernels" / str(k["id"]) / "reproducer.json").is_file()
        assert f"kernels/{k['id']} ({k['name']})" in text


def test_the_sequence_host_copy_payload_is_a_captured_chunk():
    cap = Capture.open(SEQ)
    h2d = [st for st in cap.sequence.steps if st.op == "copy" and st.kind == "h2d"]
    assert h2d, "seq_pipeline copies its bias from pageable host memory inside the window"
    blobs = set(cap.iter_blobs())
    for st in h2d:
        assert st.payload and all(h in blobs for h in st.payload if h)
        data = cap.read_bytes(list(st.payload), st.bytes)
        dst = cap.region_of(st.dst)
        assert dst is not None and len(data) == st.bytes


def test_sequence_prune_without_a_gpu_keeps_what_the_launches_and_memory_operations_reach(tmp_path, capsys):
    seq = sequence_json(SEQ)
    cap = Capture.open(SEQ)
    reached = set()
    for launch in seq["launches"]:
        reached |= pointed_regions(launch["params"])
    for st in cap.sequence.steps:
        if st.op in ("copy", "memset"):
            for addr in (st.dst, st.src) if st.op == "copy" else (st.dst,):
                r = cap.region_of(addr)
                if r is not None:
                    reached.add(r.id)
    every = {r.id for r in cap.regions}
    src = copy(SEQ, tmp_path)
    out = tmp_path / "pruned"
    rc, text = run_cli(capsys, "prune", "--no-validate", "--json", "-o", str(out), str(src))
    assert rc == 0, text
    report = json.loads(text)
    kept = {int(k) for k in report["reasons"]}
    assert kept == reached
    if reached == every:
        assert report["kept"] == "full"
    else:
        assert report["kept"] == "pruned" and report["regions_pruned"] == len(reached) < report["regions_full"]
        assert {r.id for r in Capture.open(out).regions} == reached
        Capture.open(out).verify()
    for rid, why in report["reasons"].items():
        assert why.startswith("launch ") or "copy" in why or "memset" in why or "fill" in why, (rid, why)
    # the source is untouched without --validate's swap
    assert {r.id for r in Capture.open(src).regions} == every


# The pipeline's kernels (testapps/cuda/seq_pipeline.cu), in numpy float32, over the
# simulated core's memory; n is each launch's last parameter.
def _seq_kernels():
    import sequence_sim as S

    def args(params: bytes, pointers: int):
        ptrs = list(struct.unpack_from(f"<{pointers}Q", params))
        (n,) = struct.unpack_from("<i", params, 8 * pointers)
        return ptrs, n

    def f32(mem, address, n, dtype=np.float32):
        item, off = mem.at(address)
        return np.frombuffer(memoryview(mem.s.target[item])[off:off + 4 * n], dtype=dtype)

    def sp_scale(mem, params):
        (x, tmp), n = args(params, 2)
        f32(mem, tmp, n)[:] = np.float32(2) * f32(mem, x, n) + np.float32(0.5)

    def sp_square(mem, params):
        (z, w), n = args(params, 2)
        f32(mem, w, n)[:] = f32(mem, z, n) * f32(mem, z, n)

    def sp_add(mem, params):
        (tmp, y), n = args(params, 2)
        f32(mem, y, n)[:] = f32(mem, tmp, n) + np.float32(1)

    def sp_combine(mem, params):
        (y, w, out), n = args(params, 3)
        f32(mem, out, n)[:] = f32(mem, y, n) + f32(mem, w, n)

    def sp_bias(mem, params):
        (out, bias, scratch), n = args(params, 3)
        b = f32(mem, bias, 1024)[np.arange(n) % 1024]
        s = (f32(mem, scratch, n, np.uint32) & np.uint32(0xF)).astype(np.float32)
        o = f32(mem, out, n)
        o[:] = o + (b + s)

    return S, {"_Z8sp_scalePKfPfi": sp_scale, "_Z9sp_squarePKfPfi": sp_square, "_Z6sp_addPKfPfi": sp_add,
               "_Z10sp_combinePKfS0_Pfi": sp_combine, "_Z7sp_biasPfPKfPKji": sp_bias}


def _simulated_sequence(tmp_path, monkeypatch, *, wrong: str | None = None) -> Path:
    S, kernels = _seq_kernels()
    names = {k["name"] for k in sequence_json(SEQ)["kernels"]}
    if names - set(kernels):
        pytest.fail(f"the fixture holds kernels the simulation does not know: {sorted(names - set(kernels))}")
    for name, fn in kernels.items():
        if name == wrong:
            def fn(mem, params, _fn=fn):  # noqa: E306 - one ulp-sized change after the real one
                _fn(mem, params)
                ptr = struct.unpack_from("<Q", params, 8)[0]
                item, off = mem.at(ptr)
                view = np.frombuffer(memoryview(mem.s.target[item])[off:off + 4], dtype=np.float32)
                view[0] = view[0] + np.float32(1)
        monkeypatch.setitem(S.SEQ_KERNELS, ("captured", name), fn)
    S.install(monkeypatch)
    monkeypatch.setattr("kerncap.replay.client.ReplayClient", S.SeqClient)
    return copy(SEQ, tmp_path)


def test_the_real_sequence_validates_byte_exact_over_the_simulated_core(tmp_path, monkeypatch):
    """Every step of the captured window (launches on two streams, the device copy, the
    fill, the host copy's payload) replayed in order from the captured pre-state gives the
    captured post-state bit for bit: the sequence's steps and payloads are what ran."""
    import sequence_sim as S

    repro = _simulated_sequence(tmp_path, monkeypatch)
    v = S.SeqClient(repro).validate()
    assert v.passed, [(c.name, c.mismatched_bytes) for c in v.regions if c.mismatched_bytes]
    cap = Capture.open(repro)
    assert {c.id for c in v.regions if c.kind == "region"} >= {r.id for r in cap.regions if r.written}


def test_a_wrong_launch_in_the_real_sequence_fails_on_what_it_wrote(tmp_path, monkeypatch):
    import sequence_sim as S

    repro = _simulated_sequence(tmp_path, monkeypatch, wrong="_Z6sp_addPKfPfi")
    cap = Capture.open(repro)
    (launch,) = [launch for launch in cap.sequence.launches if cap.sequence.kernel_of(launch.index).name == "_Z6sp_addPKfPfi"]
    y = launch.params[1].region
    v = S.SeqClient(repro).validate()
    assert not v.passed
    bad = {c.id for c in v.regions if c.kind == "region" and c.mismatched_bytes}
    assert y in bad  # sp_add's output (and what reads it later) differ


def test_info_of_a_fresh_sequence_lacks_nothing(capsys):
    _, j = info(capsys, SEQ)
    assert j["lacks"] == []


# -- mapped host memory -------------------------------------------------------------------------


def test_info_shows_the_snapshotted_host_region_and_the_pageable_word(capsys):
    m = manifest(HOST)
    text, j = info(capsys, HOST)
    assert m["host_regions"], "zero_copy_gather's table is mapped pinned host memory"
    assert [(h["id"], h["base"], h["size"], h["api"]) for h in j["host_regions"]] == \
        [(h["id"], h["base"], h["size"], h["api"]) for h in m["host_regions"]]
    assert all(h["snapshotted"] for h in j["host_regions"])
    assert "host regions (" in text
    for h in m["host_regions"]:
        assert f"{h['base']:#x}" in text
    # the table's parameter is the host region's device pointer
    device_ptrs = {h["device_pointer"] for h in m["host_regions"]}
    params = {int.from_bytes(bytes.fromhex(p["hex"]), "little") for p in j["params"] if p["size"] == 8}
    assert device_ptrs & params
    # the never-dereferenced pageable pointer is named outside the closure
    unresolved = m["closure"]["unresolved"]
    assert unresolved, "zero_copy_gather passes a pageable pointer it never dereferences"
    assert "outside the closure" in text
    for u in unresolved:
        assert f"parameter {u['param']} = {u['value']:#x}" in text
        assert any(w.startswith(f"parameter {u['param']} holds {u['value']:#x}") for w in j["warnings"])


def test_the_host_table_and_the_gather_agree_with_the_kernel(capsys):
    """gather_table: out[i] = table[idx[i]] * 2 + 1, table in host memory, idx managed."""
    cap = Capture.open(HOST)
    (table,) = cap.snapshotted_host_regions
    params = cap.params
    idx_r = cap.regions[[r.id for r in cap.regions].index(params[1].region)]
    out_r = cap.regions[[r.id for r in cap.regions].index(params[2].region)]
    (n,) = struct.unpack("<i", params[3].value)
    assert struct.unpack("<Q", params[0].value)[0] == table.device_pointer
    t = np.frombuffer(cap.read_bytes(table.pre, table.size), dtype=np.float32)
    idx = np.frombuffer(cap.read_bytes(idx_r.pre, idx_r.size), dtype=np.int32)[:n]
    out = np.frombuffer(cap.read_bytes(out_r.post, out_r.size), dtype=np.float32)[:n]
    assert np.array_equal(out, t[idx] * np.float32(2) + np.float32(1))
    assert not table.written and out_r.written


def test_the_host_range_is_planned_at_its_captured_address():
    from kerncap.replay.host_memory import plan_host_ranges, plan_replay

    cap = Capture.open(HOST)
    ranges = plan_host_ranges(cap.host_regions)
    for h in cap.snapshotted_host_regions:
        assert any(r.base <= h.base and h.base + h.size <= r.base + r.size for r in ranges), h.id
    _, host_ranges, backed = plan_replay(cap, 2 << 20)
    assert {r.index for r in host_ranges} | set(backed) == {r.index for r in ranges}


def test_host_memory_prune_keeps_the_device_regions_and_the_host_region(tmp_path, capsys):
    m = manifest(HOST)
    src = copy(HOST, tmp_path)
    rc, text = run_cli(capsys, "prune", "--no-validate", "--json", "-o", str(tmp_path / "pr"), str(src))
    assert rc == 0, text
    report = json.loads(text)
    assert {int(k) for k in report["reasons"]} == pointed_regions(m["params"])
    assert Capture.open(src).snapshotted_host_regions  # the host region stays in the reproducer


# -- the texture ------------------------------------------------------------------------------------


def test_info_shows_the_array_and_the_texture_object_its_argument_holds(capsys):
    m = manifest(TEX)
    text, j = info(capsys, TEX)
    assert len(m["arrays"]) == len(j["arrays"]) >= 1 and len(m["texture_objects"]) == len(j["texture_objects"]) >= 1
    assert "CUDA arrays (" in text and "texture and surface objects (" in text
    cap = Capture.open(TEX)
    (obj,) = cap.texture_objects
    assert obj.kind == "texture" and obj.restorable
    for p in obj.params:
        assert struct.unpack("<Q", cap.params[p].value)[0] == obj.handle
        assert cap.params[p].handle_object is not None
    assert f"texture object {obj.id}" in text
    (arr,) = cap.arrays
    assert f"{arr.width}x{arr.height}" in text
    assert m["texture_instructions"] == "texture"
    assert j["lacks"] == []


def test_the_captured_array_holds_the_apps_texels():
    """tex_bilinear fills its w x h array with ((i * 2654435761 + it * 40503) % 10007) / 1024
    (it = the dispatch) before each launch; w and h are the kernel's parameters 2 and 3."""
    cap = Capture.open(TEX)
    (arr,) = cap.arrays
    w, h = (struct.unpack("<i", cap.params[i].value)[0] for i in (2, 3))
    assert (arr.width, arr.height) == (w, h)
    dispatch = cap.provenance["dispatch_index"]
    texels = np.frombuffer(cap.read_bytes(arr.pre, arr.size), dtype=np.float32)
    i = np.arange(w * h, dtype=np.uint64)
    expect = ((i * np.uint64(2654435761) + np.uint64(dispatch * 40503))  # size_t arithmetic: no wrap
              % np.uint64(10007)).astype(np.float32) / np.float32(1024)
    assert np.array_equal(texels, expect)
    assert not arr.written


def test_texture_prune_keeps_the_output_region(tmp_path, capsys):
    m = manifest(TEX)
    src = copy(TEX, tmp_path)
    rc, text = run_cli(capsys, "prune", "--no-validate", "--json", "-o", str(tmp_path / "pr"), str(src))
    assert rc == 0, text
    assert {int(k) for k in json.loads(text)["reasons"]} == pointed_regions(m["params"])
    assert len(Capture.open(src).arrays) == len(m["arrays"])


# -- Triton -----------------------------------------------------------------------------------------


def test_info_and_the_spec_show_the_triton_kernel_its_signature_and_config(capsys):
    from kerncap.triton.pinned import load_spec

    m = manifest(TRITON)
    text, j = info(capsys, TRITON)
    spec = load_spec(TRITON)
    assert spec["kernel"] == m["kernel"]["name"] and spec["function"] in (TRITON / "source" / spec["source"]).read_text()
    assert list(spec["signature"]) == spec["arg_names"]
    constexprs = {c["name"]: c["value"]["value"] for c in spec["constexprs"]}
    assert set(constexprs) == set(spec["declared_constexprs"])
    assert {k for k, v in spec["signature"].items() if v == "constexpr"} == set(constexprs)
    record = j["reproducer"]
    assert record["sources"]["kind"] == "triton"
    assert record["sources"]["config"]["autotune_kwargs"] == spec["autotune_config"]["kwargs"]
    assert {k: v["value"] for k, v in spec["autotune_config"]["kwargs"].items()} == \
        {k: constexprs[k] for k in spec["autotune_config"]["kwargs"]}
    assert f"sources     triton: {record['sources']['translation_unit']}" in text
    assert hashlib.sha256(Capture.open(TRITON).cubin_path.read_bytes()).hexdigest() == spec["cubin_sha256"]
    # the pointer arguments are the manifest's pointer parameters, in order
    pointers = [n for n, t in spec["signature"].items() if t.startswith("*")]
    assert len(pointers) == len([p for p in m["params"] if p.get("pointer")])
    assert (TRITON / "reproducer.py").is_file()


def test_the_pruned_triton_capture_records_its_prune_and_adds_x_and_y():
    """kc_autotune_add: out = x + y over n elements, x, y, out inside one PyTorch segment."""
    from kerncap.triton.pinned import load_spec

    cap = Capture.open(TRITON)
    record = json.loads((TRITON / "reproducer.json").read_text())
    assert record["prune"]["kept"] == "pruned" and record["prune"]["validated"]
    assert record["prune"]["regions_pruned"] == len(cap.regions)
    spec = load_spec(TRITON)
    names = spec["arg_names"]
    ptr = {n: struct.unpack("<Q", cap.params[i].value)[0] for i, n in enumerate(names[:3])}
    (n,) = struct.unpack("<i", cap.params[names.index("n_elements")].value)

    def f32(address, state):
        r = cap.region_of(address)
        raw = cap.read_bytes(r.pre if state == "pre" else r.post, r.size)
        off = address - r.base
        return np.frombuffer(raw[off:off + 4 * n], dtype=np.float32)

    x, y = f32(ptr["x_ptr"], "pre"), f32(ptr["y_ptr"], "pre")
    assert np.array_equal(f32(ptr["out_ptr"], "post"), x + y)
    assert not np.array_equal(f32(ptr["out_ptr"], "pre"), x + y)


def test_the_triton_capture_validates_byte_exact_over_the_simulated_core(tmp_path, monkeypatch):
    import replay_sim as sim
    from kerncap.triton.pinned import load_spec

    cap = Capture.open(TRITON)
    names = load_spec(TRITON)["arg_names"]
    x, y, out = (struct.unpack("<Q", cap.params[i].value)[0] for i in range(3))
    (n,) = struct.unpack("<i", cap.params[names.index("n_elements")].value)

    def add(_m, s):
        a = np.frombuffer(s.view(x, 4 * n), dtype=np.float32)
        b = np.frombuffer(s.view(y, 4 * n), dtype=np.float32)
        np.frombuffer(s.view(out, 4 * n), dtype=np.float32)[:] = a + b

    sim.install(monkeypatch)
    monkeypatch.setattr(sim, "KERNELS", {"captured": add})
    repro = copy(TRITON, tmp_path)
    with sim.InProcessClient(repro) as c:
        v = c.validate()
    assert v.passed, [(r.name, r.mismatched_bytes) for r in v.regions if r.mismatched_bytes]


def test_triton_prune_again_has_nothing_to_drop(tmp_path, capsys):
    src = copy(TRITON, tmp_path)
    rc, text = run_cli(capsys, "prune", "--no-validate", "--json", "-o", str(tmp_path / "pr"), str(src))
    assert rc == 0, text
    report = json.loads(text)
    assert report["kept"] == "full" and report["regions_full"] == len(Capture.open(src).regions)
