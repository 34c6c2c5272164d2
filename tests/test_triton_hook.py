"""The Python hook (engine/kerncap/pyhooks) in a real interpreter start-up, against the
real Triton package: benchmark exclusion through a fake interposer library built here,
and Triton metadata recorded from real JITFunction/Autotuner launches on a fake CUDA
driver (Triton compiles for sm_90 without a GPU; the fake driver "launches" by
recording)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PYHOOKS = Path(__file__).resolve().parents[1] / "engine" / "kerncap" / "pyhooks"

FAKE_INJECT_C = r"""
#include <stdio.h>
#include <stdlib.h>
static int depth;
static void note(const char *what) {
  const char *p = getenv("FAKE_INJECT_LOG");
  FILE *f = p ? fopen(p, "a") : NULL;
  if (f) { fprintf(f, "%s %d\n", what, depth); fclose(f); }
}
void kerncap_benchmark_enter(void) { depth++; note("enter"); }
void kerncap_benchmark_exit(void) { depth--; note("exit"); }
int kerncap_test_depth(void) { return depth; }
"""

# A fake CUDA driver for Triton 3.6: real compilation for sm_90, launches recorded.
FAKE_GPU = '''
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.driver import CudaDriver

LAUNCHES = []

class FakeDtype:
    def __init__(self, name): self.name = name
    def __str__(self): return "torch." + self.name

class FakeTensor:
    def __init__(self, ptr, n, dtype="float32", esize=4):
        self.ptr, self.shape, self.dtype, self.esize = ptr, (n,), FakeDtype(dtype), esize
        self.device = "cuda:0"
    def data_ptr(self): return self.ptr
    def stride(self): return (1,)
    def element_size(self): return self.esize

class FakeLauncher:
    def __init__(self, src, metadata): self.metadata = metadata
    def __call__(self, gx, gy, gz, stream, function, *args):
        LAUNCHES.append((gx, gy, gz, self.metadata.name, self.metadata.num_warps))

class FakeUtils:
    def get_device_properties(self, device): return {"max_shared_mem": 232448}
    def load_binary(self, name, kernel, shared, device): return (1, 2, 32, 0, 1024)

class FakeDriver(CudaDriver):
    def __init__(self):
        self.utils = FakeUtils(); self.launcher_cls = FakeLauncher
    def get_current_device(self): return 0
    def get_current_stream(self, device=None): return 0
    def get_current_target(self): return GPUTarget("cuda", 90, 32)
    def get_device_capability(self, device=0): return (9, 0)

def install():
    triton.runtime.driver.set_active(FakeDriver())
'''

APP = '''
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import triton
import triton.language as tl
import fakegpu

fakegpu.install()
BENCH_DEPTHS = []


def bench(kernel_call, quantiles):
    import ctypes
    try:
        lib = ctypes.CDLL(os.environ.get("CUDA_INJECTION64_PATH", ""))
    except OSError:
        lib = None
    BENCH_DEPTHS.append(lib.kerncap_test_depth() if lib and hasattr(lib, "kerncap_test_depth") else None)
    kernel_call()
    return [1.0, 1.0, 1.0]


@triton.autotune(
    configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4)],
    key=["n"], do_bench=bench,
)
@triton.jit
def kc_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def main():
    n = 1000
    base = 0x7F0000000000
    x, y, out = (fakegpu.FakeTensor(base + i * 4096, n) for i in range(3))
    for _ in range(3):
        kc_add[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    cubins = {}
    for kernel in kc_add.fn.device_caches[0][0].values():
        cubins[kernel.metadata.num_warps] = kernel.asm["cubin"].hex()
    print(json.dumps({"launches": fakegpu.LAUNCHES, "bench_depths": BENCH_DEPTHS,
                      "best": kc_add.best_config.kwargs, "cubins": cubins,
                      "ptrs": [t.data_ptr() for t in (x, y, out)]}))


if __name__ == "__main__":
    main()
'''


def run_python(code_or_file, env_extra: dict, cwd: Path, pythonpath=(PYHOOKS,)) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNCAP_", "CUDA_INJECTION"))}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    env.update(env_extra)
    argv = [sys.executable, str(code_or_file)] if isinstance(code_or_file, Path) else [sys.executable, "-c", code_or_file]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def fake_inject(tmp_path_factory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the fake interposer")
    d = tmp_path_factory.mktemp("inject")
    (d / "fake.c").write_text(FAKE_INJECT_C)
    subprocess.run([cc, "-shared", "-fPIC", "-Wall", "-Werror", "-o", str(d / "libfake.so"), str(d / "fake.c")], check=True)
    return d / "libfake.so"


@pytest.fixture(scope="module")
def app_dir(tmp_path_factory) -> Path:
    pytest.importorskip("triton")
    d = tmp_path_factory.mktemp("app")
    (d / "fakegpu.py").write_text(FAKE_GPU)
    (d / "app.py").write_text(APP)
    return d


# -- start-up behaviour ------------------------------------------------------------------


def test_hook_is_a_no_op_without_kerncap_mode(tmp_path):
    probe = "import sys; print('_kerncap_hooks' in sys.modules, len(sys.meta_path))"
    plain = run_python(probe, {}, tmp_path, pythonpath=())
    hooked = run_python(probe, {}, tmp_path)
    assert hooked.returncode == 0, hooked.stderr
    assert hooked.stdout.split()[0] == "False"
    assert hooked.stdout == plain.stdout
    assert hooked.stderr == ""


def test_hook_imports_neither_torch_nor_triton_at_startup(tmp_path):
    probe = "import sys; print(sorted(m for m in ('torch', 'triton', 'numpy') if m in sys.modules), '_kerncap_hooks' in sys.modules)"
    got = run_python(probe, {"KERNCAP_MODE": "capture", "KERNCAP_KERNEL": "x", "KERNCAP_OUT": str(tmp_path)}, tmp_path)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "[] True"


@pytest.mark.parametrize("mode", [None, "profile"])
def test_hook_chains_to_the_next_sitecustomize(tmp_path, mode):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.OTHER_SITECUSTOMIZE_RAN = True\n")
    env = {"KERNCAP_MODE": mode} if mode else {}
    got = run_python("import builtins; print(getattr(builtins, 'OTHER_SITECUSTOMIZE_RAN', False))", env, tmp_path,
                     pythonpath=(PYHOOKS, other))
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "True"


# -- benchmark exclusion ------------------------------------------------------------------


def test_autotuner_benchmark_raises_the_interposer_counter(app_dir, fake_inject, tmp_path):
    log = tmp_path / "inject.log"
    got = run_python(app_dir / "app.py", {"KERNCAP_MODE": "profile", "CUDA_INJECTION64_PATH": str(fake_inject),
                                          "FAKE_INJECT_LOG": str(log)}, tmp_path)
    assert got.returncode == 0, got.stderr
    result = json.loads(got.stdout.splitlines()[-1])
    assert result["bench_depths"] == [1, 1]  # each config benchmarked inside enter/exit
    assert log.read_text().split("\n")[:-1] == ["enter 1", "exit 0", "enter 1", "exit 0"]
    assert len(result["launches"]) == 5  # 2 benchmark launches + 3 real ones: the app still runs
    assert not list(tmp_path.glob("triton-*.json"))  # profile mode records nothing


def test_missing_interposer_symbols_do_not_break_the_app(app_dir, tmp_path):
    got = run_python(app_dir / "app.py", {"KERNCAP_MODE": "profile", "CUDA_INJECTION64_PATH": str(tmp_path / "nope.so")}, tmp_path)
    assert got.returncode == 0, got.stderr
    assert "kerncap: autotuner launches cannot be excluded from dispatch counting" in got.stderr
    assert len(json.loads(got.stdout.splitlines()[-1])["launches"]) == 5


# -- Triton metadata ----------------------------------------------------------------------


def run_capture(app_dir: Path, out: Path, inject: Path | None, **env) -> dict:
    out.mkdir(exist_ok=True)
    base = {"KERNCAP_MODE": "capture", "KERNCAP_KERNEL": "kc_add", "KERNCAP_OUT": str(out)}
    if inject is not None:
        base["CUDA_INJECTION64_PATH"] = str(inject)
    got = run_python(app_dir / "app.py", {**base, **env}, out)
    assert got.returncode == 0, got.stderr
    assert "kerncap:" not in got.stderr, got.stderr
    return json.loads(got.stdout.splitlines()[-1])


def test_records_real_launches_keyed_by_cubin_sha256(app_dir, fake_inject, tmp_path):
    result = run_capture(app_dir, tmp_path / "run", fake_inject, KERNCAP_DISPATCH="1")
    files = list((tmp_path / "run").glob("triton-*.json"))
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    assert doc["format"] == "kerncap-triton"
    import triton

    assert doc["triton_version"] == triton.__version__
    # Only the chosen config (num_warps 2) launched outside benchmarking.
    chosen_sha = hashlib.sha256(bytes.fromhex(result["cubins"]["2"])).hexdigest()
    assert list(doc["kernels"]) == [chosen_sha]
    rec = doc["kernels"][chosen_sha]
    assert rec["kernel"] == "kc_add" and rec["launcher"] == "triton"
    assert rec["signature"] == {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    assert rec["constexprs"] == [{"path": [4], "name": "BLOCK", "value": {"type": "int", "value": 64}}]
    assert rec["options"]["num_warps"] == 2 and rec["options"]["target"]["arch"] == 90
    assert rec["function"]["declared_constexprs"] == ["BLOCK"]
    assert "def kc_add" in rec["function"]["source"]
    snapshot = tmp_path / "run" / rec["function"]["module_snapshot"]
    assert snapshot.read_text() == (app_dir / "app.py").read_text()
    # Dispatches 0 and 1 recorded (KERNCAP_DISPATCH=1), the third launch not.
    launches = rec["launches"]
    assert [x["hook_dispatch"] for x in launches] == [0, 1]
    assert all(x["grid"] == [16, 1, 1] for x in launches)
    assert launches[0]["autotune_config"]["kwargs"] == {"BLOCK": {"type": "int", "value": 64}}
    assert launches[0]["autotune_config"]["num_warps"] == 2
    # Every config of the autotuner, with the grid the app's grid lambda gives for it.
    weighed = launches[0]["autotune_config"]["configs"]
    assert [(c["kwargs"]["BLOCK"]["value"], c["num_warps"], c["grid"]) for c in weighed] == [
        (64, 2, [16, 1, 1]), (128, 4, [8, 1, 1])]
    args = launches[0]["args"]
    assert [a["name"] for a in args] == ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"]
    assert [a["data_ptr"] for a in args[:3]] == result["ptrs"]
    assert args[0]["dtype"] == "float32" and args[0]["shape"] == [1000] and args[0]["strides"] == [1]
    assert args[3] == {"name": "n", "kind": "int", "value": 1000}


def test_records_nothing_for_other_kernels(app_dir, fake_inject, tmp_path):
    run_capture(app_dir, tmp_path / "run", fake_inject, KERNCAP_KERNEL="^other$", KERNCAP_MATCH="regex")
    assert not list((tmp_path / "run").glob("triton-*.json"))


def test_records_without_the_interposer(app_dir, tmp_path):
    """Recording does not depend on the interposer library being loadable; benchmark
    launches are still kept out of the hook's own dispatch count."""
    out = tmp_path / "run"
    out.mkdir()
    got = run_python(app_dir / "app.py", {"KERNCAP_MODE": "capture", "KERNCAP_KERNEL": "kc_add",
                                          "KERNCAP_OUT": str(out)}, tmp_path)
    assert got.returncode == 0, got.stderr
    (doc,) = [json.loads(p.read_text()) for p in out.glob("triton-*.json")]
    (rec,) = doc["kernels"].values()
    assert [x["hook_dispatch"] for x in rec["launches"]] == [0]


