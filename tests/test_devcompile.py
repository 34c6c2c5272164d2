"""kerncap.recompile.devcompile units: the TU reduction on preprocessed text (as `gcc -E` with
nvcc's device macros writes it), the explicit instantiation spelled from a demangled
name, the module id in internal-linkage names, nvcc's steps and cicc's time trace.
End to end with real nvcc: test_recompile_reduced.py."""

from __future__ import annotations

import json
import shutil

import pytest

from kerncap.recompile.devcompile import instantiate, module_id, phases
from kerncap.recompile.devcompile.reduce import INSTANTIATION_FILE, ReduceError, reduce_tu, segments

USER = "/r/source/k.cu"
SYS = "/usr/include/thing.h"
DEV = "__attribute__((device))"
GLOBAL = "__attribute__((global))"


def ii(*parts: tuple[str, str]) -> str:
    """A preprocessed TU: (file, code) stretches, each after a line marker."""
    return "".join(f'# 1 "{path}"\n{code}\n' for path, code in parts)


def user(path: str) -> bool:
    return path.startswith("/r/source/")


def reduce(code: str, kernel: str = "k", **kw):
    return reduce_tu(ii((USER, code)), user, kernel, **kw)


def body_of(text: str, name: str) -> str:
    start = text.index(name)
    open_ = text.index("{", start)
    depth = 0
    for i in range(open_, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_ : i + 1]
    raise AssertionError(name)


def test_host_bodies_are_blanked_device_code_kept():
    code = f"""
template <int N> {GLOBAL} void k(float* y) {{ y[0] = helper(both(N)); }}
{DEV} float helper(float x) {{ return x * 2; }}
{DEV} {"__attribute__((host))"} float both(float x) {{ return x + 1; }}
void launch(float* y) {{
  k<1><<<1, 1>>>(y);
  k<2><<<1, 1>>>(y);
}}
int main() {{ launch(nullptr); return 0; }}
"""
    r = reduce(code)
    assert "k<1>" not in r.text and "k<2>" not in r.text  # the launches are gone
    assert "return x * 2" in r.text and "return x + 1" in r.text and "y[0] = helper(both(N))" in r.text
    assert body_of(r.text, "void launch").startswith("{ __builtin_unreachable();")
    assert r.stubbed == 2
    assert r.text.count("\n") == ii((USER, code)).count("\n")  # every line keeps its number


def test_blanked_bodies_keep_their_line_markers():
    text = ii((USER, "void host() {\n  a();\n#pragma unroll\n  b();"), (SYS, "int sys_helper();"),
              (USER, "  c();\n}\nint after;"))
    r = reduce_tu(text, user, "k")
    assert r.text.count("\n") == text.count("\n")
    assert [ln for ln in r.text.splitlines() if ln.startswith("# ")] == [ln for ln in text.splitlines() if ln.startswith("# ")]
    assert "a();" not in r.text and "c();" not in r.text and "#pragma" not in r.text
    assert "int after;" in r.text


def test_other_kernels_blanked_captured_and_named_templates_kept():
    code = f"""
{GLOBAL} void other(float* y) {{ y[0] = 1; }}
{GLOBAL} void k(float* y) {{ y[0] = 2; }}
template <class T> {GLOBAL} void tmpl(T* y) {{ y[0] = 3; }}
template <class T> {GLOBAL} void unnamed(T* y) {{ y[0] = 4; }}
struct Table {{ void (*entry)(float*) = tmpl<float>; }};
"""
    r = reduce(code)
    assert "y[0] = 1" not in r.text and "y[0] = 2" in r.text and "y[0] = 3" in r.text
    assert "unnamed" not in r.text and "y[0] = 4" not in r.text  # nothing kept names it: gone with its head


def test_constexpr_deduced_and_enclosing_functions_are_kept():
    code = """
constexpr int rows(int n) { return n * 2; }
static auto make() { return 3; }
int table[rows(2)];
static int made = make();
auto trailing() -> int { return 4; }
void run_lambda() { launch([] { return 5; }); }
"""
    r = reduce(code, keep_functions=frozenset({"run_lambda"}))
    for kept in ("return n * 2", "return 3", "return 5"):
        assert kept in r.text
    assert "return 4" not in r.text  # a trailing return type is no deduction


