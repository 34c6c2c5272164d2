"""Property-based fuzzing (hypothesis) of the readers, starting from real committed H200
captures, a real pack and a real store: mutated manifests, reproducer.json, build.json,
store markers and objects, pack indexes and pack bytes. Each case must end in a result
or a KerncapError (never another exception, so never a traceback in the CLI), write
nothing outside its target directory and finish within a few seconds. The number of
cases is printed at the end of the run (tests/conftest.py)."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import struct
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import FUZZ_CASES, FUZZ_SEED
from hostile import read_pack as read_frames
from hostile import write_pack
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from kerncap import api
from kerncap.core.schema import check
from kerncap.errors import KerncapError
from kerncap.recompile import trust
from kerncap.recompile.cuda import _load_build
from kerncap.reproducer.format import Capture
from kerncap.reproducer.listing import describe_reproducer
from kerncap.reproducer.pack import _HEADER, INDEX_NAME
from kerncap.reproducer.payloads import check_payloads
from kerncap.reproducer.schemas import (
    BUILD_JSON,
    MANIFEST,
    PACK_INDEX,
    PROFILE,
    REPRODUCER_JSON,
    SET_JSON,
    SET_VARIANT_JSON,
    STORED_JSON,
)
from kerncap.reproducer.sets import expand, member_cubins
from kerncap.reproducer.store import Store, compress
from texture_capture import make_texture_capture, texture_manifest

ROOT = Path(__file__).resolve().parent.parent
AXPY = ROOT / "tests" / "fixtures" / "captures" / "axpy_small"
DEMO = ROOT / "kerncap_tui" / "demo" / "reproducer"
HANG_S = 10  # a case slower than this is a hang

FUZZ = settings(deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large, HealthCheck.filter_too_much])
EXPLORE = settings(FUZZ, derandomize=False)


def fuzz(max_examples: int, **strategies):
    """`@settings(FUZZ, max_examples=N) @given(**strategies)`, twice over one body: the test
    itself runs the regression corpus (derandomized: the same cases every run, so a case
    that once failed is tried again) and its twin `<name>_explore`, defined beside it,
    cases of this run's seed (conftest.FUZZ_SEED, printed; KERNCAP_FUZZ_SEED=N repeats a
    run). Half the cases each: a run tries as many as the corpus alone did."""
    def deco(body):
        corpus = settings(FUZZ, max_examples=max_examples - max_examples // 2)(given(**strategies)(body))
        explore = seed(FUZZ_SEED)(settings(EXPLORE, max_examples=max_examples // 2)(given(**strategies)(body)))
        sys._getframe(1).f_globals[f"{body.__name__}_explore"] = explore  # collected like any test
        return corpus
    return deco

# Values a hostile or damaged file may hold anywhere.
SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.sampled_from([0, -1, 1, 2**31, 2**32, 2**63, 2**64, 2**44 + 1, 4096, 4194304])
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from(["", "..", "../../etc/passwd", "/etc/passwd", "cubins/x.cubin", "0" * 16,
                              "zz", "00ff", "/dev/zero", "a" * 300]))


def _schema_keys() -> list[str]:
    """Every field name the readers know: mutations add these, so optional fields absent
    from the real files get fuzzed too."""
    from kerncap.core.schema import List, Map, Obj, OneOf, Opt
    from kerncap.reproducer import schemas

    keys, seen = set(), set()

    def walk(node):
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, Obj):
            for name, _, kind in node.fields:
                keys.add(name)
                walk(kind)
        elif isinstance(node, (List,)):
            walk(node.item)
        elif isinstance(node, Map):
            walk(node.value)
        elif isinstance(node, Opt):
            walk(node.inner)
        elif isinstance(node, OneOf):
            for o in node.options:
                walk(o)
    for value in vars(schemas).values():
        walk(value)
    return sorted(keys)


KEYS = st.sampled_from(_schema_keys()) | st.text(max_size=6)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
                    max_leaves=6)


@contextmanager
def no_hang(seconds: int = HANG_S):
    def alarm(signum, frame):
        raise TimeoutError(f"a fuzz case ran longer than {seconds} s (a hang)")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def counted(name: str):
    FUZZ_CASES[name] = FUZZ_CASES.get(name, 0) + 1


def paths_of(doc, prefix=(), out=None, limit=400):
    """Every (container path) in a JSON document, for mutations to aim at."""
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    out.append(prefix)
    if isinstance(doc, dict):
        for k, v in doc.items():
            paths_of(v, (*prefix, k), out, limit)
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:8]):
            paths_of(v, (*prefix, i), out, limit)
    return out


def _schema_at(schema, path):
    """The schema node describing the value at `path` (None when the path leaves it)."""
    from kerncap.core.schema import List, Map, Obj, OneOf, Opt

    node = schema
    for key in path:
        while isinstance(node, (Opt, OneOf)):
            node = node.inner if isinstance(node, Opt) else next(
                (o for o in node.options if isinstance(o, (Obj, List, Map))), None)
        if isinstance(node, Obj) and isinstance(key, str):
            node = next((kind for name, _, kind in node.fields if name == key), None)
        elif isinstance(node, List) and isinstance(key, int):
            node = node.item
        elif isinstance(node, Map):
            node = node.value
        else:
            return None
    while isinstance(node, Opt):
        node = node.inner
    return node


_FROM_SCHEMA: dict[int, st.SearchStrategy] = {}


def from_schema(node) -> st.SearchStrategy:
    """Values shaped like what `node` declares, every part of them possibly wrong: the
    fuzzer reaches fields that must be nested several levels deep to matter."""
    from kerncap.core.schema import Any_, Bool, Int, List, Map, Num, Obj, OneOf, Opt, Str

    if node is None or isinstance(node, Any_):
        return JSON
    if id(node) in _FROM_SCHEMA:
        return _FROM_SCHEMA[id(node)]
    if isinstance(node, Obj):
        s = st.fixed_dictionaries({}, optional={name: st.deferred(lambda k=kind: from_schema(k))
                                                for name, _, kind in node.fields})
    elif isinstance(node, List):
        s = st.lists(st.deferred(lambda: from_schema(node.item)), max_size=3)
    elif isinstance(node, Map):
        s = st.dictionaries(st.text(max_size=6), st.deferred(lambda: from_schema(node.value)), max_size=3)
    elif isinstance(node, Opt):
        s = st.none() | st.deferred(lambda: from_schema(node.inner))
    elif isinstance(node, OneOf):
        s = st.one_of([from_schema(o) for o in node.options])
    elif isinstance(node, Int):
        lo, hi = node.min if node.min is not None else -(2**40), node.max if node.max is not None else 2**40
        s = st.integers(lo, hi) | st.sampled_from([lo, hi, lo - 1, hi + 1])
    elif isinstance(node, Num):
        s = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10, 10)
    elif isinstance(node, Bool):
        s = st.booleans()
    elif isinstance(node, Str) and node.choices:
        s = st.sampled_from(list(node.choices))
    else:
        s = st.text(max_size=12) | st.sampled_from(["0123456789abcdef", "cubins/a.cubin", "sm_90", "/usr/bin/g++"])
    s = s | SCALARS  # and sometimes the wrong kind altogether
    _FROM_SCHEMA[id(node)] = s
    return s


def mutate(data, doc, schema=None):
    """1-3 mutations of a deep copy of `doc`: delete a key or item, replace a value with
    arbitrary JSON, wrap it in a list, or add a key (one the schema knows at that place,
    mostly). Target paths are drawn depth first, so shallow fields get their share."""

    original, doc = doc, copy.deepcopy(doc)
    for n in range(data.draw(st.integers(1, 3), label="mutations")):
        # A field, not a path, is drawn first: the many regions, chunks and params of a
        # capture must not crowd out the one field that matters.
        fields, shapes = _shapes(original) if n == 0 else _fields(doc)
        shape = data.draw(st.sampled_from(fields), label="field")
        path = data.draw(st.sampled_from(shapes[shape]), label="path")
        if not path:
            if data.draw(st.integers(0, 9), label="whole?") == 0:
                doc = data.draw(JSON, label="whole")
            elif isinstance(doc, dict):
                name = _new_key(data, schema, ())
                doc[name] = data.draw(_value_for(schema, (name,)), label="value")
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        op = data.draw(st.sampled_from(["delete", "replace", "replace", "wrap", "add"]), label="op")
        if op == "add" and isinstance(parent[key], dict):
            name = _new_key(data, schema, path)
            parent[key][name] = data.draw(_value_for(schema, (*path, name)), label="value")
        elif op == "add" and isinstance(parent, list):
            parent.insert(key, data.draw(_value_for(schema, path), label="value"))
        elif op == "add":
            name = _new_key(data, schema, path[:-1])
            parent[name] = data.draw(_value_for(schema, (*path[:-1], name)), label="value")
        elif op == "delete":
            del parent[key]
        elif op == "replace":
            parent[key] = data.draw(_value_for(schema, path), label="value")
        else:
            parent[key] = [parent[key]]
    return doc


def _fields(doc) -> tuple[list[tuple], dict[tuple, list[tuple]]]:
    """The fields of `doc` (its paths with list indexes as "*"), sorted, and each one's paths."""
    shapes: dict[tuple, list[tuple]] = {}
    for p in paths_of(doc):
        shapes.setdefault(tuple("*" if isinstance(k, int) else k for k in p), []).append(p)
    return sorted(shapes, key=repr), shapes


