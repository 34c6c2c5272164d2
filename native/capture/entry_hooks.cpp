// libkerncap_entry.so: the driver's entry points, interposed without CUPTI (issue 18,
// docs/interposer.md "Entry-point interception").
//
// Preloaded into a captured app (LD_PRELOAD, set by `kerncap extract`). Every route by
// which an app reaches a driver call goes through here:
//   * cudart (static, or inside libtorch) and NCCL ask cuGetProcAddress, which they
//     fetch with dlsym (docs/facts.md §21);
//   * Triton and PyTorch's own driver API table dlsym libcuda by name;
//   * code linked against libcuda calls the exported names through its PLT.
// For each call in watched_list.hpp the app is handed a wrapper, chosen by the address
// the driver returned (so versions and _ptsz/_ptds variants map exactly as CUPTI's
// callback ids do); anything else passes through untouched. Until the injection library
// attaches a dispatcher (inside cuInit, in capture mode), a wrapper is one load and a
// jump. Attached, it hands the dispatcher the same CUpti_CallbackData CUPTI would, at
// the call's entry and exit, so one dispatcher serves both paths; the app's plain kernel
// launches (not the target's) are counted and flagged here, inline, from data the
// injection library laid out for it (entry_abi.hpp: the launch fast path).
//
// This library links nothing but libc and libdl: it is loaded into every process the
// app starts (compilers included) and must cost them nothing.
#include <cupti.h>  // the callback data type, the cbids and generated_cuda_meta.h; no libcupti
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>
#include <type_traits>

#include "entry_abi.hpp"
#include "launch_kinds.hpp"
#include "watched_calls.hpp"
#include "watched_list.hpp"

#undef cuGetProcAddress  // cuda.h maps it to _v2; both ABIs are defined here

#define KC_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using Dispatch = void (*)(CUpti_CallbackId, const CUpti_CallbackData*);
using DlsymFn = void* (*)(void*, const char*);
using GetProcFn = CUresult (*)(const char*, void**, int, cuuint64_t);
using GetProcV2Fn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using CtxGetCurrentFn = CUresult (*)(CUcontext*);

struct Table;

// What every wrapper reads, in one cache line (issue 31: after the driver's launch each
// line a path touches can be a miss, docs/facts.md §34; the fast path's lines measured
// ~0 ns on the H200, §36).
struct alignas(64) Hooks {
  std::atomic<Table*> table{nullptr};  // libcuda's entry points (table() below)
  std::atomic<Dispatch> dispatch{nullptr};
  // The launch fast path's switches, epoch and quiesce word (entry_abi.hpp), set by the
  // injection library: read by the same launches that read the two above.
  kc_entry::Gate gate;
  // tl_block's offset from the thread pointer (the same in every thread: static TLS), so
  // the fast path addresses it %fs-relative without loading the offset from the GOT, a
  // line of its own (x86-64; elsewhere tl_block is read as the compiler reads it).
  intptr_t tls_offset = 0;
  // Set by a dispatcher that resolves a launch's context itself where it reads it
  // (capture mode: only the target's launches and a sequence's do): the wrappers then
  // skip cuCtxGetCurrent on every launch, a driver call the armed path paid for nothing.
  std::atomic<bool> lazy_launch_context{false};
};
Hooks g_hooks;
std::atomic<uint64_t> g_handed{0};  // wrappers handed out (diagnostics)

// The injection library's per-thread state (entry_abi.hpp kThreadBlock). initial-exec:
// this library is only ever preloaded, so its TLS is static (a %fs-relative address, no
// __tls_get_addr); zero at every thread's start, as the injection library expects.
alignas(64) __attribute__((tls_model("initial-exec"))) thread_local unsigned char tl_block[kc_entry::kThreadBlock];

struct Entry {
  const char* name;
  CUpti_CallbackId cbid;
  void* wrapper;
  bool old_abi;  // an old version cuda.h no longer declares by this name (kc_v1_*)
  bool launch;   // a kernel launch (cuLaunchKernel, ...Ex, ...Cooperative, their _ptsz)
};

