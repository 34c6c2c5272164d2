"""CPU tests of the capture interposer's GPU-independent C++ parts.

Builds native/capture/test/capture_units_test.cpp (with AddressSanitizer) against real
cubins compiled here by nvcc from native/capture/test/sample_kernels.cu, runs it, and
cross-checks what it reports (cubin SHA-256, blob names, JSON escaping) with Python's
own hashlib / xxhash / json. Skipped when nvcc or a C++ compiler is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import native_build
import pytest
import xxhash

ROOT = Path(__file__).resolve().parents[1]
NATIVE = ROOT / "native"
TEST_SRC = NATIVE / "capture" / "test"
PURE_SOURCES = [
    NATIVE / "common" / "cubin_elf.cpp",
    *(NATIVE / "capture" / f"{name}.cpp" for name in
      ("config", "fsutil", "blob_store", "memory_tracker", "module_registry", "job_identity", "nvtx_ranges",
       "closure_targets", "xla_autotune", "zero_fingerprint", "sample_stats")),
]


def _cuda_home() -> Path | None:
    """A toolkit root holding bin/nvcc and include/cupti.h."""
    roots = [native_build.ENV.get("CUDA_HOME"), native_build.ENV.get("CUDA_PATH")]
    nvcc = native_build.which("nvcc")
    if nvcc:
        roots += [str(Path(nvcc).parent.parent), str(Path(nvcc).resolve().parent.parent)]
    roots.append("/usr/local/cuda")
    for root in filter(None, roots):
        if (Path(root) / "bin" / "nvcc").exists() and (Path(root) / "include" / "cupti.h").exists():
            return Path(root)
    return None


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_units(tmp_path_factory.mktemp("capture_units"))


def build_units(work: Path):
    """(unit test executable, cubins, work dir); skips without nvcc/cupti.h/a C++ compiler.
    The executable and cubins are cached (tests/native_build.py): read and run them only."""
    exe, cubins = native_build.result("capture_units", _build_cached)
    return exe, cubins, work


def _build_cached():
    cuda = _cuda_home()
    cxx = native_build.compiler()
    if cuda is None or cxx is None:
        pytest.skip("needs nvcc, cupti.h and a C++ compiler")
    nvcc = str(cuda / "bin" / "nvcc")
    cubins = {name: native_build.cubin(nvcc, ["-arch=sm_90", *extra], TEST_SRC / "sample_kernels.cu")
              for name, extra in (("a", []), ("variant", ["-DVARIANT"]))}
    exe = native_build.executable("capture_units_test", cxx, [
        "-std=c++17", "-g1", "-O1", "-Wall", "-Wextra", "-Werror", "-Wno-maybe-uninitialized",
        "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
        f"-I{NATIVE / 'common'}", f"-I{NATIVE / 'capture'}", f"-I{cuda / 'include'}",
    ], [TEST_SRC / "capture_units_test.cpp", *PURE_SOURCES])
    return exe, cubins


def PREBUILD():  # conftest starts it when this file's tests are selected
    native_build.start("capture_units", _build_cached)


def test_units_pass_and_agree_with_python(built):
    exe, cubins, work = built
    scratch = work / "scratch"
    scratch.mkdir()
    r = _run([str(exe), str(cubins["a"]), str(cubins["variant"]), str(scratch)],
             env=native_build.env(ASAN_OPTIONS="detect_leaks=0"))
    assert r.returncode == 0, f"C++ checks failed:\n{r.stderr}\n{r.stdout}"
    facts = json.loads(r.stdout)  # also proves the JSON writer's output parses
    assert facts["failures"] == 0
    assert facts["sha256"] == hashlib.sha256(cubins["a"].read_bytes()).hexdigest()

    blob = Path(facts["blob_path"])
    data = blob.read_bytes()
    assert facts["blob"] == xxhash.xxh64(data, seed=0).hexdigest()
    assert blob.name == f"{facts['blob']}.bin"
    # Escaping: control bytes as \\u00XX, invalid UTF-8 as U+FFFD, valid UTF-8 kept.
    assert facts["escapes"] == 'q"b\\n\n\x01\ufffd\u00e9'
    assert not list(scratch.rglob("*.tmp.*")), "a temp file was left behind"
    # The all-zero chunk's fingerprint (zero_fingerprint.cpp) against numpy's evaluation
    # of chunk_fingerprint.cu's word mixing, so a capture can skip zero chunks unread.
    assert facts["zero_fingerprint_4mib"] == _zero_fingerprint(4 << 20)
    assert "host memory kerncap does not capture" in facts["pageable_reason"]


def _zero_fingerprint(nbytes: int) -> str:
    import numpy as np

    def fmix(k):
        k = k ^ (k >> np.uint64(33))
        k = k * np.uint64(0xFF51AFD7ED558CCD)
        k = k ^ (k >> np.uint64(33))
        k = k * np.uint64(0xC4CEB9FE1A85EC53)
        return k ^ (k >> np.uint64(33))

    i = np.arange(nbytes // 8, dtype=np.uint64)
    with np.errstate(over="ignore"):
        a = fmix(i * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x632BE59BD9B4E019)).sum(dtype=np.uint64)
        b = fmix(i * np.uint64(0xD6E8FEB86659FD93) + np.uint64(0xA0761D6478BD642F)).sum(dtype=np.uint64)
    return f"{int(a):016x}{int(b):016x}"


def test_exported_symbols_only_the_injection_api():
    """The built interposer (if a build tree is around) exports exactly the injection API:
    CUDA's and NVTX's entry points, the autotuner hook's two calls and the report-now call
    of a process that ends with _exit (the replay server)."""
    from kerncap.core.native import NATIVE_DIR

    candidates = [Path(p) for p in os.environ.get("KERNCAP_INJECT_LIB", "").split(os.pathsep) if p]
    candidates += [NATIVE_DIR / "libkerncap_inject.so"]  # an installed kerncap (the GPU flow's package build)
    candidates += list(ROOT.glob("build/*/native/capture/libkerncap_inject.so"))
    # An explicit override first; else the newest build (a stale build tree lacks new exports).
    found = [p for p in candidates if p.is_file()]
    lib = found[0] if os.environ.get("KERNCAP_INJECT_LIB") and found else max(found, key=lambda p: p.stat().st_mtime,
                                                                               default=None)
    nm = shutil.which("nm")
    if lib is None or nm is None:
        pytest.skip("no built libkerncap_inject.so (set KERNCAP_INJECT_LIB) or no nm")
    r = _run([nm, "-D", "--defined-only", str(lib)])
    assert r.returncode == 0, r.stderr
    names = {line.split()[-1] for line in r.stdout.splitlines() if line.strip()}
    assert names == {"InitializeInjection", "InitializeInjectionNvtx2", "InitializeInjectionNvtxExtension",
                     "kerncap_benchmark_enter", "kerncap_benchmark_exit", "kerncap_report_now"}