_SHAPES: dict[int, tuple] = {}


def _shapes(doc) -> tuple[list[tuple], dict[tuple, list[tuple]]]:
    """`_fields` of an unmutated document (the module's constant originals), computed once:
    the first mutation of every case draws from the same fields (a third of a manifest
    case's time was recomputing them, issue 44)."""
    if id(doc) not in _SHAPES:
        _SHAPES[id(doc)] = (doc, *_fields(doc))  # the doc held: its id is never reused
    return _SHAPES[id(doc)][1:]


def _value_for(schema, path) -> st.SearchStrategy:
    return from_schema(_schema_at(schema, path)) if schema is not None else JSON


def _new_key(data, schema, path) -> str:
    from kerncap.core.schema import Obj

    node = _schema_at(schema, path) if schema is not None else None
    if isinstance(node, Obj) and data.draw(st.integers(0, 3), label="known key?"):
        return data.draw(st.sampled_from([name for name, _, _ in node.fields]), label="known key")
    return data.draw(KEYS, label="new key")


def listing(root: Path) -> set[str]:
    """Every path below root, relative to it (what rglob("*") gives: links listed, not
    followed). os.scandir with the relative prefix carried along, not rglob or os.walk:
    two listings a case were 45 % of test_fuzz_manifest's time with rglob's Path objects,
    and still 30 % with os.walk's relpath per directory (issue 44)."""
    out = set()
    stack = [("", os.fspath(root))]
    while stack:
        prefix, path = stack.pop()
        with os.scandir(path) as entries:
            for e in entries:
                out.add(prefix + e.name)
                if e.is_dir(follow_symlinks=False):
                    stack.append((prefix + e.name + os.sep, e.path))
    return out


