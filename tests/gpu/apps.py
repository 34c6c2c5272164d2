"""The test applications as the GPU suite sees them: what to run, which kernel to
capture, and which of the app's buffers (by report key, testapps/*/kc_testapp) that
kernel reads and writes."""

from __future__ import annotations

import os
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTAPPS = REPO / "testapps"
PYAPPS = TESTAPPS / "python"


@dataclass(frozen=True)
class AppSpec:
    name: str
    kernel: str  # pattern given to extract
    match: str = "substring"
    dispatch: int = 0
    python: bool = False  # testapps/python/<name>.py, else the CMake-built executable
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    keep_running: bool = False
    writes: tuple[str, ...] = ()  # report keys of buffers the kernel writes
    reads: tuple[str, ...] = ()  # report keys of buffers it must leave unchanged
    exact: bool = True  # the written regions are exactly those of `writes`
    timeout: float = 180.0

    def command(self, build_dir: Path) -> list[str]:
        if self.python:
            return [sys.executable, str(PYAPPS / f"{self.name}.py"), *self.args]
        return [str(build_dir / self.name), *self.args]


POINTER_TABLE_OUTS = tuple(f"out{b}" for b in range(4))
TEMPLATE_K3 = "_Z7stencilILi3EEvPKfPfi"  # stencil<3>(const float*, float*, int), tu_b.cu
MOE_EXPERTS = 8  # testapps/python/triton_moe.py: EXPERTS
MOE_WEIGHTS = tuple(f"w{e}" for e in range(MOE_EXPERTS))  # reached only through `table`
RMSNORM_ROWS, RMSNORM_COLS = 512, 32768
RMSNORM_ARGS = (str(RMSNORM_ROWS), str(RMSNORM_COLS))

# Every app a successful capture is made of (one extract each per session).
APPS: dict[str, AppSpec] = {
    s.name: s
    for s in [
        AppSpec("pointer_table", "scale_table", writes=POINTER_TABLE_OUTS,
                reads=("in0", "in1", "in2", "in3", "in_table", "out_table")),
        AppSpec("axpy_inplace", "axpy_inplace", writes=("y",), reads=("x",)),
        AppSpec("template_multi", TEMPLATE_K3, match="exact", dispatch=1, writes=("out",), reads=("in", "mid")),
        AppSpec("dyn_smem", "reverse_tiles", writes=("out",), reads=("in",)),
        AppSpec("multistream", "ms_target", dispatch=1, writes=("out",), reads=("in", "other")),
        AppSpec("torch_matmul", "nvjet", python=True, writes=("c",), reads=("a", "b", "d"), exact=False),
        # keep_running: the chosen config reaches the report only after tuning.
        AppSpec("triton_autotune", "kc_autotune_add", python=True, keep_running=True, dispatch=1,
                writes=("out",), reads=("x", "y")),
        # Like triton_autotune: dispatch 1 (after tuning), best config reported after tuning.
        AppSpec("triton_flash_attn", "kc_flash_attn_fwd", python=True, keep_running=True, dispatch=1,
                writes=("out",), reads=("q", "k", "v"), timeout=300.0),
        AppSpec("triton_moe", "kc_moe_expert_matmul", python=True, keep_running=True, dispatch=1,
                writes=("out",), reads=("x", "table", "routing", *MOE_WEIGHTS), timeout=300.0),
        AppSpec("torch_compile", "triton_poi_fused", python=True, dispatch=1, reads=("x", "y"), exact=False, timeout=400.0),
        # Inductor's looped RMSNorm, max-autotune (testapps/python/torch_compile_rmsnorm.py,
        # 512 x 32768 bf16). Not `w`: the caching allocator packs it with the rstd output.
        AppSpec("torch_compile_rmsnorm", "triton_red_fused", python=True, dispatch=1, args=RMSNORM_ARGS,
                reads=("x",), exact=False, timeout=400.0),
        AppSpec("torch_expandable", "lerp", python=True, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
                writes=("out",), reads=("a", "b"), exact=False),
        # Issue 27: cudaLaunchCooperativeKernel with a grid-wide barrier (its second launch,
        # scale 2), and thread 0's third launch in an app built with per-thread default
        # streams (cudart's _ptsz entry points); thread 1's buffers are not yet touched.
        AppSpec("coop_grid", "coop_normalize", dispatch=1, writes=("out", "partial", "total"), reads=("in",)),
        AppSpec("ptsz_stream", "ptsz_scale", dispatch=2, writes=("out0",), reads=("in0", "in1", "out1")),
    ]
}