def test_classes_namespaces_and_extern_c_are_entered():
    code = f"""
namespace a {{ inline namespace v1 {{
struct Launcher : Base<(1 > 0)> {{
  int x{{3}};
  Launcher() : x(4) {{ setup(); }}
  void go() const noexcept {{ launch(); }}
  {DEV} void op(int i) const {{ data[i] = 1; }}
 public:
  static int count() {{ return 7; }}
}};
}} }}
extern "C" {{
void c_api() {{ launch(); }}
{GLOBAL} void k(int* p) {{ p[0] = 9; }}
}}
"""
    r = reduce(code)
    assert "int x{3}" in r.text  # a member initializer is no body
    assert "data[i] = 1" in r.text and "p[0] = 9" in r.text
    for blanked in ("setup()", "launch()", "return 7"):
        assert blanked not in r.text


def test_initializers_lambdas_and_operators():
    code = """
int table[] = {1, 2, 3};
auto f = [](int x) { return x + 10; };
bool operator==(const A& a, const A& b) { return compare(a, b); }
struct S { int v; } s = {1};
enum class E : int { a, b };
"""
    r = reduce(code)
    assert "{1, 2, 3}" in r.text and "return x + 10" in r.text and "{ a, b }" in r.text
    assert "compare(a, b)" not in r.text


def test_strings_raw_strings_digraphs_and_pragmas():
    code = '''
const char* s = "}{";
void h() { const char* r = R"x(}{)x"; puts("{"); char c = '}'; int n = 1'000; }
void g() <% launch(); %>
#pragma nv_diag_suppress 177
{DEV} void d() {{ work(); }}
{GLOBAL} void k() {{ d(); }}
'''.replace("{DEV}", DEV).replace("{GLOBAL}", GLOBAL).replace("{{", "{").replace("}}", "}")
    r = reduce(code)
    assert '"}{"' in r.text and "launch()" not in r.text and 'puts("{")' not in r.text
    assert "work()" in r.text


def test_literals_that_hold_braces_or_quotes_at_any_place():
    """The scan passes literals and directives whole wherever they stand: a directive on
    a segment's first line (right after gcc's marker), digit separators in hex and
    exponent forms (their quote opens no character literal), prefixed character and raw
    literals, and the inside of a body, where only braces are followed."""
    text = ii((SYS, "int sys();"),
              (USER, "#pragma kerncap_probe {\nvoid h() { launch(1); }"),
              (USER, f"void g() {{ int a = 0x1'F'F, b = 1'000'000; float e = 1.5e+1'0f; char c = u8'{{'; "
                     f"const char* r = u8R\"d(}}{{)d\"; launch(2); }}\n{DEV} void d() {{ work(); }}\n"
                     f"{GLOBAL} void k() {{ d(); }}"))
    r = reduce_tu(text, user, "k")
    assert "#pragma kerncap_probe {" in r.text and "launch(1)" not in r.text and "launch(2)" not in r.text
    assert "work()" in r.text and r.stubbed == 2


