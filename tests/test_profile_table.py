"""`kerncap profile`'s table at 80 columns and in a pipe: every number column in full,
kernel names fitted (real PyTorch, cuBLAS and cuDNN names), `--wide` for full names."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import pytest

from kerncap.cli import main
from kerncap.capture.profile import KernelStat, ProfileResult
from kerncap.capture.profile_table import format_table
from kerncap.core.units import fit_kernel_name

DEMO_PROFILE = Path(__file__).parents[1] / "kerncap_tui" / "demo" / "reproducer" / "profile.json"

# Names as PyTorch 2.11 / cuBLASLt / cuDNN 9 kernels report them (demangled).
LONG_NAMES = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
    "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
    "unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
    "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
    "unsigned int, float, 4, 4>)",
    "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTN",
    "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_kernel0_0",
    "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0",
]


def _stat(name: str, i: int) -> KernelStat:
    return KernelStat(name=f"_Z{i}", demangled=name, calls=1_048_576 // (i + 1), total_ns=987_654_321 // (i + 1),
                      avg_ns=941.9 * (i + 1), min_ns=812 * (i + 1), max_ns=1_234_567 * (i + 1),
                      grid=[16384, 2, 1], block=[256, 1, 1], percent=40.5 / (i + 1))


@pytest.fixture
def long_profile() -> ProfileResult:
    kernels = [_stat(n, i) for i, n in enumerate(LONG_NAMES)]
    return ProfileResult(kernels=kernels, total_ns=sum(k.total_ns for k in kernels),
                         dispatches=sum(k.calls for k in kernels), processes=1)


def _numbers(k: KernelStat) -> list[str]:
    return [f"{k.calls:,}", f"{k.total_ns / 1e6:,.3f}", f"{k.percent:.1f}", f"{k.avg_ns / 1e3:,.2f}",
            f"{k.min_ns / 1e3:,.2f}", f"{k.max_ns / 1e3:,.2f}", "16384x2", "256"]


def test_every_number_column_fits_in_80_columns(long_profile):
    lines = format_table(long_profile, width=80)
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    assert lines[0].split() == ["#", "kernel", "calls", "total", "ms", "%", "avg", "µs", "min", "µs", "max", "µs",
                                "grid", "block"]
    for k, line in zip(long_profile.kernels, lines[1:]):
        assert line.split()[-8:] == _numbers(k), line


def test_names_keep_their_identifier_and_lose_templates_first(long_profile):
    lines = format_table(long_profile, width=120)
    assert "at::native::vectorized_elementwise_kernel<…>" in lines[1]
    assert "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTN" in lines[4]
    assert "(int," not in "".join(lines)  # argument lists dropped


def test_fit_kernel_name_steps():
    name = LONG_NAMES[1]
    assert fit_kernel_name(name, 200) == ("at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, "
                                          "float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>")
    assert fit_kernel_name(name, 60) == "at::native::(anonymous namespace)::cunn_SoftMaxForward<…>"
    assert fit_kernel_name(name, 30) == "cunn_SoftMaxForward<…>"
    short = fit_kernel_name(name, 12)
    assert len(short) == 12 and "…" in short and short.startswith("cunn_So")
    assert fit_kernel_name("smooth(float const*, float*, float const*, int, int)", 12) == "smooth"


def test_wide_prints_full_names(long_profile):
    lines = format_table(long_profile, width=80, wide=True)
    for k, line in zip(long_profile.kernels, lines[1:]):
        assert k.demangled in line and line.split()[-8:] == _numbers(k)


def test_demo_profile_at_80_columns():
    result = ProfileResult.load(DEMO_PROFILE)
    lines = format_table(result, width=80)
    assert lines[1].split() == ["1", "smooth", "5", "0.017", "93.5", "3.31", "3.26", "3.42", "256", "256"]
    assert all(len(line) <= 80 for line in lines)


APP = textwrap.dedent(
    r'''
    import json, os
    out = os.environ["KERNCAP_OUT"]
    for kind, data in (("proc", {"errors": [], "kernels_seen": {}}),
                       ("profile", {"kernels": json.loads(os.environ["FAKE_KERNELS"]), "dropped_records": 0})):
        path = os.path.join(out, "%s-%d.json" % (kind, os.getpid()))
        open(path, "w").write(json.dumps(data))
    '''
)


@pytest.mark.parametrize("wide", [False, True], ids=["fitted", "wide"])
def test_cli_in_a_pipe(tmp_path, monkeypatch, capsys, wide):
    """stdout is not a terminal here (pytest captures it): the table fits 80 columns."""
    app = tmp_path / "app.py"
    app.write_text(APP)
    lib = tmp_path / "libkerncap_inject.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("KERNCAP_INJECT_LIB", str(lib))
    monkeypatch.delenv("COLUMNS", raising=False)
    kernels = [{"name": f"_Z{i}", "demangled": n, "calls": 1000 + i, "total_ns": 5_000_000 - i, "min_ns": 4000,
                "max_ns": 6000, "grid": [65535, 1, 1], "block": [128, 1, 1]} for i, n in enumerate(LONG_NAMES)]
    monkeypatch.setenv("FAKE_KERNELS", json.dumps(kernels))
    args = ["profile", "--output", str(tmp_path / "p.json"), "--top", "0"] + (["--wide"] if wide else [])
    assert main(args + ["--", sys.executable, str(app)]) == 0
    out = capsys.readouterr().out.splitlines()
    table = out[: len(LONG_NAMES) + 1]
    for line in table[1:]:
        assert re.search(r"1,00\d +5\.000 +14\.3 +[45]\.\d\d +4\.00 +6\.00 +65535 +128$", line), line
    if wide:
        assert any(LONG_NAMES[2] in line for line in table)
    else:
        assert all(len(line) <= 80 for line in table), "\n".join(table)


def test_xla_autotuner_helpers_are_marked_and_the_apps_first_kernel_named():
    """JAX under XLA's default flags (H200, docs/facts.md §40): the autotuner's helpers led
    the profile (RedzoneAllocatorKernelImpl 414 launches, DelayKernel 57, xla_fp_comparison
    49). They are marked *, and a note says what they are and which row is the app's own."""
    from kerncap.capture.profile_table import profile_text

    names = [("_ZN15stream_executor3gpu12_GLOBAL__N_126RedzoneAllocatorKernelImplEPhmmmPj",
              "stream_executor::gpu::(anonymous namespace)::RedzoneAllocatorKernelImpl(unsigned char*, ...)", 414),
             ("_ZN15stream_executor3gpu11DelayKernelEPVNS_3gpu15GpuSemaphoreStateENS1_15GpuSemaphoreStateE",
              "stream_executor::gpu::DelayKernel(...)", 57),
             ("gemm_fusion_dot_general_5", "", 68),
             ("_ZN3xla3gpu17xla_fp_comparisonI6bf16EEvPT_S3_fmPi", "void xla::gpu::xla_fp_comparison<bf16>(...)", 49)]
    kernels = [KernelStat(name=n, demangled=d, calls=c, total_ns=10_000 * (5 - i), avg_ns=1.0, min_ns=1, max_ns=1,
                          grid=[1, 1, 1], block=[32, 1, 1], percent=0.0) for i, (n, d, c) in enumerate(names)]
    result = ProfileResult(kernels=kernels, total_ns=sum(k.total_ns for k in kernels), dispatches=588, processes=1)
    text = profile_text(result, width=100)
    ranks = [line.split()[0] for line in text.splitlines()[1:5]]
    assert ranks == ["1*", "2*", "3", "4*"]
    assert text.splitlines()[-1] == ("* XLA's autotuner: 3 kernel(s), 520 launches, 78.6 % of GPU time, ran while XLA "
                                     "compiled; the fusions it tried ran then too, and extract skips those runs "
                                     "(docs/capture-format.md); the first of the app's own is #3 "
                                     "(gemm_fusion_dot_general_5)")
    plain = ProfileResult(kernels=kernels[2:3], total_ns=30_000, dispatches=68, processes=1)
    assert "*" not in profile_text(plain, width=100)