# Issue 7 (robustness at scale), extracted by test_scale.py only: kept out of APPS so
# the per-app tests of test_capture_apps/test_replay_apps keep their budget.
MANY_ALLOCS = AppSpec("many_allocs", "ma_target", writes=("out",), reads=("table", "words", "first", "last"),
                      timeout=300.0)
MS8_THREADS = 8  # testapps/cuda/multistream8.cu: kThreads
MS8_BUFFERS = tuple(f"buf{t}" for t in range(MS8_THREADS))
# Dispatch 5 of 12: every thread has launched >= 100 times and keeps launching.
MULTISTREAM8 = AppSpec("multistream8", "ms8_target", dispatch=5, keep_running=True, writes=("out",),
                       reads=("in", *MS8_BUFFERS), timeout=300.0)
MILLION = 1_000_000
# kc_tiny adds 1 to a counter the app zeroes: dispatch N sees N in its pre-state.
LAUNCH_HEAVY_1M = AppSpec("launch_heavy", "kc_tiny", dispatch=MILLION - 1, args=(str(MILLION),), timeout=300.0)
# testapps/python/moe_scale.py, small: moe_scale_expert_ffn runs twice per layer (up,
# down), silu once; the target is the last layer's up projection. Its tensors are small
# enough to share the caching allocator's segments, so checks are by byte range.
MOE_SMALL_LAYERS = 3
MOE_SMALL_ARGS = ("--layers", str(MOE_SMALL_LAYERS), "--experts", "4", "--d-model", "256", "--d-ff", "512",
                  "--tokens", "64")
MOE_SCALE_SMALL = AppSpec("moe_scale", "moe_scale_expert_ffn", python=True, args=MOE_SMALL_ARGS,
                          dispatch=2 * (MOE_SMALL_LAYERS - 1), keep_running=True, timeout=300.0)
MOE_SCALE_SMALL_SILU = AppSpec("moe_scale", "silu", python=True, args=MOE_SMALL_ARGS, dispatch=MOE_SMALL_LAYERS - 1,
                               timeout=300.0)
# Issue 46's Triton twin of smooth (testapps/python/triton_smooth.py): 1 Mi floats, 5 launches;
# extracted by test_apply_gpu.py only (its edit: smooth_edits.triton_edit).
TRITON_SMOOTH = AppSpec("triton_smooth", "kc_smooth_taps", match="exact", python=True, args=(str(1 << 20),),
                        timeout=300.0)

# Issue 14 (validation you can trust), extracted by test_trust_gpu.py only (a
# nondeterministic kernel cannot be in APPS: test_replay_apps validates byte-exact).
# testapps/cuda/perturb/perturb_pair.cu: pair_fma on a == b, dispatches 0, 1, 2.
PAIR_FMA = AppSpec("perturb_pair", "pair_fma", writes=("out",), reads=("a", "b"))
PAIR_FMA_SET = tuple(AppSpec("perturb_pair", "pair_fma", dispatch=d, writes=("out",), reads=("a", "b"))
                     for d in (1, 2))
GATHER_UNSIGNED = AppSpec("perturb_pair", "gather_unsigned", writes=("gathered",), reads=("pos", "table"))
# testapps/python/triton_atomic.py: float atomics, dispatch 1 (after the first compile).
TRITON_ATOMIC = AppSpec("triton_atomic", "kc_atomic_bins", python=True, dispatch=1, writes=("out",), reads=("x",))
# Issue 18 (the edit loop on big translation units), extracted by test_recompile_big.py
# only, with their sources. qmatvec: mul_mat_vec_q<qtype::q5_0, 3, true>, one of the 96
# instances of testapps/cuda/big_tu/qmatvec.cu. functor_thrust: a Kokkos-style
# cuda_parallel_launch_local_memory<ParallelFor<Smooth3, RangePolicy>> in a TU that
# includes thrust (its module carries thrust's and libcu++'s _INTERNAL_ globals).
BIG_TU = AppSpec("qmatvec", "_ZN3qmv13mul_mat_vec_qILNS_5qtypeE2ELi3ELb1EEEvPKvS3_PfNS_11fusion_argsEiiii",
                 match="exact", writes=("dst",), reads=("y", "w_q5_0", "gate", "bias"))