def test_functions_nothing_kept_names_are_blanked_transitively():
    """The reduction follows names from what stays (the kernel, types, globals, heads) to
    the functions they name, transitively, and from the library headers' code (which may
    call a user's function by argument-dependent lookup); the rest of the device,
    constexpr and template functions lose their bodies (a template its whole definition,
    head included). Host bodies name nothing; operators always stay."""
    code = f"""
constexpr int cfg_a(int t) {{ return t * 3; }}
constexpr int cfg(int t) {{ return cfg_a(t); }}
constexpr int table_size() {{ return 8; }}
constexpr int cfg_b(int n) {{ return n + 100; }}
constexpr int cfg_c(int n) {{ return n + 200; }}
{DEV} int ov(int x) {{ return x + 300; }}
{DEV} int ov(float x) {{ return 400; }}
{DEV} float used(float x) {{ return x + cfg(1) + ov(1); }}
{DEV} float unused_dev(float x) {{ return x - 1; }}
{DEV} float sized(float (&a)[table_size()]) {{ return a[0] + 500; }}
#pragma pack(push, 1)
template <int N> __attribute__((launch_bounds(cfg_b(N)))) {GLOBAL} void other(float* y) {{
#pragma unroll
  for (int i = 0; i < N; ++i) y[i] = N;
}}
#pragma message "static_assert"
static_assert(cfg_c(2) == 202, "layout");
static_assert_like kept_variable;
void host() {{ unused_dev(1); }}
struct V {{ float x; }};
{DEV} V operator+(V a, V b) {{ return {{a.x + b.x + 600}}; }}
{DEV} void swap(V& a, V& b) {{ V t = a; a = b; b = t; }}
{GLOBAL} void k(float* y) {{ y[0] = used(2); }}
"""
    library = "template <class T> void sort2(T& a, T& b) { if (b < a) swap(a, b); }"  # calls swap by ADL
    r = reduce_tu(ii((SYS, library), (USER, code)), user, "k")
    text = r.text
    for kept in ("return t * 3", "return cfg_a(t)", "return x + 300", "return 400", "return 8", "a.x + b.x + 600",
                 "V t = a", "y[0] = used(2)"):
        assert kept in text, kept
    for gone in ("return x - 1", "a[0] + 500", "n + 100", "n + 200", "y[i] = N", "void other", "static_assert(",
                 "unused_dev(1)", "#pragma unroll"):
        assert gone not in text, gone
    assert "float sized(float (&a)[table_size()])" in text  # a non-template's head stays, and what it evaluates
    assert "#pragma pack(push, 1)" in text  # before the template's first word: it applies to what follows
    assert '#pragma message "static_assert"' in text and "static_assert_like kept_variable;" in text
    assert (r.unused, r.asserts, r.stubbed) == (5, 1, 1)
    assert text.count("\n") == ii((SYS, library), (USER, code)).count("\n")


def test_a_template_whose_head_holds_another_files_code_keeps_its_head():
    text = ii((USER, "template <int N>"), (SYS, "int sys_thing;"), (USER, f"{GLOBAL} void other(float* y) {{ y[0] = N; }}"),
              (USER, f"{GLOBAL} void k(float* y) {{ y[0] = 1; }}"))
    r = reduce_tu(text, user, "k")
    assert "int sys_thing;" in r.text and "template <int N>" in r.text and "y[0] = N" not in r.text
    assert r.unused == 1


def test_system_headers_are_left_alone_and_heads_span_markers():
    text = ii((SYS, "void sys_launch() { k<7><<<1,1>>>(); }"),
              (USER, f"{DEV}"),
              (USER, "float split_head() { return 1; }"),  # gcc split the declaration with a marker
              (USER, f"{GLOBAL} void k(float* y) {{ y[0] = split_head(); }}"),
              (USER, "void host() { k<8><<<1,1>>>(); }"))
    r = reduce_tu(text, user, "k")
    assert "k<7>" in r.text  # not the user's file: untouched
    assert "return 1" in r.text  # __device__ came before the marker: still a device function
    assert "k<8>" not in r.text


def test_instantiation_is_appended_after_a_marker():
    r = reduce(f"template <int N> {GLOBAL} void k() {{}}", instantiation="template __attribute__((global)) void k<3>();")
    assert r.text.rstrip().endswith("void k<3>();")
    assert f'# 1 "{INSTANTIATION_FILE}"' in r.text