def test_module_snapshot_is_written_once(app_dir, fake_inject, tmp_path):
    run_capture(app_dir, tmp_path / "run", fake_inject, KERNCAP_DISPATCH="5")
    assert len(list((tmp_path / "run" / "triton-src").iterdir())) == 1
    assert not [p for p in (tmp_path / "run").rglob("*.tmp-*")]


def test_hook_source_has_no_engine_imports():
    for path in PYHOOKS.glob("*.py"):
        text = path.read_text()
        assert "import kerncap" not in text and "from kerncap" not in text, path


def test_a_sets_dispatch_list_records_up_to_its_last_member(app_dir, fake_inject, tmp_path):
    """A set's KERNCAP_DISPATCH is a list ("2,0", as a set's members may come): every
    launch up to its highest member is recorded. Mutation caught: recorded only up to the
    lowest."""
    run_capture(app_dir, tmp_path / "run", fake_inject, KERNCAP_DISPATCH="2,0")
    (doc,) = [json.loads(p.read_text()) for p in (tmp_path / "run").glob("triton-*.json")]
    (rec,) = doc["kernels"].values()
    assert [x["hook_dispatch"] for x in rec["launches"]] == [0, 1, 2]


def _private_hooks():
    """A fresh copy of _kerncap_hooks (its module state is its own)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_kerncap_hooks_under_test", PYHOOKS / "_kerncap_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_module_already_imported_is_patched_at_once_and_one_still_executing_later(monkeypatch):
    """when_imported: a module the app imported before the hooks installed is patched
    right away (its import will not run again); one whose body is still executing is not
    patched half-made, but queued for the end of its import. Mutation caught: the
    initialising check flipped."""
    import importlib.machinery
    import types

    hooks = _private_hooks()
    patched = []
    done = types.ModuleType("kc_hooks_probe_done")
    done.__spec__ = importlib.machinery.ModuleSpec("kc_hooks_probe_done", None)
    monkeypatch.setitem(sys.modules, "kc_hooks_probe_done", done)
    hooks.when_imported("kc_hooks_probe_done", patched.append)
    assert patched == [done] and "kc_hooks_probe_done" not in hooks._PATCHES

    half = types.ModuleType("kc_hooks_probe_half")
    half.__spec__ = importlib.machinery.ModuleSpec("kc_hooks_probe_half", None)
    half.__spec__._initializing = True
    monkeypatch.setitem(sys.modules, "kc_hooks_probe_half", half)
    hooks.when_imported("kc_hooks_probe_half", patched.append)
    assert patched == [done] and hooks._PATCHES["kc_hooks_probe_half"] == [patched.append]