def rewrite(path: Path, data: str | bytes) -> None:
    """`path` holding `data`, as a new file with the old one's permission bits: ext4 writes
    back a file truncated and rewritten when it is closed (auto_da_alloc), 4 ms a write
    on the development machine against 0.2 ms for a new file, and each case writes and
    restores a file (issue 44)."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    path.unlink(missing_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    if mode is not None:
        os.chmod(path, mode)


def assert_only_kerncap_errors(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except KerncapError as exc:
        assert exc.message and isinstance(exc.message, str)
        return exc


# -- the capture manifest ------------------------------------------------------------------------


def _with_host_memory(m: dict) -> dict:
    """Synthetic: the axpy manifest with a snapshotted host region, an older kerncap's
    host region and a closure record (issue 25), so their fields are fuzzed too."""
    m = copy.deepcopy(m)
    pre, post = m["regions"][0]["pre"], m["regions"][1]["post"]
    m["host_regions"] = [
        {"id": 0, "base": 0x7E00_0000_0000, "size": 16384, "api": "cuMemHostAlloc", "flags": 2,
         "device_pointer": 0x7E00_0000_0000, "snapshotted": True, "written": True, "zero_fraction": 0.0,
         "pre": pre, "post": post},
        {"id": 1, "base": 0x7E00_0010_0000, "size": 4096, "api": "cuMemHostRegister_v2"},
    ]
    m["closure"] = {"words_checked": 2, "unresolved": [{"param": 1, "at": 0, "value": 0x7F99_0000_0000,
                                                        "reason": "host memory kerncap does not capture"}]}
    m["params"][1]["host_pointers"] = [{"at": 0, "host_region": 0, "offset": 16}]
    return m


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz-ws")
    for name, src in (("axpy", AXPY), ("demo", DEMO), ("axpy+host", AXPY)):
        shutil.copytree(src, root / name)
    make_texture_capture(root / "textures")  # synthetic: arrays and texture objects (tests/texture_capture.py)
    (root / "axpy+host" / "capture" / "manifest.json").write_text(json.dumps(MANIFESTS["axpy+host"]))
    return root


MANIFESTS = {name: json.loads((src / "capture" / "manifest.json").read_text()) for name, src in
             (("axpy", AXPY), ("demo", DEMO))}
MANIFESTS["textures"] = texture_manifest()
MANIFESTS["axpy+host"] = _with_host_memory(MANIFESTS["axpy"])


@fuzz(2500, data=st.data(), which=st.sampled_from(sorted(MANIFESTS)))
def test_fuzz_manifest(workspace, data, which):
    repro = workspace / which
    before = listing(workspace)
    manifest = mutate(data, MANIFESTS[which], MANIFEST)
    path = repro / "capture" / "manifest.json"
    try:
        rewrite(path, json.dumps(manifest))
        with no_hang():
            cap = assert_only_kerncap_errors(Capture.open, repro)
            if isinstance(cap, Capture):
                summary = assert_only_kerncap_errors(api.info, repro)
                if isinstance(summary, dict):
                    assert isinstance(api.format_info(summary), str)
                    json.dumps(summary)
                check_payloads(cap)
                small = [r for r in cap.regions if r.size <= 1 << 20]
                if small:
                    assert_only_kerncap_errors(cap.read_bytes, small[0].pre, small[0].size)
            row = describe_reproducer(repro)
            assert "kerncap bug" not in (row["error"] or ""), row["error"]
    finally:
        rewrite(path, json.dumps(MANIFESTS[which]))
    assert listing(workspace) == before
    counted("manifest")


@fuzz(600, data=st.data())
def test_fuzz_manifest_raw_bytes(workspace, data):
    """Byte-level damage: truncation, flipped bytes, garbage."""
    repro = workspace / "axpy"
    path = repro / "capture" / "manifest.json"
    raw = (AXPY / "capture" / "manifest.json").read_bytes()
    cut = data.draw(st.integers(0, len(raw)), label="cut")
    damaged = bytearray(raw[:cut] if data.draw(st.booleans(), label="truncate") else raw)
    for _ in range(data.draw(st.integers(0, 4), label="flips")):
        if damaged:
            i = data.draw(st.integers(0, len(damaged) - 1), label="at")
            damaged[i] = data.draw(st.integers(0, 255), label="byte")
    try:
        rewrite(path, bytes(damaged))
        with no_hang():
            cap = assert_only_kerncap_errors(Capture.open, repro)
            if isinstance(cap, Capture):
                assert_only_kerncap_errors(api.info, repro)
    finally:
        rewrite(path, raw)
    counted("manifest bytes")


# -- reproducer.json and build.json ---------------------------------------------------------------

RECORD = json.loads((AXPY / "reproducer.json").read_text())
BUILD = json.loads((DEMO / "source" / "build.json").read_text())


@fuzz(900, data=st.data())
def test_fuzz_reproducer_json(workspace, data):
    path = workspace / "axpy" / "reproducer.json"
    try:
        rewrite(path, json.dumps(mutate(data, RECORD, REPRODUCER_JSON)))
        with no_hang():
            summary = assert_only_kerncap_errors(api.info, workspace / "axpy")
            if isinstance(summary, dict):
                assert isinstance(api.format_info(summary), str)
            assert_only_kerncap_errors(api.list_reproducers, workspace / "none", [workspace / "axpy"])
    finally:
        rewrite(path, json.dumps(RECORD))
    counted("reproducer.json")


@fuzz(900, data=st.data())
def test_fuzz_build_json(workspace, data):
    """source/build.json is read and its flags reviewed (the compiler is never run here)."""
    path = workspace / "demo" / "source" / "build.json"
    try:
        rewrite(path, json.dumps(mutate(data, BUILD, BUILD_JSON)))
        with no_hang():
            build = assert_only_kerncap_errors(_load_build, workspace / "demo")
            if isinstance(build, dict):
                assert isinstance(trust.review(build["compile_command"][1:], workspace / "demo"), list)
    finally:
        rewrite(path, json.dumps(BUILD))
    counted("build.json")


@fuzz(600, flags=st.lists(st.text(max_size=20) | st.sampled_from(sorted(trust.VALUE_FLAGS)), max_size=6))
def test_fuzz_flag_review(tmp_path_factory, flags):
    problems = trust.review(flags, Path("/nonexistent/reproducer"))
    assert isinstance(problems, list) and all(isinstance(p, str) for p in problems)
    counted("compile flags")


# -- the store: marker and objects ----------------------------------------------------------------


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz-store")
    shutil.copytree(AXPY, root / "repro")
    api.store(root / "repro", root / "store")
    return root


@fuzz(900, data=st.data())
def test_fuzz_store_marker(stored, data):
    marker = stored / "repro" / "capture" / "stored.json"
    original = json.loads(marker.read_text())
    before = listing(stored)
    try:
        doc = mutate(data, original, STORED_JSON)
        doc_text = json.dumps(doc)
        if isinstance(doc, dict) and isinstance(doc.get("store"), str) and not doc["store"].startswith("/"):
            doc["store"] = str(stored / "elsewhere" / doc["store"][:20])  # never a relative path into the cwd
            doc_text = json.dumps(doc)
        rewrite(marker, doc_text)
        with no_hang():
            cap = Capture.open(stored / "repro")
            check_payloads(cap)
            assert_only_kerncap_errors(cap.verify)
    finally:
        rewrite(marker, json.dumps(original))
    assert listing(stored) == before
    counted("store marker")


@fuzz(900, data=st.data())
def test_fuzz_store_objects(stored, data):
    store = Store(stored / "store")
    objects = sorted(store.objects())
    victim = data.draw(st.sampled_from(objects), label="object")
    original = victim.read_bytes()
    damaged = bytearray(original)
    kind = data.draw(st.sampled_from(["flip", "truncate", "garbage", "append"]), label="kind")
    if kind == "flip" and damaged:
        i = data.draw(st.integers(0, len(damaged) - 1), label="at")
        damaged[i] ^= data.draw(st.integers(1, 255), label="mask")
    elif kind == "truncate":
        damaged = damaged[: data.draw(st.integers(0, len(damaged)), label="cut")]
    elif kind == "garbage":
        damaged = bytearray(data.draw(st.binary(max_size=256), label="garbage"))
    else:
        damaged += data.draw(st.binary(min_size=1, max_size=64), label="tail")
    try:
        rewrite(victim, bytes(damaged))
        with no_hang():
            cap = Capture.open(stored / "repro")
            result = assert_only_kerncap_errors(cap.verify)
            if kind in ("truncate", "garbage") and bytes(damaged) != original:
                assert isinstance(result, KerncapError), "a damaged store object was read as data"
    finally:
        rewrite(victim, original)
    counted("store objects")


# -- pack files -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz-pack")
    path = api.pack(AXPY, root / "axpy.kcap").path
    return path


def unpack_confined(pack: Path, work: Path) -> None:
    """Unpack into work/out: nothing may appear outside it, and what is inside must be
    plain files and directories."""
    before = {p.name for p in work.iterdir()}
    out = work / "out"
    with no_hang():
        result = assert_only_kerncap_errors(api.unpack, pack, out)
    after = {p.name for p in work.iterdir()}
    assert after - before <= {"out"}, f"unpack wrote outside its target: {after - before}"
    if not isinstance(result, KerncapError):
        for p in out.rglob("*"):
            assert not p.is_symlink() and (p.is_file() or p.is_dir()), p
            assert p.resolve().is_relative_to(out.resolve())
        Capture.open(out)
    else:
        assert not out.exists()
    shutil.rmtree(out, ignore_errors=True)


@fuzz(1300, data=st.data())
def test_fuzz_pack_index(packed, tmp_path_factory, data):
    work = tmp_path_factory.mktemp("u", numbered=True)
    index, frames = read_frames(packed)
    mutated = mutate(data, index, PACK_INDEX)
    if data.draw(st.booleans(), label="evil entry") and isinstance(mutated, dict) and isinstance(mutated.get("entries"), list):
        evil = data.draw(st.sampled_from(["../evil", "/tmp/evil", "a/../../evil", ".", "capture/../../x", "x\\y"]))
        kind = data.draw(st.sampled_from(["file", "dir", "symlink", "fifo", "hardlink"]))
        mutated["entries"].append({"path": evil, "type": kind, "size": 1, "xxh64": "0" * 16, "mode": 0o644,
                                   "mtime": 0, "target": "/etc/passwd"})
        frames = [*frames, (f"files/{evil}", compress(b"x"))]
    write_pack(work / "p.kcap", mutated, frames)
    unpack_confined(work / "p.kcap", work)
    shutil.rmtree(work, ignore_errors=True)
    counted("pack index")


@fuzz(700, data=st.data())
def test_fuzz_pack_bytes(packed, tmp_path_factory, data):
    work = tmp_path_factory.mktemp("b", numbered=True)
    raw = bytearray(packed.read_bytes())
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        op = data.draw(st.sampled_from(["flip", "truncate", "insert", "size"]), label="op")
        if op == "flip":
            i = data.draw(st.integers(0, len(raw) - 1), label="at")
            raw[i] ^= data.draw(st.integers(1, 255), label="mask")
        elif op == "truncate":
            raw = raw[: data.draw(st.integers(0, len(raw)), label="cut")]
        elif op == "insert":
            i = data.draw(st.integers(0, len(raw)), label="at")
            raw[i:i] = data.draw(st.binary(min_size=1, max_size=16), label="bytes")
        elif len(raw) > _HEADER.size + 12:  # a frame length field set to something huge
            raw[_HEADER.size + 2 + len(INDEX_NAME): _HEADER.size + 10 + len(INDEX_NAME)] = struct.pack(
                "<Q", data.draw(st.integers(0, 2**64 - 1), label="size"))
        if not raw:
            break
    rewrite(work / "p.kcap", bytes(raw))
    unpack_confined(work / "p.kcap", work)
    shutil.rmtree(work, ignore_errors=True)
    counted("pack bytes")


# -- a saved profile ------------------------------------------------------------------------------

PROFILE_DOC = json.loads((DEMO / "profile.json").read_text())


@fuzz(700, data=st.data())
def test_fuzz_profile(tmp_path_factory, data):
    doc = mutate(data, PROFILE_DOC, PROFILE)
    from kerncap.capture.profile import ProfileResult

    with no_hang():
        result = assert_only_kerncap_errors(ProfileResult.from_dict, doc, source="profile.json") \
            if isinstance(doc, dict) else None
    if isinstance(result, ProfileResult):
        check(result.to_dict(), PROFILE, "round trip")
    counted("profile")


# -- reproducer sets: set.json and a set variant --------------------------------------------------

BUCKET_DOC = {"kernel": "_Z12axpy_inplacefPKfPfi", "demangled": "axpy_inplace(float, float const*, float*, int)",
              "grid": [16, 1, 1], "block": [256, 1, 1], "shared_mem_bytes": 0, "scalars_known": True,
              "scalars": [{"index": 0, "size": 4, "hex": "0000003f"}, {"index": 3, "size": 4, "hex": "00100000"}],
              "launches": 30, "timed": 30, "total_ns": 3000000, "min_ns": 1, "max_ns": 3000000,
              "first_dispatch": 3, "captured_dispatch": 3, "capture_dir": "capture-3", "refused": None,
              "failed": False}
SET_DOC = {"format": "kerncap-set", "format_version": 1, "kernel": "_Z12axpy_inplacefPKfPfi", "demangled": "axpy",
           "match": {"pattern": "axpy", "mode": "substring"}, "mode": "dispatches", "dispatches": [3, 17],
           "command": ["./app"], "created": "2025-01-01T00:00:00+0000",
           "members": [{"index": 0, "dir": "members/0", "dispatch": 3, "weight": 0.75, "bucket": BUCKET_DOC,
                        "signature": "grid 16", "launches": 30, "time_ns": 3000000.0},
                       {"index": 1, "dir": "members/1", "dispatch": 17, "weight": 0.25, "bucket": None,
                        "signature": None, "launches": None, "time_ns": None}],
           "refused": [{"bucket": BUCKET_DOC, "signature": "grid 32", "launches": 0, "reason": "conditional"}],
           "buckets_total": 3, "dispatches_counted": 18, "times": "whole run", "coverage": 1.0, "notes": []}
SET_VARIANT_DOC = {"format": "kerncap-set-variant", "config": None, "created": "2025-01-01T00:00:00+0000",
                   "cubins": {"0": "members/0/capture/cubins/x.cubin", "1": "members/1/capture/cubins/x.cubin"}}


@pytest.fixture(scope="module")
def reproducer_set(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz-set") / "set"
    for k in (0, 1):
        shutil.copytree(AXPY, root / "members" / str(k))
    (root / "variants").mkdir()
    return root


@fuzz(600, data=st.data())
def test_fuzz_set_json(reproducer_set, data):
    """set.json and a set variant: what info, list, validate's expansion and replay read;
    nothing may name a path outside the set."""
    doc = mutate(data, SET_DOC, SET_JSON)
    variant = mutate(data, SET_VARIANT_DOC, SET_VARIANT_JSON)
    rewrite(reproducer_set / "set.json", json.dumps(doc))
    rewrite(reproducer_set / "variants" / "1.json", json.dumps(variant))
    before = listing(reproducer_set)
    with no_hang():
        summary = assert_only_kerncap_errors(api.set_info, reproducer_set)
        if isinstance(summary, dict):
            assert isinstance(summary.text(), str)  # what `kerncap info SET` prints
        s = assert_only_kerncap_errors(api.ReproducerSet.open, reproducer_set)
        if not isinstance(s, KerncapError):
            for m in s.members:
                assert m.path.resolve().is_relative_to(reproducer_set.resolve())
            cubins = assert_only_kerncap_errors(member_cubins, s, reproducer_set / "variants" / "1.json")
            if isinstance(cubins, list):
                assert all(c.resolve().is_relative_to(reproducer_set.resolve()) for c in cubins)
        assert_only_kerncap_errors(expand, [reproducer_set], None)
        assert_only_kerncap_errors(api.list_reproducers, reproducer_set / "none", [reproducer_set.parent])
    assert listing(reproducer_set) == before
    counted("set.json")


# -- a sequence capture (issue 29): sequence.json and a sequence variant --------------------------


@pytest.fixture(scope="module")
def sequence_repro(tmp_path_factory):
    import sequence_sim  # synthetic: tests/sequence_sim.py

    root = sequence_sim.synthetic_sequence(tmp_path_factory.mktemp("fuzz-seq") / "seq")
    (root / "variants").mkdir()
    (root / "variants" / "m.cubin").write_bytes(b"synthetic")
    return root


@fuzz(600, data=st.data())
def test_fuzz_sequence(sequence_repro, data):
    """sequence.json and a sequence variant: what Capture.open, info, pack's chunk list and
    the replay's program builder read; nothing a variant names may leave the reproducer."""
    import replay_sim

    from kerncap.replay.sequence_replay import build
    from kerncap.reproducer.schemas import SEQUENCE_JSON, SEQUENCE_VARIANT_JSON
    from kerncap.reproducer.sequence_variant import read_variant

    path = sequence_repro / "capture" / "sequence.json"
    original = path.read_text()
    doc = mutate(data, json.loads(original), SEQUENCE_JSON)
    variant = {"format": "kerncap-sequence-variant", "format_version": 1, "modules": {"0": "variants/m.cubin"}}
    vpath = sequence_repro / "variants" / "v.json"
    rewrite(vpath, json.dumps(mutate(data, variant, SEQUENCE_VARIANT_JSON)))
    before = listing(sequence_repro)
    try:
        rewrite(path, json.dumps(doc))
        with no_hang():
            cap = assert_only_kerncap_errors(Capture.open, sequence_repro)
            if isinstance(cap, Capture):
                summary = assert_only_kerncap_errors(api.info, sequence_repro)
                if isinstance(summary, dict):
                    assert isinstance(api.format_info(summary), str)
                list(cap.iter_blobs())
                v = assert_only_kerncap_errors(read_variant, sequence_repro, vpath, cap.sequence)
                if not isinstance(v, KerncapError):
                    for p in v.modules.values():
                        assert p.resolve().is_relative_to(sequence_repro.resolve())
                core = replay_sim.core_module()
                for name in ("SeqSpec", "SeqModuleSpec", "SeqStepSpec", "SeqGlobalSpec"):
                    setattr(core, name, replay_sim.Spec)
                items = [*cap.regions, *cap.globals]
                assert_only_kerncap_errors(build, core, cap, items, None, "streams")
    finally:
        rewrite(path, original)
    assert listing(sequence_repro) == before
    counted("sequence.json")


