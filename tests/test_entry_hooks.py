"""libkerncap_entry.so, the preloaded entry-point interposer (native/capture/entry_hooks.cpp),
built here with the host compiler and driven over a stand-in libcuda
(tests/fixtures/entry_hooks/): every route an app takes to a driver call (cuGetProcAddress
as cudart uses it, dlsym as Triton does, the PLT of code linked against libcuda, a
versioned libcuda path, an old cuGetProcAddress ABI) hands out kerncap's wrapper for a
watched call and the driver's own pointer for anything else; the attached dispatcher
sees CUPTI's callback data at entry and exit; the app's own interposers keep their
RTLD_NEXT. The real driver runs these paths in the GPU suite."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures" / "entry_hooks"))
import entry_build as B  # noqa: E402  (tests/fixtures/entry_hooks/entry_build.py)
from bench_module import load_bench  # noqa: E402

FIX, SRC, HEADERS, CXX, CC = B.FIX, B.SRC, B.HEADERS, B.CXX, B.CC
pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and HEADERS and CXX and CC),
    reason="needs Linux, a C/C++ compiler and the CUDA / CUPTI headers (toolkit or Triton's wheel)",
)
_run = B.run


def _build(cmd: list[str]) -> None:
    try:
        B.build(cmd)
    except B.BuildError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("entry")
    try:
        entry = B.entry_library(d)
        drv = B.fake_driver(d / "drv")
    except B.BuildError as exc:
        pytest.fail(str(exc))
    common = [CXX, "-std=c++17", "-O1", f"-I{HEADERS}", str(FIX / "probe_app.cpp")]
    _build([*common, "-o", str(d / "probe"), f"-L{drv}", "-lcuda", f"-Wl,-rpath,{drv}", "-ldl"])
    _build([*common, "-DNO_PLT", "-o", str(d / "probe_dlopen"), "-ldl"])
    _build([CC, "-shared", "-fPIC", str(FIX / "wrap_puts.c"), "-o", str(d / "libwrap_puts.so"), "-ldl"])
    return {"dir": d, "entry": entry, "drv": drv}


def _watched_in_fake() -> int:
    """How many of the watched calls (watched_list.hpp) the stand-in driver defines."""
    watched = set(re.findall(r"X\((\w+),", (SRC / "watched_list.hpp").read_text()))
    # Not the calls only the stress and sampled-profile builds define (KC_FAKE_QUIESCE / _EVENTS).
    text = re.sub(r"#ifdef KC_FAKE_\w+\n/\* Built with.*?\n#endif\n", "", (FIX / "fake_libcuda.c").read_text(), flags=re.S)
    defined = set(re.findall(r"^CUresult (\w+)\(", text, re.M))
    return len(watched & defined)


def _preloaded(built, *extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join([str(built["entry"]), *extra])
    return env


def _lines(out: str) -> dict[str, str]:
    return {k: v.strip() for k, v in (line.split(":", 1) for line in out.splitlines() if ":" in line)}


def _events(line: str) -> list[dict[str, str]]:
    out = []
    for item in line.split():
        name, site, cbid, *fields = item.split("/")
        out.append({"name": name, "site": site, "cbid": cbid, **dict(f.split("=", 1) for f in fields)})
    return out


def test_every_route_hands_the_wrapper_and_the_dispatcher_sees_cupti_shaped_calls(built):
    p = _run([str(built["dir"] / "probe")], env=_preloaded(built))
    assert p.returncode == 0, p.stdout + p.stderr
    out = _lines(p.stdout)
    assert out["attach"] == f"{_watched_in_fake()} entry points"  # those of the watched calls the stand-in has
    for check in ("dlsym cuGetProcAddress_v2 hooked", "cuGetProcAddress(itself) hooked", "cuMemAlloc wrapped",
                  "dlsym cuGetProcAddress hooked"):
        assert out[check] == "1", check
    assert out["cuMemAlloc result"] == "0 0x1000"  # the driver's own result, unchanged
    alloc = _events(out["alloc"])
    assert [(e["name"], e["site"], e["size"]) for e in alloc] == [("cuMemAlloc_v2", "enter", "4096"),
                                                                   ("cuMemAlloc_v2", "exit", "4096")]
    assert alloc[1]["ret"] == "0" and alloc[0]["ctx"] == "0xc0"  # the current context, as CUPTI gives it
    # The per-thread-stream variant maps to its own callback id, as CUPTI reports it.
    launch = _events(out["launch_ptsz"])
    assert [(e["name"], e["grid"]) for e in launch] == [("cuLaunchKernel_ptsz", "64")] * 2
    assert launch[1]["ret"] == "7" and out["launch_ptsz result"] == "7"
    assert launch[0]["cbid"] != alloc[0]["cbid"]
    # A call kerncap does not watch is the driver's own pointer, never dispatched.
    assert out["cuDeviceGet untouched"] == "1" and out["unknown"] == ""
    assert [e["name"] for e in _events(out["dlsym_route"])] == ["cuMemcpyHtoD_v2"] * 2
    assert _events(out["dlsym_route"])[0]["size"] == "12"
    assert out["old cuMemAlloc untouched"] == "1"  # an old ABI passes through
    # Host memory: the dispatcher sees what track_memory records (pointer, size, flags), at exit too.
    host = _events(out["host"])
    assert [(e["name"], e["site"]) for e in host] == [("cuMemHostAlloc", "enter"), ("cuMemHostAlloc", "exit"),
                                                      ("cuMemHostRegister_v2", "enter"),
                                                      ("cuMemHostRegister_v2", "exit")]
    assert (host[1]["size"], host[1]["flags"], host[1]["ptr"], host[1]["ret"]) == ("8192", "3", out["pinned"], "0")
    assert (host[3]["size"], host[3]["flags"], host[3]["ptr"]) == ("4096", "2", out["registered"])
    assert [(e["name"], e["size"]) for e in _events(out["plt"])] == [("cuMemAlloc_v2", "100")] * 2
    assert out["detached"] == ""  # detached: wrappers only forward
    assert out["driver calls"] == "6"  # every call reached the driver exactly once


def test_the_package_built_library_behaves_the_same(built):
    """The libkerncap_entry.so `pip install .` built (CMake's flags), where there is one."""
    from kerncap.core.native import entry_library
    from kerncap.errors import KerncapError

    try:
        lib = entry_library()
    except KerncapError:
        lib = None
    if lib is None:
        pytest.skip("kerncap was installed without its native parts")
    p = _run([str(built["dir"] / "probe")], env={**os.environ, "LD_PRELOAD": str(lib)})
    assert p.returncode == 0, p.stdout + p.stderr
    out = _lines(p.stdout)
    assert out["attach"] == f"{_watched_in_fake()} entry points" and out["cuMemAlloc wrapped"] == "1"
    assert [e["name"] for e in _events(out["plt"])] == ["cuMemAlloc_v2"] * 2
    assert out["driver calls"] == "6"


def test_a_versioned_libcuda_path_is_interposed_too(built):
    """An app that dlopens libcuda by its versioned file name (no -lcuda)."""
    env = _preloaded(built)
    p = _run([str(built["dir"] / "probe_dlopen"), str(built["drv"] / "libcuda.so.580.65.06")], env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    out = _lines(p.stdout)
    assert out["attach"] == f"{_watched_in_fake()} entry points"
    # dlsym right after dlopen, before anything attached: still the hook (cudart's order)
    assert out["dlsym cuGetProcAddress_v2 hooked"] == "1" and out["cuGetProcAddress(itself) hooked"] == "1"
    assert out["cuMemAlloc wrapped"] == "1"
    assert [e["name"] for e in _events(out["alloc"])] == ["cuMemAlloc_v2"] * 2
    assert "plt" not in out


def test_the_apps_own_interposers_keep_rtld_next(built, tmp_path):
    src = tmp_path / "main.c"
    src.write_text('#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n')
    _build([CC, str(src), "-o", str(tmp_path / "main")])
    p = _run([str(tmp_path / "main")], env=_preloaded(built, str(built["dir"] / "libwrap_puts.so")))
    assert p.returncode == 0 and p.stdout == "[wrapped] hello\n", p.stdout + p.stderr


def test_a_process_without_cuda_runs_unchanged(built):
    """Preloaded into everything the app starts (Python, compilers): not a driver in sight."""
    code = "import ctypes, ctypes.util, json, sqlite3, decimal; print(ctypes.CDLL(ctypes.util.find_library('m')).abs(-3))"
    p = _run([sys.executable, "-c", code], env=_preloaded(built))
    assert p.returncode == 0 and p.stdout.strip() == "3", p.stderr
    exports = _run(["nm", "-D", "--defined-only", str(built["entry"])]).stdout if shutil.which("nm") else ""
    if exports:
        names = {line.split()[-1] for line in exports.splitlines()}
        assert {"dlsym", "cuGetProcAddress", "cuGetProcAddress_v2", "cuLaunchKernel", "kerncap_entry_attach"} <= names
        assert not [n for n in names if re.match(r"_Z|std", n)]  # no C++ runtime leaks into the app


def test_module_images_are_sized_by_their_format(tmp_path):
    """What entry-point capture keeps of each load, to load it again at the capture."""
    exe = tmp_path / "images"
    _build([CXX, "-std=c++17", "-O1", "-Wall", "-Werror", f"-I{HEADERS}", f"-I{SRC}", str(FIX / "images_app.cpp"),
            str(SRC / "module_images.cpp"), "-o", str(exe)])
    p = _run([str(exe)])
    assert p.returncode == 0, p.stderr
    assert _lines(p.stdout) == {
        "fatbin": "116 copied=1",  # header + fat size, copied: the app may free its buffer
        "elf": f"{512 + 5 * 64}",  # the section table's end
        "elf with data after its table": "1300",
        "jit": "kept=1 first=0 value=32 unmatched=17",  # CU_JIT_MAX_REGISTERS kept; GLOBAL_SYMBOL_NAMES (17) named
        "ptx": "31 of 30",  # with its NUL
        "wrapper": "borrowed=1",
        "find": "module=1 library=1 none=0",
        "after unload": "1",
    }


def _native_libs():
    from kerncap.core.native import entry_library, inject_library
    from kerncap.errors import KerncapError

    try:
        entry, inject = entry_library(), inject_library()
    except KerncapError:
        entry = inject = None
    if entry is None:
        pytest.skip("kerncap was installed without its native parts")
    return entry, inject


def _entry_env(built, entry: Path, out: Path, dispatch: int, **extra: str) -> dict[str, str]:
    """A capture of `target` through the entry points over the stand-in driver."""
    return {**os.environ, "LD_PRELOAD": str(entry), "LD_LIBRARY_PATH": str(built["drv"]), "KERNCAP_MODE": "capture",
            "KERNCAP_OUT": str(out), "KERNCAP_KERNEL": "target", "KERNCAP_DISPATCH": str(dispatch),
            "KERNCAP_KEEP_RUNNING": "1", "KERNCAP_INTERCEPT": "entry", **extra}


def _inject_run(built, tmp_path: Path, entry: Path, inject: Path, dispatch: int, threads: int = 0,
                launches: int = 0, stdout: list[str] | None = None, **extra: str) -> dict:
    """inject_app.c under the stand-in driver with the injection library attached to the
    entry points; its proc-<pid>.json (the app's stdout appended to `stdout`)."""
    exe = B.inject_app(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    env = _entry_env(built, entry, out, dispatch, **extra)
    p = _run([str(exe), str(inject), str(threads), str(launches)], env=env)
    assert p.returncode == 0 and "done" in p.stdout, p.stdout + p.stderr
    assert not (out / "capture.lock").exists() and not (out / "capture").exists()
    if stdout is not None:
        stdout.append(p.stdout)
    (report,) = out.glob("proc-*.json")
    return json.loads(report.read_text())


def test_the_injection_library_counts_through_the_entry_points(built, tmp_path):
    """libkerncap_inject.so (package-built) attached to the entry points over the stand-in
    driver: launches counted per kernel, the target's dispatches counted, the module's
    image recorded, no CUPTI subscriber, no error."""
    entry, inject = _native_libs()
    proc = _inject_run(built, tmp_path, entry, inject, dispatch=1000)
    assert proc["errors"] == []
    assert proc["interception"]["path"] == "entry points"
    assert proc["interception"]["images_seen"] == 1
    assert proc["interception"]["wrappers_handed"] >= 3  # cuMemAlloc, cuModuleLoadData, cuLaunchKernel
    assert proc["launches"] == 7
    assert proc["kernels_seen"] == {"target()": 5, "other()": 2}
    assert proc["target_matches"] == 5 and proc["captured"] is False


def test_a_capture_that_cannot_read_its_cubin_says_so_and_the_app_runs_on(built, tmp_path):
    """The stand-in driver has no cuFuncGetModule: reading the target's cubin fails at its
    dispatch. The failure is named, the quiesce lock is released (the app's later calls
    and exit go on), nothing half-written is left."""
    entry, inject = _native_libs()
    proc = _inject_run(built, tmp_path, entry, inject, dispatch=0)
    assert [e["kind"] for e in proc["errors"]] == ["capture_failed"]
    message = proc["errors"][0]["message"]
    assert "target() (dispatch 0) failed before the launch" in message and "cuFuncGetModule" in message
    assert proc["launches"] == 7 and proc["captured"] is False


def test_launches_from_many_threads_are_each_counted_once(built, tmp_path):
    """16 threads launching at once through the wrappers: every launch reaches the
    dispatcher exactly once (per-thread correlation ids, the shared function cache)."""
    entry, inject = _native_libs()
    proc = _inject_run(built, tmp_path, entry, inject, dispatch=10**9, threads=16, launches=20000)
    assert proc["errors"] == []
    assert proc["launches"] == 7 + 16 * 20000
    assert proc["kernels_seen"] == {"target()": 5 + 16 * 10000, "other()": 2 + 16 * 10000}
    assert proc["target_matches"] == 5 + 16 * 10000
    # The launch fast path counted the other kernel's launches: all but a thread's first
    # took it (the main thread's and, at most, each worker's: a worker that reuses an
    # exited one's slot finds the kernel in its table); the target's never do.
    assert proc["interception"]["launch_fast_path"] is True
    assert 5 + 16 * 10000 + 1 <= proc["interception"]["full_path_launches"] <= 5 + 16 * 10000 + 1 + 16


def test_the_fast_path_forgets_a_handle_when_its_module_is_unloaded(built, tmp_path):
    """A module unload may free a launch handle for another kernel (the stand-in names
    `other`'s handle "third" after cuModuleUnload): the launches that follow are counted
    for the new kernel, not for the one the fast path's table held that handle for."""
    entry, inject = _native_libs()
    proc = _inject_run(built, tmp_path, entry, inject, dispatch=10**9, threads=2, launches=1000, KC_APP_UNLOAD="300")
    assert proc["errors"] == []
    assert proc["kernels_seen"] == {"target()": 5 + 1000, "other()": 2 + 1000, "third()": 300}
    assert proc["launches"] == 7 + 2000 + 300
    # The first launch after the unload takes the full path (and re-arms the table).
    assert 5 + 1000 + 1 + 1 <= proc["interception"]["full_path_launches"] <= 5 + 1000 + 1 + 2 + 1


def test_an_armed_capture_asks_no_context_for_the_launches_it_does_not_take(built, tmp_path):
    """Capture mode resolves a launch's context only for the target's launches: the
    wrappers skip cuCtxGetCurrent on every other launch (a driver call per launch that the
    armed path paid for nothing, issue 31)."""
    entry, inject = _native_libs()
    out: list[str] = []
    proc = _inject_run(built, tmp_path, entry, inject, dispatch=10**9, threads=1, launches=20000, stdout=out)
    assert proc["errors"] == [] and proc["launches"] == 7 + 20000
    calls = int(_lines(out[0].replace("=", ":"))["ctx_calls"])
    assert calls < 1000, calls  # the allocations, the module load and the setup ask; 20,007 launches do not


def test_nvtx_ranges_reach_kerncap_as_its_own_nvtx_tool(built, tmp_path):
    """--nvtx through the entry points: NVTX_INJECTION64_PATH names the injection library,
    which is NVTX's tool itself (no CUPTI NVTX domain): only the target's launches inside
    step/layer.5 are selected; domains, registered strings and start/end ranges appear
    in the paths; NVTX gets sound return values (push depths, one handle per domain name,
    distinct range ids)."""
    entry, inject = _native_libs()
    exe = B.nvtx_app(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    env = _entry_env(built, entry, out, 1000, KERNCAP_NVTX="step/layer.5", NVTX_INJECTION64_PATH=str(inject))
    p = _run([str(exe), str(inject)], env=env)
    assert p.returncode == 0 and "done" in p.stdout, p.stdout + p.stderr
    assert "depths 0 1 0 domain_same=1 ids_distinct=1" in p.stdout
    (report,) = out.glob("proc-*.json")
    proc = json.loads(report.read_text())
    assert proc["errors"] == [] and proc["interception"]["path"] == "entry points"
    nvtx = proc["nvtx"]
    assert nvtx["calls_seen"] is True
    assert (nvtx["target_in_range"], nvtx["target_outside"]) == (3, 5)
    assert proc["target_matches"] == 3 and proc["launches"] == 8
    assert {"step/layer.4", "step/layer.5", "kc:attn", "epoch.1/epoch.2"} <= set(nvtx["paths"])


def test_graphs_through_the_entry_points(built, tmp_path):
    """Graph launches counted per target node from kerncap's model of the executable
    graph, whose edges carry data (a programmatic dependency, as XLA's command buffers'
    do: the driver fails a query that leaves the data out with CUDA_ERROR_LOSSY_QUERY,
    which kerncap used to refuse the graph with); the graphs CUPTI would have reported node
    by node (an explicit kernel node, a stream capture's graph) are found from the calls
    that make them, so a dispatch never reached says what those graphs did. A node added
    after instantiation is in neither the executable graph nor kerncap's model."""
    entry, inject = _native_libs()
    exe = B.graph_app(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    env = _entry_env(built, entry, out, 1000)
    p = _run([str(exe), str(inject)], env=env)
    assert p.returncode == 0 and "done" in p.stdout, p.stdout + p.stderr
    # The driver's answers reach the app unchanged (fake_libcuda.c says why each).
    assert "edges: added=0,0 lossy=402" in p.stdout  # CUDA_ERROR_LOSSY_QUERY for the 12.0 query
    assert "graph: launches=4 last_launch_nodes=3" in p.stdout  # the snapshot, not the 4-node graph
    assert "capture legacy: 900" in p.stdout  # CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    assert "capture: implicit=906 invalidated=901 graph=null" in p.stdout
    (report,) = out.glob("proc-*.json")
    proc = json.loads(report.read_text())
    assert [e["kind"] for e in proc["errors"]] == ["graph_unreached"], proc["errors"]
    assert proc["target_matches"] == 8  # 4 launches x 2 target nodes; the recorded launch is not a dispatch
    assert proc["not_counted"] == {"autotuner": 0, "recorded_into_graphs": 1}
    why = proc["errors"][0]["message"]
    assert "1 launch(es) of the target were recorded into CUDA graphs by stream capture" in why
    assert "2 CUDA graph(s) holding the target were built but never instantiated" in why
    assert "executable graph #1 ran 4 time(s) with 2 target node(s) per launch" in why


def test_arrays_and_texture_objects_are_tracked_through_the_entry_points(built, tmp_path):
    """CUDA arrays, a mipmapped array and its level, texture and surface objects made the
    way cudart makes them (entry points fetched by base name): the injection library's
    tracker holds what is live at exit, names the texture whose array was destroyed first,
    and keeps one entry for a handle value the driver handed out again."""
    entry, inject = _native_libs()
    exe = B.texture_app(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    p = _run([str(exe), str(inject)], env=_entry_env(built, entry, out, 1000))
    assert p.returncode == 0 and "done" in p.stdout, p.stdout + p.stderr
    assert "reused=1" in p.stdout, p.stdout
    (report,) = out.glob("proc-*.json")
    proc = json.loads(report.read_text())
    assert proc["errors"] == []
    arrays = proc["arrays"]
    # live: array a and mip level 1 (the 2-D array was destroyed); the mipmapped array;
    # textures over a, the freed array, the mipmap, the pitched memory and the reused handle
    assert (arrays["arrays"], arrays["mipmapped_arrays"]) == (2, 1)
    assert (arrays["textures"], arrays["surfaces"]) == (5, 1)
    assert arrays["destroyed"] == 2  # the 2-D array and one texture object
    handles = dict(kv.split("=") for kv in p.stdout.split("\n")[0].removeprefix("handles: ").split())
    (freed,) = arrays["freed_resources"]
    assert freed["kind"] == "texture" and str(freed["handle"]) == handles["gone"]
    assert "cuArrayDestroy" in freed["why"] and "before the dispatch" in freed["why"]


def test_a_capture_holds_every_other_launching_thread(built, tmp_path):
    """The quiescing rule (native/capture/quiesce.hpp) with 16 threads launching at once
    while the target's capture runs in one of them, over the stand-in built for it
    (fake_libcuda.c, KC_FAKE_QUIESCE): the capture holds the other threads from its
    target's entry through its drain (cuCtxSynchronize, 5 ms long there) to its last
    driver call, where it fails for want of a cubin and lets them go. The stand-in numbers
    every launch and those calls in one sequence: no launch of another thread was in the
    driver when the drain began, none took a number inside the window, and every launch
    reached the driver and kerncap's count exactly once."""
    entry, inject = _native_libs()
    drv = B.fake_driver(tmp_path / "drv-quiesce", quiesce=True)
    exe = B.inject_app(tmp_path)
    threads, each = 16, 20000
    total = 7 + threads * each  # the main thread's 5 + 2 launches, then the threads'
    for dispatch in (1000, 40000, 90000, 130000):  # early, middle and late in the threads' run
        out = tmp_path / f"run-{dispatch}"
        out.mkdir()
        env = {**_entry_env(built, entry, out, dispatch), "LD_LIBRARY_PATH": str(drv)}
        p = _run([str(exe), str(inject), str(threads), str(each)], env=env)
        assert p.returncode == 0 and "done" in p.stdout, p.stdout + p.stderr
        assert f"quiesce: drains=1 inflight_at_drain=0 launches_in_window=0 launches={total}" in p.stdout, p.stdout
        (report,) = out.glob("proc-*.json")
        proc = json.loads(report.read_text())
        assert proc["interception"]["launch_fast_path"] is True  # the other kernel's launches took it
        assert proc["launches"] == total
        assert proc["kernels_seen"] == {"target()": 5 + threads * each // 2, "other()": 2 + threads * each // 2}
        assert [e["kind"] for e in proc["errors"]] == ["capture_failed"]
        assert f"(dispatch {dispatch}) failed before the launch: no cubin" in proc["errors"][0]["message"]


def _bench_run(built, tmp_path: Path, dispatch: int, *args: str, **extra: str):
    entry, inject = _native_libs()
    exe = B.inject_app(tmp_path)
    out = tmp_path / f"run-{dispatch}-{len(extra)}"
    out.mkdir()
    p = _run([str(exe), str(inject), *args], env=_entry_env(built, entry, out, dispatch, **extra))
    reports = list(out.glob("proc-*.json"))
    return p, json.loads(reports[0].read_text()) if reports else None


def test_the_bench_switch_bypasses_the_dispatcher_only_where_allowed(built, tmp_path):
    """kerncap_bench_passthrough (bench/paired.py's switch): refused in a process not
    started with KERNCAP_BENCH_PASSTHROUGH=1; allowed, it flips the wrappers between the
    dispatcher and the driver in the ABBA order the app asks for, and only the launches
    of the armed blocks are counted."""
    p, _ = _bench_run(built, tmp_path, 10**9, "2", "4000", "8")
    assert p.returncode == 4 and "kerncap_bench_passthrough refused" in p.stdout, p.stdout + p.stderr

    p, proc = _bench_run(built, tmp_path, 10**9, "2", "4000", "8", KERNCAP_BENCH_PASSTHROUGH="1")
    assert p.returncode == 0 and "done" in p.stdout, p.stdout + p.stderr
    common = load_bench("common")
    blocks = common.parse_blocks(p.stdout)
    assert "".join(m for m, _ in blocks) == common.abba_order(8) == "appaappa"
    assert proc["interception"]["bench_passthrough"] is True and proc["errors"] == []
    # 2 threads x 4000 launches in 8 blocks, half of them armed: those were counted.
    assert proc["launches"] == 7 + 2 * 4000 // 2


def test_the_bench_decomposition_stops_the_dispatcher_where_asked(built, tmp_path):
    """KERNCAP_BENCH_SKIP (bench/paired.py's decomposition rows): `callback` returns before
    a launch is counted, `launch` and `quiesce` still count it, `fastpath` counts every
    launch through the full path. Each row decomposes the full path, so none has the
    launch fast path (it is inline in the wrapper, with no stopping points); without
    KERNCAP_BENCH_PASSTHROUGH=1 the variable is ignored."""
    counted, fast = {}, {}
    for skip in ("callback", "launch", "quiesce", "fastpath"):
        (tmp_path / skip).mkdir()
        p, proc = _bench_run(built, tmp_path / skip, 10**9, "2", "4000", "8", KERNCAP_BENCH_PASSTHROUGH="1",
                             KERNCAP_BENCH_SKIP=skip)
        assert p.returncode == 0 and "done" in p.stdout and proc["errors"] == [], p.stdout + p.stderr
        counted[skip] = proc["launches"]
        fast[skip] = proc["interception"]["launch_fast_path"]
    # the 7 set-up launches are armed too
    assert counted == {"callback": 0, "launch": 7 + 4000, "quiesce": 7 + 4000, "fastpath": 7 + 4000}
    assert fast == {"callback": False, "launch": False, "quiesce": False, "fastpath": False}
    p, proc = _bench_run(built, tmp_path, 10**9, "1", "100", KERNCAP_BENCH_SKIP="callback")
    assert p.returncode == 0 and proc["launches"] == 7 + 100, p.stdout + p.stderr


def test_a_bench_process_never_captures(built, tmp_path):
    """A process that may have bypassed the dispatcher cannot take a capture: its
    counts and tracked allocations may miss what ran past kerncap."""
    p, proc = _bench_run(built, tmp_path, 2, KERNCAP_BENCH_PASSTHROUGH="1")
    assert p.returncode == 0 and "done" in p.stdout, p.stdout + p.stderr
    assert [e["kind"] for e in proc["errors"]] == ["capture_failed"]
    assert "KERNCAP_BENCH_PASSTHROUGH=1 is set" in proc["errors"][0]["message"]
    assert proc["captured"] is False and proc["launches"] == 7


def _sampled_profile(built, tmp_path: Path, exe: Path, *args: str, **env: str):
    """`kerncap profile` (sampled timing, the engine's run_profile) of a stand-in app over
    the stand-in built for it (fake_libcuda.c, KC_FAKE_EVENTS: each launch advances its
    stream's clock by its kernel's duration, events stamp that clock)."""
    from kerncap.capture.profile import run_profile

    _native_libs()
    drv = tmp_path / "drv-events"
    if not drv.exists():
        B.fake_driver(drv, events=True)
    out: list[bytes] = []
    # The stand-in runs kerncap's empty kernel as a 1 us kernel: that is its own time here
    # (the default, 594 ns, is CUPTI's on the H200), so a sample loses nothing to it.
    env = {"KERNCAP_PROFILE_EMPTY_KERNEL_NS": "1000", **env}
    result = run_profile([str(exe), *args], env={"LD_LIBRARY_PATH": str(drv), **env},
                         output=lambda stream, data: out.append(data) if stream == "stdout" else None, timeout=120,
                         sampled=True)
    return result, b"".join(out).decode()


def _within(k, truth: float) -> None:
    """The estimate is within 4 standard errors (from its 90 % interval) of the truth."""
    sigma = (k.total_hi_ns - k.total_lo_ns) / 2 / 1.6449
    assert abs(k.total_ns - truth) <= 4 * sigma + 1e-4 * truth, (k.total_ns, truth, sigma)


def test_the_sampled_profile_counts_every_launch_and_times_a_sample(built, tmp_path):
    """Counting is exact and per thread (4 threads), timing covers a small sample (each
    thread times its first 32 launches of a kernel, then ever fewer), and the estimate
    lands on the stand-in's kernel durations: 5 us for target, 1 us for other."""
    entry, inject = _native_libs()
    exe = B.inject_app(tmp_path)
    result, out = _sampled_profile(built, tmp_path, exe, str(inject), "4", "50000")
    assert result.timing == "sampled" and result.cupti_finalized is None, result.warnings
    assert "records_while_capturing=0" in out and "waits_unheld=0" in out, out
    # pairs of kerncap's stamp kernels, not events (KERNCAP_PROFILE_TIMER=events: below):
    # none recorded, and none even made (a stamped pair takes none from the pool)
    assert "creates=0 records=0 " in out and int(re.search(r"stamps=(\d+)", out).group(1)) > 4 * 32, out
    kernels = {k.name: k for k in result.kernels}
    target, other = kernels["_Z6targetv"], kernels["_Z5otherv"]
    assert (target.calls, other.calls) == (5 + 4 * 25000, 2 + 4 * 25000)
    # The 4 threads launch into one stream (the null stream): a pair another thread's
    # launch may have landed in is left out, and said so (before, such pairs read up to
    # 1.8x long on this 2-core machine under load).
    (warning,) = [w for w in result.warnings if "1 stream(s) had timed launches from several threads" in w]
    left_out = int(re.search(r"; (\d+) timed launch\(es\) there were left out", warning).group(1))
    # A thread descheduled for over 5 ms while it held the stream (a loaded machine) loses
    # that sample to the watchdog: left out and, past 1 % of them, said so; never counted
    # wrong. How many depends on the load, so the test accepts any number and counts them.
    lost = [w for w in result.warnings if "could not be read (held over 5 ms, or unfinished at exit)" in w]
    assert len(result.warnings) == 1 + len(lost), result.warnings
    unread = sum(int(re.search(r"(\d+) of \d+ timed launches could not be read", w).group(1)) for w in lost)
    # a few hundred per thread (each times its first 32 launches, then ever fewer), not every launch
    assert 4 * 32 < target.timed + left_out + unread and target.timed < target.calls // 20, (target.timed, left_out)
    # Every timed launch took 5 us (1 us): exact but for one known race, open (docs/testing.md,
    # "Known open"): on 2026-12-04 one run in about twenty (idle, CI's build) read target at
    # 500,886,778 ns for 500,025,000 (+0.17 %): a pair holding another thread's work slipped
    # past the interleave check. Such a pair only adds time, and one weighs at most a few
    # tenths of a percent; an estimator that is wrong (a lost weight, a wrong mean) is off
    # by far more, or low.
    for k, ns in ((target, 5000), (other, 1000)):
        assert ns * k.calls * (1 - 1e-4) <= k.total_ns <= ns * k.calls * (1 + 1e-2), (k.name, k.total_ns, k.calls)
    assert target.percent == pytest.approx(100 * 5 / 6, abs=0.2)


def test_event_pairs_remain_and_calibrate_on_kerncaps_own_stream_when_asked(built, tmp_path):
    """KERNCAP_PROFILE_TIMER=events times each sample with a held pair of CUDA events (the
    path before stamps, kept for a driver where the stamp kernel cannot load) and
    KERNCAP_PROFILE_CALIBRATE=own calibrates on a stream of kerncap's own: the same
    estimates, no stamp launched."""
    entry, inject = _native_libs()
    run_dir = tmp_path / "run"
    from kerncap.capture.profile import run_profile

    drv = tmp_path / "drv-events"
    B.fake_driver(drv, events=True)
    out: list[bytes] = []
    result = run_profile([str(B.inject_app(tmp_path)), str(inject), "1", "2000"], sampled=True, run_dir=run_dir,
                         env={"LD_LIBRARY_PATH": str(drv), "KERNCAP_PROFILE_EMPTY_KERNEL_NS": "400",
                              "KERNCAP_PROFILE_TIMER": "events", "KERNCAP_PROFILE_CALIBRATE": "own"},
                         output=lambda stream, data: out.append(data) if stream == "stdout" else None, timeout=120)
    text = b"".join(out).decode()
    assert "stamps=0 " in text and int(re.search(r"records=(\d+)", text).group(1)) > 2 * 32, text
    assert int(re.search(r"creates=(\d+)", text).group(1)) >= 4, text  # the calibration's pair and a sample's
    kernels = {k.name: k for k in result.kernels}
    assert kernels["_Z6targetv"].total_ns == pytest.approx(4400 * kernels["_Z6targetv"].calls, rel=1e-4)
    (prof,) = [json.loads(p.read_text()) for p in run_dir.glob("profile-*.json")]
    s = prof["sampling"]
    assert (s["calibration"], s["bracket_ns"], s["timer"], s["calibrated_on"]) == ("empty kernel", 600, "events", "own"), s


def test_sampled_times_do_not_alias_with_a_periodic_kernel(built, tmp_path):
    """The target takes 4 and 6 us alternately: sampling at geometric gaps (not every
    k-th launch) estimates the mean, 5 us, within its interval."""
    entry, inject = _native_libs()
    exe = B.inject_app(tmp_path)
    result, _ = _sampled_profile(built, tmp_path, exe, str(inject), "1", "400000", FAKE_TARGET_ALTERNATES="1")
    target = next(k for k in result.kernels if k.name == "_Z6targetv")
    assert target.calls == 200005 and target.min_ns == 4000 and target.max_ns == 6000
    assert target.total_lo_ns < target.total_ns < target.total_hi_ns
    _within(target, 5000 * target.calls)


def test_the_sampled_profile_times_graphs_whole_and_never_records_into_a_capture(built, tmp_path):
    """A graph's launches are one row named after its kernel nodes, each launch timed
    (uploaded first by kerncap); the launch recorded into a stream capture is no launch
    that ran, and no event went into the capturing stream."""
    _native_libs()
    result, out = _sampled_profile(built, tmp_path, B.graph_app(tmp_path), str(_native_libs()[1]))
    assert "records_while_capturing=0" in out and "stamps_while_capturing=0" in out and "uploads=1" in out, out
    (graph,) = result.kernels
    assert graph.graph and graph.name == "CUDA graph #1: 3 kernel node(s) (target() x2, other())"
    assert (graph.calls, graph.timed, graph.total_ns) == (4, 4, 4 * 11000)
    assert any("CUDA graphs are timed as a whole" in w for w in result.warnings)


def test_without_stream_memory_operations_the_pairs_go_unheld_and_say_so(built, tmp_path):
    """Where cuStreamWaitValue32 fails (FAKE_NO_MEMOPS), launches are still timed, with
    unheld pairs, and the profile says what that costs in accuracy."""
    entry, inject = _native_libs()
    result, _ = _sampled_profile(built, tmp_path, B.inject_app(tmp_path), str(inject), "1", "2000", FAKE_NO_MEMOPS="1")
    target = next(k for k in result.kernels if k.name == "_Z6targetv")
    assert target.timed and target.total_ns == pytest.approx(5000 * target.calls, rel=1e-4)
    assert any("without holding their stream" in w and "cuStreamWaitValue32" in w for w in result.warnings), \
        result.warnings


def test_each_sample_gives_back_what_a_held_pair_reads_around_an_empty_kernel(built, tmp_path):
    """The calibration times held pairs around nothing and around kerncap's own empty
    kernel (the stand-in runs it as a 1 us kernel) on a stream of its own, and each sample
    loses the empty kernel's pair less the empty kernel's own time
    (KERNCAP_PROFILE_EMPTY_KERNEL_NS): 1000 - 400 = 600 ns here, so the 5 us and 1 us
    kernels read 4.4 and 0.4 us. profile_timing says the pairs were held and how the
    bracket was found."""
    entry, inject = _native_libs()
    run_dir = tmp_path / "run"
    from kerncap.capture.profile import run_profile

    drv = tmp_path / "drv-events"
    B.fake_driver(drv, events=True)
    result = run_profile([str(B.inject_app(tmp_path)), str(inject), "1", "2000"], sampled=True, run_dir=run_dir,
                         env={"LD_LIBRARY_PATH": str(drv), "KERNCAP_PROFILE_EMPTY_KERNEL_NS": "400"},
                         output=lambda *_: None, timeout=120)
    kernels = {k.name: k for k in result.kernels}
    assert kernels["_Z6targetv"].total_ns == pytest.approx(4400 * kernels["_Z6targetv"].calls, rel=1e-4)
    assert kernels["_Z5otherv"].total_ns == pytest.approx(400 * kernels["_Z5otherv"].calls, rel=1e-4)
    (prof,) = [json.loads(p.read_text()) for p in run_dir.glob("profile-*.json")]
    s = prof["sampling"]
    assert (s["calibration"], s["pair_ns"], s["empty_kernel_pair_ns"], s["empty_kernel_ns"], s["bracket_ns"]) == \
        ("empty kernel", 0, 1000, 400, 600), s
    # stamped, and calibrated on the stream the first timed launch went to (idle here)
    assert (s["timer"], s["calibrated_on"]) == ("stamps", "app"), s
    (proc,) = [json.loads(p.read_text()) for p in run_dir.glob("proc-*.json")]
    assert proc["profile_timing"] == {"used": "sampled", "held": True, "calibration": "empty kernel"}, proc


def test_unheld_pairs_are_not_calibrated_against_a_held_empty_kernel(built, tmp_path):
    """Where cuStreamWaitValue32 fails the calibration cannot hold its own stream either:
    nothing is subtracted, and profile_timing says the pairs were not held and why."""
    entry, inject = _native_libs()
    run_dir = tmp_path / "run"
    from kerncap.capture.profile import run_profile

    drv = tmp_path / "drv-events"
    B.fake_driver(drv, events=True)
    run_profile([str(B.inject_app(tmp_path)), str(inject), "1", "200"], sampled=True, run_dir=run_dir,
                env={"LD_LIBRARY_PATH": str(drv), "FAKE_NO_MEMOPS": "1"}, output=lambda *_: None, timeout=120)
    (proc,) = [json.loads(p.read_text()) for p in run_dir.glob("proc-*.json")]
    timing = proc["profile_timing"]
    assert timing["held"] is False and "cuStreamWaitValue32" in timing["unheld"], timing
    (prof,) = [json.loads(p.read_text()) for p in run_dir.glob("profile-*.json")]
    assert prof["sampling"]["bracket_ns"] == 0 and prof["sampling"]["calibration"].startswith("none"), prof["sampling"]


_SERVER_UNDER_A_CAPTURE = r"""
import ctypes, io, os, sys
ctypes.CDLL("libcuda.so.1")                               # the app's driver (the stand-in)
inject = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])  # as the driver loads it in cuInit
assert inject.InitializeInjection() == 1
from kerncap.replay import server
if sys.argv[1] == "without":
    server.report_to_capture_library = lambda: False      # the server as it was before
sys.stdin = io.StringIO("")                               # no requests: serve returns 0
server.main()                                             # ends with os._exit
"""


@pytest.mark.parametrize("report", ["with", "without"])
def test_a_replay_server_reports_to_the_profile_or_capture_around_it(built, tmp_path, report):
    """kerncap's replay server ends with os._exit, which skips the capture library's
    atexit handler: a `kerncap profile` of `kerncap replay` found no report at all on the
    H200. The server has the library write it first; without that, none is written."""
    entry, inject = _native_libs()
    out = tmp_path / "run"
    out.mkdir()
    env = {**_entry_env(built, entry, out, dispatch=1000), "CUDA_INJECTION64_PATH": str(inject),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    p = _run([sys.executable, "-c", _SERVER_UNDER_A_CAPTURE, report], env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    reports = list(out.glob("proc-*.json"))
    if report == "without":
        assert reports == []
        return
    (path,) = reports
    proc = json.loads(path.read_text())
    assert proc["pid"] == int(path.stem.split("-")[1]) and proc["errors"] == []