def test_the_sources_explicit_kernel_instantiations_are_left_out():
    """The TU's own `template __global__ void k<...>(...);` would instantiate the captured
    instance a second time (an error) and compile the others: blanked, lines kept; other
    explicit instantiations, specializations and `extern template` stay."""
    code = (f"template <class T, int N> {GLOBAL} __attribute__((launch_bounds(256))) void k(T* x);\n"
            f"template {GLOBAL} void k<float, 4>(float*);\n"
            f"namespace n {{ template\n {GLOBAL} void k2<int>(int*); }}\n"
            f"extern template {GLOBAL} void k<int, 1>(int*);\n"
            f"template <> {GLOBAL} void k<char, 1>(char*);\n"
            "template struct S<int>;\ntemplate void f<int>(int);\n")
    r = reduce(code, instantiation=f"template {GLOBAL} void k<float, 4>(float*);")
    lines = r.text.split("\n")
    assert lines[2] == ";" and lines[3] == "namespace n { " and lines[4] == "; }" and lines[5].startswith("extern")
    assert f"template <> {GLOBAL} void k<char, 1>" in r.text and "template struct S<int>;" in r.text
    assert "template void f<int>(int);" in r.text and r.instantiations_dropped == 2 and r.stubbed == 0
    assert reduce(code).instantiations_dropped == 0  # nothing instantiated in its place: kept


@pytest.mark.parametrize("code, why", [
    ("void f() { }\n}", "unbalanced"),
    ("if (x) { y(); }", "statement"),
    ("int f() try { return 1; } catch (...) { return 0; }", "statement"),
    ("void f() {", "unbalanced"),
])
def test_text_it_cannot_follow_is_refused(code, why):
    with pytest.raises(ReduceError, match=why):
        reduce(code)


def test_no_user_code_is_refused():
    with pytest.raises(ReduceError, match="no code from the reproducer"):
        reduce_tu(ii((SYS, "void f() {}")), user, "k")


def test_segments_report_file_and_line():
    text = '# 0 "/a.cu"\nx\n# 7 "/b.h" 1 3 4\ny\n#pragma once\nz\n# 3 "/a.cu" 2\nw\n'
    got = [(s.path, s.line, text[s.start : s.end]) for s in segments(text)]
    assert got == [("/a.cu", 0, "x\n"), ("/b.h", 7, "y\n#pragma once\nz\n"), ("/a.cu", 3, "w\n")]
    assert [s.path for s in segments(text, lambda p: p == "/a.cu")] == ["/a.cu", "/a.cu"]


# -- the explicit instantiation -----------------------------------------------------------

needs_cxxfilt = pytest.mark.skipif(shutil.which("c++filt") is None and shutil.which("cu++filt") is None,
                                   reason="needs c++filt")


@needs_cxxfilt
@pytest.mark.parametrize("mangled, expected", [
    ("_ZN3qmv13mul_mat_vec_qILNS_5qtypeE2ELi3ELb1EEEvPKvS3_PfNS_11fusion_argsEiiii",
     "template __attribute__((global)) void qmv::mul_mat_vec_q<(qmv::qtype)2, 3, true>"
     "(void const*, void const*, float*, qmv::fusion_args, int, int, int, int);"),
    ("_ZN10minikokkos4impl33cuda_parallel_launch_local_memoryINS0_11ParallelForI7Smooth3NS_11RangePolicyEEEEEvT_",
     "template __attribute__((global)) void minikokkos::impl::cuda_parallel_launch_local_memory"
     "<minikokkos::impl::ParallelFor<Smooth3, minikokkos::RangePolicy> >"
     "(minikokkos::impl::ParallelFor<Smooth3, minikokkos::RangePolicy>);"),
    ("_ZN12_GLOBAL__N_11kIiEEvT_", "namespace { template __attribute__((global)) void k<int>(int); }"),
    ("_Z4fillIJifEEvDpT_", "template __attribute__((global)) void fill<int, float>(int, float);"),
    # ggml's unary.cu: a static device function as the template argument, which nvcc
    # qualifies with its module's _INTERNAL_… name (fell back to the whole TU before)
    ("_Z21unary_gated_op_kernelIXadL_ZN44_INTERNAL_305daebf_8_unary_cu_f8002d80_2729711op_gelu_erfEfEE6__halfEvPKT0_S4_PS2_llll",
     "template __attribute__((global)) void unary_gated_op_kernel<&op_gelu_erf, __half>"
     "(__half const*, __half const*, __half*, long, long, long, long);"),
])
def test_instantiation_spelling(mangled, expected):
    assert instantiate.spell(mangled).instantiation == expected


