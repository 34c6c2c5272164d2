"""The reduced kernel-only recompile end to end with real nvcc (no GPU): the big
translation unit and the thrust TU of testapps/, small TUs for the fallbacks, and the
committed demo reproducer (a real H200 capture). Reproducers of testapps files:
tests/tu_reproducer.py. GPU evidence (extract, replay, validate byte-exact, timings): tests/gpu/test_recompile_big.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kerncap.cli import main
from kerncap.recompile.devcompile.build import CompileFailed
from kerncap.recompile.devcompile.module_id import module_id, object_names
from kerncap.errors import KerncapError
from kerncap.recompile import recompile
from kerncap.sources import cubin as cubinfo
from tu_reproducer import (BIG_FILES, BIG_KERNEL, CUDA, DEMO, EXPLICIT_FILES, EXPLICIT_KERNEL, FUNCTOR_FILES,
                           FUNCTOR_KERNEL, kernel_text, make_reproducer)

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("c++filt") is None,
                                reason="needs nvcc and c++filt")


# -- the big translation unit ----------------------------------------------------------------


@pytest.fixture(scope="module")
def big_tu(tmp_path_factory):
    return make_reproducer(tmp_path_factory.mktemp("big"), CUDA, BIG_FILES[0], BIG_FILES, BIG_KERNEL)


def test_big_translation_unit_compiles_only_the_captured_instance(big_tu):
    repro, captured, full_seconds = big_tu
    kernels = cubinfo.kernel_names(cubinfo.open_elf(captured, "captured"))
    assert len([k for k in kernels if "mul_mat_vec_q" in k]) == 96
    result = recompile(repro, split=True)
    assert result.mode == "reduced" and not result.notes, result.notes
    built = result.cubin.read_bytes()
    assert cubinfo.kernel_names(cubinfo.open_elf(built, "variant")) == {BIG_KERNEL, "_ZN3qmv13quantize_q8_1EPKfPNS_10block_q8_1Ei"}
    assert kernel_text(built, BIG_KERNEL) == kernel_text(captured, BIG_KERNEL), "not the captured kernel's code"
    assert result.summary.endswith("the kernel's machine code is identical to the captured one")
    assert list(result.phases) == ["preprocess", "reduce", "front end", "PTX", "ptxas"]
    print(f"big TU (96 instances): full nvcc -cubin {full_seconds:.2f} s, reduced recompile {result.seconds:.2f} s "
          f"({full_seconds / result.seconds:.1f}x); {result.phase_line()}")
    assert result.seconds * 3 < full_seconds


# -- an explicitly instantiated template declared with launch bounds in a header (issue 43) ------


def test_explicitly_instantiated_template_is_reduced_without_fallback(tmp_path):
    repro, captured, _ = make_reproducer(tmp_path, CUDA, EXPLICIT_FILES[0], EXPLICIT_FILES, EXPLICIT_KERNEL)
    assert "_ZN2ei7scale_nIfLi2EEEvPKT_PS1_i" in cubinfo.kernel_names(cubinfo.open_elf(captured, "captured"))
    result = recompile(repro, mode="reduced")  # no fallback: the source's own instantiation is not a second one
    assert result.mode == "reduced" and not result.notes, result.notes
    assert "the source's own 2 explicit kernel instantiations left out" in result.summary
    built = result.cubin.read_bytes()
    assert cubinfo.kernel_names(cubinfo.open_elf(built, "variant")) == {EXPLICIT_KERNEL, "_Z7init_eiP6__halfPfi"}
    assert kernel_text(built, EXPLICIT_KERNEL) == kernel_text(captured, EXPLICIT_KERNEL)
    assert result.summary.endswith("the kernel's machine code is identical to the captured one")


# -- a thrust TU: internal-linkage globals named after the TU -------------------------------------


@pytest.fixture(scope="module")
def functor_thrust(tmp_path_factory):
    return make_reproducer(tmp_path_factory.mktemp("thrust"), CUDA, FUNCTOR_FILES[0], FUNCTOR_FILES, FUNCTOR_KERNEL)


def test_thrust_translation_unit_keeps_the_captured_internal_names(functor_thrust):
    repro, captured, _ = functor_thrust
    wanted = {g["name"] for g in json.loads((repro / "capture" / "manifest.json").read_text())["globals"]}
    internal = {n for n in wanted if "_INTERNAL_" in n}
    assert len(internal) >= 30 and module_id(internal) is not None  # libcu++'s and thrust's CPOs, placeholders
    result = recompile(repro)
    assert result.mode == "reduced", result.notes
    built = result.cubin.read_bytes()
    assert wanted <= object_names(built), sorted(wanted - object_names(built))[:3]
    assert kernel_text(built, FUNCTOR_KERNEL) == kernel_text(captured, FUNCTOR_KERNEL)
    print(f"thrust TU: reduced recompile {result.seconds:.2f} s; {result.phase_line()}")


# -- small TUs: fallbacks and the kinds of instances ----------------------------------------------

MINI = """\
#include <cstdio>
struct Twice {
  __device__ float operator()(float v) const { return 2.0f * v; }
};
template <class Op>
__global__ void scale(Op op, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = op(y[i]);
}
template <int N>
__global__ void other(float* y) { y[0] = N; }
static void run(float* y, int n) {
  scale<<<1, 32>>>(Twice{}, y, n);
  other<1><<<1, 1>>>(y);
  other<2><<<1, 1>>>(y);
}
int main() {
  run(nullptr, 0);
  std::printf("done\\n");
  return 0;
}
"""
MINI_KERNEL = "_Z5scaleI5TwiceEvT_Pfi"


@pytest.fixture
def mini(tmp_path):
    def make(source: str = MINI, kernel=MINI_KERNEL, extra: tuple[str, ...] = ()) -> tuple[Path, bytes, str]:
        tree = tmp_path / "tree"
        tree.mkdir(exist_ok=True)
        (tree / "mini.cu").write_text(source)
        repro, data, _ = make_reproducer(tmp_path / "r", tree, "mini.cu", ["mini.cu"], kernel, list(extra))
        return repro, data, json.loads((repro / "source" / "build.json").read_text())["kernel"]
    return make


def append(repro: Path, text: str) -> None:
    path = repro / "source" / "mini.cu"
    path.write_text(path.read_text() + text)


def test_small_template_instance_is_reduced(mini):
    repro, captured, _ = mini()
    result = recompile(repro)
    assert result.mode == "reduced" and "explicit instantiation" in result.summary
    assert cubinfo.kernel_names(cubinfo.open_elf(result.cubin.read_bytes(), "v")) == {MINI_KERNEL}
    assert kernel_text(result.cubin.read_bytes(), MINI_KERNEL) == kernel_text(captured, MINI_KERNEL)


TABLES = """\
__constant__ float coef[4] = {1, 2, 3, 4};
__device__ int table[8] = {1, 2, 3, 4, 5, 6, 7, 8};
__device__ int* rows = table;
static const __device__ unsigned short unused_grid[4] = {1, 2, 3, 4};
__constant__ float unused_coef[4];
__global__ void lookup(float* y) { y[threadIdx.x] = coef[threadIdx.x & 3] * rows[threadIdx.x & 7]; }
__global__ void other_tables(float* y) { y[0] = unused_grid[1] + unused_coef[0]; }
int main() { lookup<<<1, 32>>>(nullptr); other_tables<<<1, 1>>>(nullptr); return 0; }
"""


@pytest.mark.parametrize("mode", ["reduced", "full"])
def test_a_build_records_the_globals_its_kernel_reaches_and_apply_copies_only_those(mini, mode):
    """Every module global stays in the variant's cubin (ptxas keeps the unused ones) and
    nothing in the cubin says which a kernel uses; the PTX does. The build records what
    `lookup` reaches (`table` only through the pointer `rows`), and apply copies those
    three, not the other kernel's tables; an edit that reads another table is recorded
    by its own build."""
    from kerncap.capture.apply import mirrored, target_of
    from kerncap.reproducer.format import Capture
    from kerncap.reproducer.variants import read_reach

    repro, _, _ = mini(TABLES, kernel="_Z6lookupPf")
    captured = {g.name for g in Capture.open(repro).globals}
    assert {"coef", "table", "rows", "unused_grid", "unused_coef"} <= captured
    result = recompile(repro, mode=mode)
    assert result.mode == mode
    assert captured <= object_names(result.cubin.read_bytes())
    assert read_reach(result.cubin, "_Z6lookupPf") == {"coef", "table", "rows"}
    target = mirrored(target_of(Capture.open(repro)), result.cubin)
    assert sorted(n for n, _ in target.globals) == ["coef", "rows", "table"]
    assert set(target.unreached) == captured - {"coef", "table", "rows"}
    append(repro, "")
    path = repro / "source" / "mini.cu"
    path.write_text(path.read_text().replace("* rows[threadIdx.x & 7]", "* rows[threadIdx.x & 7] + unused_coef[1]"))
    edited = recompile(repro, mode=mode)
    assert read_reach(edited.cubin, "_Z6lookupPf") == {"coef", "table", "rows", "unused_coef"}


# An edit that is fine for the whole file but breaks the reduced one: after main, a
# using-directive makes `Twice` ambiguous where the explicit instantiation names it.
AMBIGUOUS_AT_THE_END = "namespace v2 { struct Twice {}; }\nusing namespace v2;\n"


def test_edit_that_breaks_only_the_reduced_compile_falls_back_and_says_so(mini, capsys):
    repro, captured, _ = mini()
    append(repro, AMBIGUOUS_AT_THE_END)
    assert main(["recompile", str(repro)]) == 0
    out = capsys.readouterr().out
    assert "the reduced compile failed" in out and "compiled the whole translation unit instead" in out
    assert '"Twice" is ambiguous' in out
    assert "kerncap's explicit instantiation of the captured kernel, 'template __attribute__((global)) void " \
           "scale<Twice>(Twice, float*, int);', was rejected" in out  # whose code failed, and which line
    cubins = sorted((repro / "variants").glob("*.cubin"))
    assert len(cubins) == 1 and kernel_text(cubins[0].read_bytes(), MINI_KERNEL) == kernel_text(captured, MINI_KERNEL)
    result = recompile(repro)
    assert result.mode == "full" and len(result.notes) == 1
    assert list(result.phases) == ["preprocess", "reduce", "reduced attempt", "front end + PTX", "ptxas"]
    with pytest.raises(KerncapError, match="reduced to the captured kernel"):
        recompile(repro, mode="reduced")  # --reduced: no fallback


def test_error_in_the_kernel_is_reported_at_once(mini):
    repro, _, _ = mini()
    path = repro / "source" / "mini.cu"
    path.write_text(path.read_text().replace("y[i] = op(y[i]);", "y[i] = op(y[i]) +;"))
    with pytest.raises(CompileFailed) as err:
        recompile(repro)
    message = err.value.message
    assert f"{path}(8): error: expected an expression" in message
    assert "reduced to the captured kernel; `kerncap recompile --full` compiles the whole file" in message
    assert not list((repro / "variants").glob("*.cubin"))


def test_source_the_reduction_cannot_follow_is_compiled_whole(mini):
    repro, _, _ = mini()
    append(repro, "int answer() try { return 42; } catch (...) { return 0; }\n")  # a function-try-block
    result = recompile(repro)
    assert result.mode == "full"
    assert result.notes and "could not be followed" in result.notes[0] and "statement" in result.notes[0]


LAMBDA = """\
template <class F>
__global__ void each(F f, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) f(i);
}
void run(float* y, int n) {
  each<<<1, 32>>>([=] __device__ (int i) { y[i] = 3.0f * y[i]; }, n);
  each<<<1, 32>>>([=] __device__ (int i) { y[i] = 4.0f; }, n);
}
"""


def first_instance(pattern: str):
    return lambda kernels: sorted(k for k in kernels if pattern in k)[0]


def test_lambda_instance_keeps_the_function_that_launches_it(mini):
    repro, captured, kernel = mini(LAMBDA, kernel=first_instance("each"), extra=("--extended-lambda",))
    result = recompile(repro)
    assert result.mode == "reduced" and "instantiated by run" in result.summary, (result.notes, result.summary)
    assert kernel_text(result.cubin.read_bytes(), kernel) == kernel_text(captured, kernel)


ANON = """\
namespace {
template <int N>
__global__ void bump(int* p) { p[0] += N; }
}
void go(int* p) { bump<5><<<1, 1>>>(p); bump<6><<<1, 1>>>(p); }
"""


def test_anonymous_namespace_instance_keeps_its_captured_name(mini):
    repro, _, kernel = mini(ANON, kernel=first_instance("ILi5E"))
    assert "_GLOBAL__N_" in kernel  # the name embeds the TU's module id (a hash of its path)
    result = recompile(repro)  # the copy has another path: without the captured id the name would differ
    assert result.mode == "reduced", result.notes
    assert kernel in cubinfo.kernel_names(cubinfo.open_elf(result.cubin.read_bytes(), "v"))


# -- the committed demo reproducer (a real H200 capture of testapps' smooth) ------------------


def test_demo_reproducer_reduced_and_full_compile_the_same_kernel(tmp_path, capsys):
    repro = tmp_path / "demo"
    shutil.copytree(DEMO, repro)
    kernel = json.loads((repro / "source" / "build.json").read_text())["kernel"]
    assert main(["recompile", str(repro), "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "reduced translation unit:" in out
    assert "time: preprocess" in out and "front end" in out and "ptxas" in out and "no link step" in out
    reduced = sorted((repro / "variants").glob("*.cubin"), key=lambda p: int(p.stem))[-1]
    full = recompile(repro, mode="full")  # cicc not traced: one phase (the trace costs it ~13 %)
    assert full.mode == "full" and list(full.phases) == ["preprocess", "front end + PTX", "ptxas"]
    assert kernel_text(reduced.read_bytes(), kernel) == kernel_text(full.cubin.read_bytes(), kernel)
    assert main(["recompile", str(repro), "--json", "--full"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["mode"] == "full" and set(data["phases"]) == {"preprocess", "front end + PTX", "ptxas"}
    assert main(["recompile", str(repro), "--json", "--full", "--verbose"]) == 0  # --verbose: split
    assert set(json.loads(capsys.readouterr().out)["phases"]) == {"preprocess", "front end", "PTX", "ptxas"}