enum Slot : size_t {
#define KC_SLOT(name, proto, roles) kSlot_##name,
  KC_WATCHED_CALLS(KC_SLOT)
#undef KC_SLOT
      kSlotCount
};

extern Entry g_entries[kSlotCount];

std::atomic<DlsymFn> g_real_dlsym{nullptr};

DlsymFn real_dlsym() {
  DlsymFn d = g_real_dlsym.load(std::memory_order_acquire);
  if (!d) {
    void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    d = reinterpret_cast<DlsymFn>(p);
    g_real_dlsym.store(d, std::memory_order_release);  // every thread finds the same one
  }
  return d;
}

// Should a driver export an old name as an alias of the new call, the new call's slot
// sorts first (its params struct is the one that matches the arguments).
struct ByAddress {
  void* real;
  bool old_abi;
  size_t slot;
  bool operator<(const ByAddress& o) const {
    return real != o.real ? std::less<void*>()(real, o.real) : old_abi < o.old_abi;
  }
};

// libcuda's own entry points, resolved once it is loaded and published whole. No lock:
// the first lookups happen inside dlopen's initialisers and under the loader's lock, so
// threads that race each build the same table and the first one published wins.
struct Table {
  void* real[kSlotCount];
  ByAddress by_address[kSlotCount];  // sorted, for cuGetProcAddress and dlsym results
  size_t n;
  GetProcFn gpa;
  GetProcV2Fn gpa2;
  CtxGetCurrentFn ctx_current;
};
// The table, or null while libcuda is not loaded.
const Table* table() {
  Table* t = g_hooks.table.load(std::memory_order_acquire);
  if (t) return t;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return nullptr;
  DlsymFn d = real_dlsym();
  auto* fresh = new (std::nothrow) Table{};
  if (fresh && d) {
    for (size_t i = 0; i < kSlotCount; ++i) {
      fresh->real[i] = d(h, g_entries[i].name);
      if (fresh->real[i]) fresh->by_address[fresh->n++] = {fresh->real[i], g_entries[i].old_abi, i};
    }
    std::sort(fresh->by_address, fresh->by_address + fresh->n);
    fresh->gpa = reinterpret_cast<GetProcFn>(d(h, "cuGetProcAddress"));
    fresh->gpa2 = reinterpret_cast<GetProcV2Fn>(d(h, "cuGetProcAddress_v2"));
    fresh->ctx_current = reinterpret_cast<CtxGetCurrentFn>(d(h, "cuCtxGetCurrent"));
  }
  dlclose(h);  // NOLOAD took a reference; libcuda stays loaded by whoever loaded it
  if (!fresh || !d) {
    delete fresh;
    return nullptr;
  }
  Table* expected = nullptr;
  if (g_hooks.table.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return fresh;
  delete fresh;  // another thread published the same table first
  return expected;
}

// The wrapper for a pointer the driver handed out, or the pointer itself.
void* substitute(const Table& t, void* p) {
  auto end = t.by_address + t.n;
  auto it = std::lower_bound(t.by_address, end, ByAddress{p, false, 0});
  if (it == end || it->real != p) return p;
  g_handed.fetch_add(1, std::memory_order_relaxed);
  return g_entries[it->slot].wrapper;
}

// initial-exec: this library is only ever preloaded, so its TLS is static (no
// __tls_get_addr on every driver call).
__attribute__((tls_model("initial-exec"))) thread_local uint32_t tl_correlation = 0;

template <class Call>
CUresult around(const Table& t, size_t slot, Dispatch d, const void* params, Call&& call) {
  const Entry& e = g_entries[slot];
  CUresult ret = CUDA_ERROR_UNKNOWN;
  CUpti_CallbackData cb{};
  cb.callbackSite = CUPTI_API_ENTER;
  cb.functionName = e.name;
  cb.functionParams = params;
  cb.functionReturnValue = &ret;
  // Unique per thread: the dispatcher pairs a launch's exit with its entry on one thread.
  cb.correlationId = ++tl_correlation;
  CUcontext ctx = nullptr;
  if (t.ctx_current && !(e.launch && g_hooks.lazy_launch_context.load(std::memory_order_relaxed))) t.ctx_current(&ctx);
  cb.context = ctx;
  d(e.cbid, &cb);
  ret = call();
  cb.callbackSite = CUPTI_API_EXIT;
  d(e.cbid, &cb);
  return ret;
}

constexpr bool launch_call(CUpti_CallbackId cbid) {
#define KC_IS_LAUNCH(call, params, form, per_thread, coop) cbid == CUPTI_DRIVER_TRACE_CBID_##call ||
  return KC_LAUNCH_KINDS(KC_IS_LAUNCH) false;
#undef KC_IS_LAUNCH
}

// Each slot's cbid at compile time: a launch's wrapper is built with its fast path.
constexpr CUpti_CallbackId kCbid[kSlotCount] = {
#define KC_CBID(name, proto, roles) CUPTI_DRIVER_TRACE_CBID_##name,
    KC_WATCHED_CALLS(KC_CBID)
#undef KC_CBID
};

// The watched calls with the kLaunch role are exactly the launch kinds (launch_kinds.hpp).
#define KC_LAUNCH_ROLE(name, proto, roles)                                              \
  static_assert(bool((roles) & kLaunch) == launch_call(CUPTI_DRIVER_TRACE_CBID_##name), \
                #name ": its kLaunch role (watched_list.hpp) and launch_kinds.hpp disagree");
namespace roles {
using namespace kc;  // the roles' names (watched_calls.hpp)
KC_WATCHED_CALLS(KC_LAUNCH_ROLE)
}  // namespace roles
#undef KC_LAUNCH_ROLE


// The launch fast path (entry_abi.hpp), the quiesce's reader side included: null, take
// the full path; kCounted, counted (not armed: nothing to do when the launch returns);
// else the slot, counted, whose flag is raised until the launch returns.
kc_entry::SlotHot* const kCounted = reinterpret_cast<kc_entry::SlotHot*>(uintptr_t(1));
// What the fast path reads of the calling thread's ThreadHot: its slot and table, and
// guard and shared_depth as one word (nonzero: kerncap's own call, or a nested one).
struct ThreadFast {
  kc_entry::SlotHot* slot;
  kc_entry::LaunchTable* table;
  uint64_t busy;
};
static_assert(offsetof(kc_entry::ThreadHot, guard) == 0 && offsetof(kc_entry::ThreadHot, shared_depth) == 4 &&
                  offsetof(kc_entry::ThreadHot, fast_slot) == 8 && offsetof(kc_entry::ThreadHot, fast_table) == 16,
              "thread_fast reads ThreadHot by these offsets");

__attribute__((always_inline)) inline ThreadFast thread_fast() {
#if defined(__x86_64__)
  const intptr_t off = g_hooks.tls_offset;
  ThreadFast h;
  uint64_t flags;
  asm("movq %%fs:(%1), %0" : "=r"(flags) : "r"(off));
  asm("movq %%fs:8(%1), %0" : "=r"(h.slot) : "r"(off));
  asm("movq %%fs:16(%1), %0" : "=r"(h.table) : "r"(off));
  h.busy = flags & 0xffffffff000000ffull;  // guard (byte 0) and shared_depth (bytes 4-7)
  return h;
#else
  const auto& t = *reinterpret_cast<const kc_entry::ThreadHot*>(tl_block);
  return {t.fast_slot, t.fast_table, uint64_t(t.guard) | uint64_t(t.shared_depth != 0)};
#endif
}

// KC_FAST_VARIANT: bench/fast_variants.sh builds libkerncap_entry.so stopping the fast
// path early, to place its cost on the H200 (bench/paired.py against each build). Never
// built into the package: 0, the whole path.
//   1 after the Gate (no TLS, slot or table)   2 after the table lookup (reads only)
//   3 after counting (no quiesce flag: the driver call is a tail call)
//   4 counting and a plain call of the driver, no flag (what the call itself costs)
//   5 the flag raised and lowered before a tail call (what the stores and load cost)
// (docs/facts.md §36 has what each cost on the H200.)
#ifndef KC_FAST_VARIANT
#define KC_FAST_VARIANT 0
#endif

// Laid out for the common case, a plain launch while armed: each branch is hinted, so
// the path is straight code over as few cache lines as the compiler can make it.
__attribute__((always_inline)) inline kc_entry::SlotHot* fast_enter(const void* f) {
  const kc_entry::Gate& gate = g_hooks.gate;
  if (__builtin_expect(!gate.on.load(std::memory_order_acquire), 0)) return nullptr;
  if constexpr (KC_FAST_VARIANT == 1) return kCounted;
  const ThreadFast h = thread_fast();
  kc_entry::SlotHot* slot = h.slot;
  if (__builtin_expect(!slot || h.busy, 0)) return nullptr;
  if (__builtin_expect(slot->launch_epoch != gate.epoch.load(std::memory_order_acquire), 0)) return nullptr;
  kc_entry::FastLaunch* e = kc_entry::launch_for(*h.table, f);
  if (__builtin_expect(!e, 0)) return nullptr;
  if constexpr (KC_FAST_VARIANT == 2) return kCounted;
  const bool armed = KC_FAST_VARIANT != 3 && KC_FAST_VARIANT != 4 && gate.armed.load(std::memory_order_acquire);
  if (__builtin_expect(armed, 1)) {  // Quiesce::enter; a capture pending: the full path waits (and counts)
    if (__builtin_expect(gate.fence.load(std::memory_order_relaxed), 0)) {
      slot->inside.store(1, std::memory_order_seq_cst);
    } else {
      slot->inside.store(1, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the writer's membarrier is the fence
    }
    if (__builtin_expect(gate.pending.load(std::memory_order_seq_cst) != 0, 0)) {
      slot->inside.store(0, std::memory_order_release);
      return nullptr;
    }
    if constexpr (KC_FAST_VARIANT == 5) slot->inside.store(0, std::memory_order_release);
  }
  kc_entry::bump(slot->launches);
  kc_entry::bump(e->count);
  if constexpr (KC_FAST_VARIANT == 3 || KC_FAST_VARIANT == 5) return kCounted;
  if constexpr (KC_FAST_VARIANT == 4) return slot;
  return armed ? slot : kCounted;
}

// The launched function of a launch call's arguments.
template <class Params>
const void* launched(const Params& p) {
  return p.f;
}

// A launch call's argument, the function replaced (apply mode): each launch call takes
// exactly one CUfunction.
template <class X>
X with_function(X x, CUfunction f) {
  if constexpr (std::is_same_v<X, CUfunction>) return f;
  else return x;
}

template <size_t S, class Params, class Fn>
struct Wrap;

template <size_t S, class Params, class... A>
struct Wrap<S, Params, CUresult (*)(A...)> {
  using Real = CUresult (*)(A...);
  static CUresult CUDAAPI call(A... a) {
    const Table* t = g_hooks.table.load(std::memory_order_acquire);
    if (__builtin_expect(!t, 0)) return first(a...);
    return go(*t, a...);
  }
  // The same before the table is published (it may be built here).
  __attribute__((noinline, cold)) static CUresult first(A... a) {
    const Table* t = table();
    if (!t) return CUDA_ERROR_NOT_INITIALIZED;  // no driver loaded: nothing could have run
    return go(*t, a...);
  }
  // Pass-through without a dispatcher; with one, a plain kernel launch takes the fast
  // path here, and anything it declines, and every other call, the full path. The full
  // path is its own function so that this one keeps a small frame: unarmed, the fast
  // path ends in a tail call, as the pass-through does.
  __attribute__((always_inline)) static inline CUresult go(const Table& t, A... a) {
    Real real = reinterpret_cast<Real>(t.real[S]);
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;  // the driver has no such entry point
    Dispatch d = g_hooks.dispatch.load(std::memory_order_acquire);
    if (!d) return real(a...);
    if constexpr (launch_call(kCbid[S])) {
      kc_entry::SlotHot* slot = fast_enter(launched(Params{a...}));
      if (__builtin_expect(slot == kCounted, 0)) return real(a...);
      if (__builtin_expect(slot != nullptr, 1)) {
        const CUresult r = real(a...);
        slot->inside.store(0, std::memory_order_release);  // Quiesce::exit
        return r;
      }
    }
    return full(t, real, d, a...);
  }
  __attribute__((noinline)) static CUresult full(const Table& t, Real real, Dispatch d, A... a) {
    Params p{a...};  // CUPTI's params struct: the arguments, in order
    if constexpr (launch_call(kCbid[S])) {
      // `kerncap apply` (docs/apply.md): the dispatcher may name another function in
      // p.f at the launch's entry; the driver is then called with it, all else as given.
      const CUfunction asked = p.f;
      return around(t, S, d, &p, [&] { return p.f == asked ? real(a...) : real(with_function(a, p.f)...); });
    } else {
      return around(t, S, d, &p, [&] { return real(a...); });
    }
  }
};

}  // namespace

namespace {
constexpr bool old_abi(const char* proto) {
  return proto[0] == 'k' && proto[1] == 'c' && proto[2] == '_' && proto[3] == 'v' && proto[4] == '1';
}

// Constant-initialized (no constructor runs before a call can arrive through the PLT).
Entry g_entries[kSlotCount] = {
#define KC_ENTRY(name, proto, roles) \
  {#name, CUPTI_DRIVER_TRACE_CBID_##name,                                                     \
   reinterpret_cast<void*>(&Wrap<kSlot_##name, name##_params, decltype(&::proto)>::call),              \
   old_abi(#proto), launch_call(CUPTI_DRIVER_TRACE_CBID_##name)},
    KC_WATCHED_CALLS(KC_ENTRY)
#undef KC_ENTRY
};
}  // namespace

// Code linked against libcuda calls the watched names through its PLT: exported here,
// each jumps to its wrapper (x86-64; elsewhere only the dlsym / cuGetProcAddress routes).
#if defined(__x86_64__)
#define KC_TRAMPOLINE(name, proto, roles)                                                            \
  extern "C" __attribute__((visibility("hidden"), used)) decltype(&::proto) const kc_tramp_##name =   \
      &Wrap<kSlot_##name, name##_params, decltype(&::proto)>::call;                                   \
  asm(".text\n.globl " #name "\n.type " #name ",@function\n" #name ":\n\tjmp *kc_tramp_" #name "(%rip)\n.size " #name \
      ",.-" #name "\n");
KC_WATCHED_CALLS(KC_TRAMPOLINE)
#undef KC_TRAMPOLINE
#endif

namespace {

CUresult hooked_gpa(const char* symbol, void** pfn, int version, cuuint64_t flags);
CUresult hooked_gpa2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                     CUdriverProcAddressQueryResult* status);

// What the app is handed for a driver pointer: cuGetProcAddress asked for itself gets the
// hook of the same ABI, a watched call its wrapper, anything else the pointer itself.
// libcuda may have been loaded just now (cudart dlopens it, then asks dlsym at once).
void* own_hook(void* p) {
  const Table* t = p ? table() : nullptr;
  if (!t) return p;
  if (p == reinterpret_cast<void*>(t->gpa2)) return reinterpret_cast<void*>(&hooked_gpa2);
  if (p == reinterpret_cast<void*>(t->gpa)) return reinterpret_cast<void*>(&hooked_gpa);
  return substitute(*t, p);
}

CUresult hooked_gpa2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                     CUdriverProcAddressQueryResult* status) {
  const Table* t = table();
  if (!t || !t->gpa2) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = t->gpa2(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn) *pfn = own_hook(*pfn);
  return r;
}

CUresult hooked_gpa(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  const Table* t = table();
  if (!t || !t->gpa) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = t->gpa(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn) *pfn = own_hook(*pfn);
  return r;
}

bool driver_name(const char* name) { return name && name[0] == 'c' && name[1] == 'u'; }

// CUPTI and kerncap's injection library get the driver's own entry points: their calls
// are not the app's (and CUPTI's threads must never wait on kerncap's quiesce lock).
bool tool_caller(void* return_address) {
  Dl_info info;
  if (!return_address || !dladdr(return_address, &info) || !info.dli_fname) return false;
  return std::strstr(info.dli_fname, "libcupti") || std::strstr(info.dli_fname, "libkerncap_inject");
}

}  // namespace

KC_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult* status) {
  if (tool_caller(__builtin_return_address(0))) {
    const Table* t = table();
    return t && t->gpa2 ? t->gpa2(symbol, pfn, version, flags, status) : CUDA_ERROR_NOT_INITIALIZED;
  }
  return hooked_gpa2(symbol, pfn, version, flags, status);
}

KC_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  if (tool_caller(__builtin_return_address(0))) {
    const Table* t = table();
    return t && t->gpa ? t->gpa(symbol, pfn, version, flags) : CUDA_ERROR_NOT_INITIALIZED;
  }
  return hooked_gpa(symbol, pfn, version, flags);
}

// dlsym for every handle but RTLD_NEXT (which the assembly below forwards by a jump, so
// glibc still sees the caller's return address and searches after the caller).
extern "C" __attribute__((visibility("hidden"), used)) void* kc_dlsym_impl(void* handle, const char* name) {
  DlsymFn d = real_dlsym();
  if (!d) return nullptr;
  void* p = d(handle, name);
  if (!driver_name(name) || tool_caller(__builtin_return_address(0))) return p;
  return own_hook(p);
}

extern "C" {
__attribute__((visibility("hidden"), used)) void* kc_real_dlsym_ptr = nullptr;
}

#if defined(__x86_64__)
asm(".text\n.globl dlsym\n.type dlsym,@function\ndlsym:\n"
    "\tcmpq $-1, %rdi\n"                    // RTLD_NEXT
    "\tjne 1f\n"
    "\tmovq kc_real_dlsym_ptr(%rip), %rax\n"
    "\ttestq %rax, %rax\n"
    "\tje 1f\n"
    "\tjmp *%rax\n"
    "1:\tjmp kc_dlsym_impl\n"
    ".size dlsym,.-dlsym\n");
#else
KC_EXPORT void* dlsym(void* handle, const char* name) { return kc_dlsym_impl(handle, name); }
#endif

__attribute__((constructor)) static void kc_entry_init() {
#if defined(__x86_64__)
  uintptr_t tp;
  asm("movq %%fs:0, %0" : "=r"(tp));  // the thread pointer (the TCB's pointer to itself)
  g_hooks.tls_offset = intptr_t(reinterpret_cast<uintptr_t>(tl_block) - tp);
#endif
  kc_real_dlsym_ptr = reinterpret_cast<void*>(real_dlsym());
  table();  // an app linked against libcuda has it loaded already
}

// The injection library's dispatcher (inject.cpp); null detaches. Returns how many
// watched entry points the driver has (0: libcuda is not loaded yet).
KC_EXPORT int kerncap_entry_attach(Dispatch d) {
  const Table* t = table();
  if (!d) g_hooks.gate.on.store(false, std::memory_order_release);
  g_hooks.dispatch.store(d, std::memory_order_release);
  return t ? int(t->n) : 0;
}

// 1: the dispatcher resolves a launch's context itself (cb->context is null for launches).
KC_EXPORT void kerncap_entry_lazy_launch_context(int on) {
  g_hooks.lazy_launch_context.store(on != 0, std::memory_order_relaxed);
}

// The calling thread's block of the injection library's per-thread state (entry_abi.hpp).
KC_EXPORT void* kerncap_entry_thread_block(void) { return tl_block; }
KC_EXPORT size_t kerncap_entry_thread_block_size(void) { return sizeof tl_block; }

// The fast path's Gate (entry_abi.hpp) for an injection library of the same ABI, else
// null (then it has no fast path).
KC_EXPORT kc_entry::Gate* kerncap_entry_gate(int abi) { return abi == kc_entry::kAbi ? &g_hooks.gate : nullptr; }

// The paired measure's switch (bench/paired.py, bench/entry_cost.py). Exists only where
// the injection library allowed it: it does so only in a process started with
// KERNCAP_BENCH_PASSTHROUGH=1, which therefore never captures (inject.cpp claim_capture),
// so a bypassed launch or allocation cannot make a capture wrong. The normal path pays
// nothing for it: the wrappers already load g_dispatch, and pass-through is that
// pointer set to null; a call in flight keeps the dispatcher it loaded for its exit.
std::atomic<Dispatch> g_bench_dispatch{nullptr};

KC_EXPORT void kerncap_entry_allow_bench(Dispatch d) { g_bench_dispatch.store(d, std::memory_order_release); }

// The bench's third mode: the wrapper's own half of the full path (the callback data,
// the context as the dispatcher asked, two calls) with a dispatcher that does nothing;
// the launch fast path is off meanwhile (it is all wrapper: cudart's row is its cost).
static void bench_noop(CUpti_CallbackId, const CUpti_CallbackData*) {}
bool g_bench_wrapper = false, g_bench_fast_on = false;  // mode 2 is on; the fast path's switch before it
// Mode 3 (bench/paired.py's apply row): the dispatcher on, apply mode's redirect held
// back (inject.cpp attach_apply asks kerncap_entry_bench_apply_held per target launch).
std::atomic<int> g_bench_apply_held{0};
KC_EXPORT int kerncap_entry_bench_apply_held(void) { return g_bench_apply_held.load(std::memory_order_acquire); }

// 1: the wrappers jump straight to the driver; 0: through kerncap's dispatcher again;
// 2: through the wrapper to a dispatcher that does nothing (what the wrapper costs);
// 3: through kerncap's dispatcher, `kerncap apply` identifying and counting the launch
// but not redirecting it (the unsubstituted armed path).
// Returns 0, or -1 where the switch was not allowed (nothing changes then). Called by
// one thread of the bench between its blocks.
KC_EXPORT int kerncap_bench_passthrough(int on) {
  Dispatch d = g_bench_dispatch.load(std::memory_order_acquire);
  if (!d) return -1;
  if ((on == 2) != g_bench_wrapper) {
    if (on == 2) g_bench_fast_on = g_hooks.gate.on.load(std::memory_order_acquire);
    g_hooks.gate.on.store(on == 2 ? false : g_bench_fast_on, std::memory_order_release);
    g_bench_wrapper = on == 2;
  }
  g_bench_apply_held.store(on == 3, std::memory_order_release);
  g_hooks.dispatch.store(on == 1 ? nullptr : on == 2 ? &bench_noop : d, std::memory_order_release);
  return 0;
}

// How many wrappers the app was handed so far.
KC_EXPORT uint64_t kerncap_entry_handed(void) { return g_handed.load(std::memory_order_relaxed); }

// dlsym without the hook: the injection library's own driver calls must not be wrapped.
KC_EXPORT void* kerncap_entry_real_dlsym(void* handle, const char* name) {
  DlsymFn d = real_dlsym();
  return d ? d(handle, name) : nullptr;
}