def test_fuzz_covered_ten_thousand_cases():
    """The fuzz tests of this module ask hypothesis for >= 10,000 cases in all. Whether
    they tried that many is checked at the end of the run, whatever the order
    (conftest.fuzz_shortfall: the run fails when every fuzz test passed with fewer)."""
    import sys

    budget = {name: fn._hypothesis_internal_use_settings.max_examples
              for name, fn in vars(sys.modules[__name__]).items()
              if name.startswith("test_fuzz_") and hasattr(fn, "_hypothesis_internal_use_settings")}
    assert len(budget) >= 10 and sum(budget.values()) >= 10_000, budget


@pytest.fixture(scope="module")
def fusion_repro(tmp_path_factory):
    import sequence_sim  # synthetic: tests/sequence_sim.py

    root = sequence_sim.synthetic_sequence(tmp_path_factory.mktemp("fuzz-fusion") / "seq")
    api.fuse_skeleton(root, 0, 1, "f")
    return root


@fuzz(400, data=st.data())
def test_fuzz_fusion_json(fusion_repro, data):
    """fusions/<name>/fusion.json (issue 29; MCP's fuse_skeleton and fuse_build read it): a
    hostile one gives a KerncapError or a description whose files stay inside the
    reproducer; reading it writes nothing."""
    from kerncap.reproducer.schemas import FUSION_JSON

    path = fusion_repro / "fusions" / "f" / "fusion.json"
    original = path.read_text()
    before = listing(fusion_repro)
    try:
        rewrite(path, json.dumps(mutate(data, json.loads(original), FUSION_JSON)))
        with no_hang():
            got = assert_only_kerncap_errors(api.fusion_info, fusion_repro, "f")
        if isinstance(got, dict):
            for key in ("source", "config"):
                if isinstance(got.get(key), str):
                    assert Path(got[key]).resolve().is_relative_to(fusion_repro.resolve()), got[key]
    finally:
        rewrite(path, original)
    assert listing(fusion_repro) == before
    counted("fusion.json")