FUNCTOR_THRUST = AppSpec(
    "functor_thrust",
    "_ZN10minikokkos4impl33cuda_parallel_launch_local_memoryINS0_11ParallelForI7Smooth3NS_11RangePolicyEEEEEvT_",
    match="exact", writes=("out",), reads=("in",))

# Issue 25 (every reproducer replays, or says why not), extracted by test_hostmem_gpu.py
# only: mapped pinned host memory read by a gather, a registered malloc buffer updated in
# place, a 2 GiB mostly empty arena, JAX's preallocated BFC arena, a paged KV cache at
# 90 % of free memory. Dispatch 1: the host rewrote the table / the buffer was updated once.
ZERO_COPY_GATHER = AppSpec("zero_copy_gather", "gather_table", dispatch=1, writes=("out",), reads=("idx",))
HOST_REGISTER_SCALE = AppSpec("host_register_scale", "scale_host", dispatch=1)
SPARSE_ARENA = AppSpec("sparse_arena", "arena_reduce", dispatch=1, args=("2", "64"))
JAX_GEMM = AppSpec("jax_gemm", "", python=True, timeout=400.0)  # kernel found by `kerncap profile`
# Issue 43: XLA's command buffers (CUDA graphs with programmatic edges) under its default flags.
JAX_CHAIN = AppSpec("jax_chain", "", python=True, env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, timeout=400.0)
# Issue 43: a graph with a programmatic edge built through the runtime; dispatch 1 is launch L1.
GRAPH_PDL = AppSpec("graph_pdl", "pdl_consumer", dispatch=1, keep_running=True, writes=("out",),
                    reads=("mid",))
PAGED_ATTENTION = AppSpec("paged_attention", "kc_paged_attn_decode", python=True, dispatch=1,
                          writes=("out",), reads=("q", "block_table", "seq_lens"), timeout=400.0)

# Apps used only for failure paths (test_capture_errors.py).
# Writes through a pointer XOR-masked with a key: outside any pointer closure (prune refuses).
HIDDEN_WRITE = AppSpec("hidden_write", "hidden_write", writes=("out",), reads=("in",))
# An app that subscribes to CUPTI itself before its first CUDA call.
PROFILER_CONFLICT = AppSpec("cupti_first", "cupti_first_scale")


class Once:
    """Each key made once per session (or module); a failure is kept and raised again for
    every test that asks for the key, so one broken extract fails its tests, not the run."""

    def __init__(self):
        self._done: dict = {}

    def get(self, key, make):
        if key not in self._done:
            try:
                self._done[key] = make()
            except Exception as exc:  # noqa: BLE001 - re-raised for every test of this key
                self._done[key] = exc
        got = self._done[key]
        if isinstance(got, BaseException):
            raise got
        return got


def u64(raw: bytes) -> int:
    return struct.unpack("<Q", raw)[0]


def looks_like_device_address(value: int) -> bool:
    """Device VAs on Linux x86-64 sit high in the 48-bit space (0x7f..., DESIGN fact 5);
    sizes, counts and packed floats of the test kernels never fall in [2^40, 2^48)."""
    return (1 << 40) <= value < (1 << 48)


def app_env(spec: AppSpec, workdir: Path, **extra: str) -> dict[str, str]:
    """The app's environment: ours, the spec's, and where to put its report and done marker."""
    env = dict(os.environ)
    env.update(spec.env)
    env["KC_TESTAPP_REPORT"] = str(workdir / "report.json")
    env["KC_TESTAPP_DONE"] = str(workdir / "done")
    env.update(extra)
    return env

# Issue 30 (see the data): a 2-D output in 64 x 64 tiles; variants/tile2d_* plant bugs.
TILE2D = AppSpec("tile2d", "tile2d", writes=("out",), reads=("colscale",), args=("1024", "1024"))
TILE2D_BIG = AppSpec("tile2d", "tile2d", writes=("out",), reads=("colscale",), args=("32768", "32768"), timeout=600.0)


def pick_gemm(profile) -> str:
    """The name of the profile's GEMM kernel with the most time (JAX apps: found, not known)."""
    import pytest

    words = ("gemm", "dot", "matmul", "nvjet", "xmma", "cutlass", "triton")
    for k in profile.kernels:  # by total time
        if any(w in (k.name + k.demangled).lower() for w in words):
            return k.name
    pytest.fail("no GEMM kernel in the JAX app's profile: " + ", ".join(k.name for k in profile.kernels[:10]))