@needs_cxxfilt
def test_the_address_of_a_function_templates_instance_is_spelled_as_cpp():
    """ggml's getrows.cu: `&(void f<T>(…))` as the demangler writes a function template's
    instance passed as a template argument is `&f<T>` in C++ (the whole TU was compiled
    before). Only the template-id is asserted: the demangler reads nvcc's mangling of one
    parameter (uint3) oddly, and the recompile's check of the mangled name guards that."""
    mangled = ("_Z13k_get_rows_kqI6__halfXadL_ZN47_INTERNAL_387c8958_10_getrows_cu_f8002d80_2081617dequantize_iq4_nl"
               "IS0_EEvPKvlPT_iEEEvS4_PKiS6_llS_mmmmmmmmm")
    assert instantiate.spell(mangled).instantiation.startswith(
        "template __attribute__((global)) void k_get_rows_kq<__half, &dequantize_iq4_nl<__half>>(void const*, ")


@needs_cxxfilt
def test_non_templates_need_no_instantiation():
    assert instantiate.spell("_Z6smoothPKfPfS0_ii") == instantiate.Spelling("smooth", "", frozenset())
    assert instantiate.spell("macro_fill") == instantiate.Spelling("macro_fill", "", frozenset())


@needs_cxxfilt
def test_lambda_instances_keep_the_enclosing_function():
    # kernel<main::{lambda(int)#1}>(main::{lambda(int)#1}, int)
    s = instantiate.spell("_Z6kernelIZ4mainEUliE_EvT_i")
    assert s.instantiation == "" and s.keep == frozenset({"main"}) and "lambda" in s.reason
    s = instantiate.spell("_Z6kernelIZ3runvE5LocalEvT_")  # a local struct: run()::Local
    assert s.keep == frozenset({"run"})


# -- module ids ---------------------------------------------------------------------------

CPO = "_ZN32_INTERNAL_1600f83a_6_eam_cu_main4cuda3std3__45__cpo5beginE"
IGNORE = "_ZN32_INTERNAL_1600f83a_6_eam_cu_main4cuda3std3__434_GLOBAL__N__1600f83a_6_eam_cu_main6ignoreE"


def test_module_id_is_cut_out_by_its_length():
    assert module_id.module_ids([CPO, IGNORE, "_Z1kPf"]) == {"_1600f83a_6_eam_cu_main"}
    assert module_id.module_id(["_Z1kPf"]) is None
    anon = "_ZN34_GLOBAL__N__e7fc82dc_4_g_cu__Z1kPf6anon_gE"
    assert module_id.module_ids([anon]) == {"_e7fc82dc_4_g_cu__Z1kPf"}


def test_names_of_several_translation_units_carry_no_one_module_id():
    """Globals of a module linked from two TUs (-rdc) carry two module ids: that is no one
    TU's id, so none is handed to cicc (a variant of one TU named after the other would
    have its globals restored from the other TU's). Mutation caught: one of the ids
    returned."""
    other_tu = "_ZN32_INTERNAL_e7fc82dc_4_g_cu__Z1kPf4cuda3std3__45__cpo5beginE"
    assert module_id.module_ids([CPO, other_tu]) == {"_1600f83a_6_eam_cu_main", "_e7fc82dc_4_g_cu__Z1kPf"}
    assert module_id.module_id([CPO, other_tu]) is None
    assert module_id.module_id([CPO, IGNORE]) == "_1600f83a_6_eam_cu_main"  # one TU's names, twice over
    assert module_id.global_names_for([CPO, other_tu], {CPO}) == {CPO: CPO, other_tu: None}