def test_the_capture_librarys_helper_list_is_the_profiles():
    """The two lists of XLA's autotuner helpers agree (the native one opens the candidate
    window; DelayKernel, the timer's, only the profile marks)."""
    import re

    from kerncap.capture.profile import XLA_AUTOTUNE_KERNELS

    src = (Path(__file__).parents[1] / "native" / "capture" / "xla_autotune.cpp").read_text()
    native = re.findall(r'"([A-Za-z_]+)"', src[src.index("helpers[]"):src.index("};", src.index("helpers[]"))])
    assert native and set(XLA_AUTOTUNE_KERNELS) - set(native) == {"DelayKernel"} and set(native) <= set(XLA_AUTOTUNE_KERNELS)


def test_a_sampled_totals_interval_is_shown_as_its_half_width_in_percent():
    """Sampled timing: the ±% column is the 90 % interval's half-width as a percentage of
    the total (10 ms, 9.5 to 10.5 ms: ±5.0), next to the launches timed; a kernel none of
    whose launches was timed shows "?", one without an interval "-"."""
    def stat(name, total, lo, hi, timed):
        return KernelStat(name=name, demangled="", calls=100, total_ns=total, avg_ns=total / 100, min_ns=1, max_ns=2,
                          grid=[1, 1, 1], block=[32, 1, 1], percent=0.0, timed=timed, total_lo_ns=lo, total_hi_ns=hi)
    kernels = [stat("gemm", 10_000_000, 9_500_000, 10_500_000, 40), stat("skewed", 4_000_000, 3_000_000, 4_400_000, 8),
               stat("untimed", 1_000_000, 1_000_000, 1_000_000, 0), stat("exact", 500_000, None, None, None)]
    result = ProfileResult(kernels=kernels, total_ns=15_500_000, dispatches=400, processes=1, timing="sampled")
    lines = format_table(result, width=120)
    assert lines[0].split()[4:8] == ["ms", "±%", "%", "timed"]
    cells = {line.split()[1]: line.split() for line in lines[1:]}
    assert cells["gemm"][4:7] == ["5.0", "0.0", "40"]
    assert cells["skewed"][4] == "17.5"  # (4.4 - 3.0) / 2 of 4.0 ms
    assert cells["untimed"][4] == "?" and cells["exact"][4] == "-"