def test_globals_are_matched_under_another_module_id():
    other = "_e7fc82dc_4_g_cu__Z1kPf"
    renamed = module_id.rename(IGNORE, "_1600f83a_6_eam_cu_main", other)
    assert renamed == "_ZN32_INTERNAL_e7fc82dc_4_g_cu__Z1kPf4cuda3std3__434_GLOBAL__N__e7fc82dc_4_g_cu__Z1kPf6ignoreE"
    longer = module_id.rename(CPO, "_1600f83a_6_eam_cu_main", "_1fd5b349_17_functor_thrust_cu_main")
    assert longer.startswith("_ZN44_INTERNAL_1fd5b349_17_functor_thrust_cu_main4cuda")
    available = {module_id.rename(CPO, "_1600f83a_6_eam_cu_main", other), renamed, "scale"}
    assert module_id.global_names_for([CPO, IGNORE, "scale", "gone"], available) == {
        CPO: module_id.rename(CPO, "_1600f83a_6_eam_cu_main", other), IGNORE: renamed, "scale": "scale", "gone": None}


def test_the_compilers_own_constants_are_never_matched_into_a_variant():
    """`$str$1` (a string literal) and `__unnamed_7` are numbered per module: in ggml's
    reduced mmq TU `$str$1` was another string (100 bytes, the captured one 61). A variant
    keeps its own: no captured bytes are restored into them (the replay restores nothing
    where the name maps to None), apply mirrors none, and a reduced cubin that lacks them
    is not refused for it."""
    for name in ("$str", "$str$1", "$str$12", "__unnamed_7"):
        assert module_id.compiler_constant(name), name
    for name in ("str", "$string", "__unnamed_", "my__unnamed_1", "scale", "_ZN2ns4$strE"):
        assert not module_id.compiler_constant(name), name
    available = {"$str", "$str$1", "__unnamed_1", "scale"}
    assert module_id.global_names_for(["$str", "$str$1", "__unnamed_1", "scale"], available) == {
        "$str": None, "$str$1": None, "__unnamed_1": None, "scale": "scale"}


def test_the_replays_notes_on_the_compilers_constants_are_one():
    """The replay core says "module global X is not defined by V …" per global it does not
    restore; for the compiler's constants (up to 18 in a ggml module) that is one note,
    and a named global the variant lacks keeps its own."""
    from kerncap.replay.native_session import fold_constant_notes

    tail = ": nothing in it can reach the global, so it is not restored; it is compared as the variant leaves it"
    notes = [f"module global {n} is not defined by variant 3.cubin{tail}"
             for n in ("$str", "$str$1", "__unnamed_1", "__unnamed_2", "scale")] + ["sparse replay: 2 regions"]
    folded = fold_constant_notes(notes)
    assert folded[0] == f"module global scale is not defined by variant 3.cubin{tail}"
    assert folded[1] == "sparse replay: 2 regions"
    assert folded[2] == ("variant 3.cubin keeps its own compiler constants ($str, $str$1, __unnamed_1 and 1 more: "
                         "string literals and unnamed constants, numbered per build), not the captured module's")
    assert fold_constant_notes(notes[4:]) == notes[4:]


def test_object_names_of_non_cubins_are_unknown():
    assert module_id.object_names(b"//\n// Generated by NVIDIA NVVM Compiler\n.version 8.8\n") is None
    assert module_id.object_names(b"\x7fELF" + bytes(10)) is None


# -- nvcc's steps -------------------------------------------------------------------------


def test_cicc_trace_split(tmp_path):
    trace = tmp_path / "t.json"
    events = [{"args": {"detail": "x.ii"}, "dur": 400000, "name": "CUDA C++ Front-End", "ph": "X", "pid": 0, "tid": 0,
               "ts": 1}, {"args": {"detail": "f"}, "dur": 5, "name": "OptFunction", "ph": "X"},
              {"dur": 1250000, "name": "LibNVVM", "ph": "X", "pid": 0, "tid": 0, "ts": 5}]
    trace.write_text(json.dumps({"traceEvents": events}, separators=(",", ":")))
    assert phases.cicc_split(trace) == {"front end": 0.4, "NVVM": 1.25}
    assert phases.cicc_split(tmp_path / "missing.json") is None


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_plan_finds_nvccs_three_steps(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* y) { y[0] = 1; }\n")
    p = phases.plan(["nvcc", "-O3", "-lineinfo", "-arch=sm_90", "-cubin", "-o", str(tmp_path / "k.cubin"), str(src)],
                    tmp_path, tmp_path)
    assert (p.preprocess.kind, p.cicc.kind, p.ptxas.kind) == ("preprocess", "cicc", "ptxas")
    assert p.ii.parent == tmp_path and p.cubin == tmp_path / "k.cubin"
    argv = phases.cicc_argv(p, tmp_path / "reduced.ii", tmp_path / "id", ["--diag_suppress=177"], None)
    assert "--gen_module_id_file" not in argv and argv[argv.index("--module_id_file_name") + 1] == str(tmp_path / "id")
    assert str(tmp_path / "reduced.ii") in argv and str(p.ii) not in argv and argv[1] == "--diag_suppress=177"


def test_plan_strips_the_redirections_of_a_threaded_nvcc(tmp_path):
    """`nvcc --threads N` (CMake's CUDA_FLAGS often hold `-t N`) writes each step of its dry
    run with the shell's redirections of its output behind it (`> /tmp/tmpxft_…_stdout
    2>/tmp/tmpxft_…_stderr`, as nvcc 13.0 prints them, below): they are not the step's
    arguments, and cicc or ptxas handed `>` and a file name would fail. An nvcc stand-in
    prints that dry run (no toolkit needed). Mutation caught: the redirections kept."""
    tmp = "/tmp/tmpxft_000076d2_00000000-3_275c3e00"
    dry = "\n".join([
        "#$ _HERE_=/usr/local/cuda-13.0/bin",
        "#$ CICC_PATH=/usr/local/cuda-13.0/bin/../nvvm/bin",
        f'#$ gcc -D__CUDA_ARCH__=900 -E -x c++ -D__CUDACC__ -m64 "k.cu" -o "{tmp_path}/k.cpp1.ii"  '
        f"> {tmp}_1_stdout 2>{tmp}_1_stderr",
        f'#$ "$CICC_PATH/cicc" --c++17 -arch compute_90 -m64 --gen_module_id_file --module_id_file_name '
        f'"{tmp_path}/k.module_id" "{tmp_path}/k.cpp1.ii" -o "{tmp_path}/k.ptx" > {tmp}_2_stdout 2>{tmp}_2_stderr',
        f'#$ ptxas -arch=sm_90 -m64  "{tmp_path}/k.ptx"  -o "k.cubin"  > {tmp}_3_stdout 2>{tmp}_3_stderr', ""])
    (tmp_path / "dryrun.txt").write_text(dry)
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(f"#!/bin/sh\ncat '{tmp_path / 'dryrun.txt'}' >&2\n")
    nvcc.chmod(0o755)
    p = phases.plan([str(nvcc), "-t", "2", "-arch=sm_90", "-cubin", "-o", "k.cubin", "k.cu"], tmp_path, tmp_path,
                    env={"PATH": "/usr/bin:/bin"})
    assert p.preprocess.argv[-2:] == ["-o", f"{tmp_path}/k.cpp1.ii"]
    assert p.cicc.argv[0] == "/usr/local/cuda-13.0/bin/../nvvm/bin/cicc"
    assert p.cicc.argv[-2:] == ["-o", f"{tmp_path}/k.ptx"] and p.ptxas.argv[-2:] == ["-o", "k.cubin"]
    for step in (p.preprocess, p.cicc, p.ptxas):
        assert not any(">" in w or w.startswith(tmp) for w in step.argv), step.argv
    argv = phases.cicc_argv(p, tmp_path / "reduced.ii", tmp_path / "id", [], None)
    assert argv[-3:] == [str(tmp_path / "reduced.ii"), "-o", f"{tmp_path}/k.ptx"]


def test_exception_specifications_and_trailers():
    code = f"""
void a() noexcept {{ launch(1); }}
void b() noexcept(true) {{ launch(2); }}
struct S {{ int get() const volatile && noexcept {{ return launch(3); }} }};
{DEV} float c() noexcept {{ return 4.0f; }}
{GLOBAL} void k(float* y) {{ y[0] = c(); }}
"""
    r = reduce(code)
    assert "launch(" not in r.text and "return 4.0f" in r.text
