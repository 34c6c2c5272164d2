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
// the call's entry and exit, so one dispatcher serves both paths.
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
#include <mutex>

#include "watched_list.hpp"

#undef cuGetProcAddress  // cuda.h maps it to _v2; both ABIs are defined here

#define KC_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using Dispatch = void (*)(CUpti_CallbackId, const CUpti_CallbackData*);
using DlsymFn = void* (*)(void*, const char*);
using GetProcFn = CUresult (*)(const char*, void**, int, cuuint64_t);
using GetProcV2Fn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using CtxGetCurrentFn = CUresult (*)(CUcontext*);

std::atomic<Dispatch> g_dispatch{nullptr};
std::atomic<uint64_t> g_handed{0};  // wrappers handed out (diagnostics)

struct Entry {
  const char* name;
  CUpti_CallbackId cbid;
  void* wrapper;
  bool old_abi;  // an old version cuda.h no longer declares by this name (kc_v1_*)
  std::atomic<void*> real;
};

enum Slot : size_t {
#define KC_SLOT(name, proto, roles) kSlot_##name,
  KC_WATCHED_CALLS(KC_SLOT)
#undef KC_SLOT
      kSlotCount
};

extern Entry g_entries[kSlotCount];

// Real entry points of libcuda itself (resolved once libcuda is loaded).
DlsymFn g_real_dlsym = nullptr;
std::atomic<GetProcFn> g_real_gpa{nullptr};
std::atomic<GetProcV2Fn> g_real_gpa2{nullptr};
std::atomic<CtxGetCurrentFn> g_ctx_current{nullptr};

// real -> slot, sorted by address, for cuGetProcAddress and dlsym results. Should a
// driver export an old name as an alias of the new call, the new call's slot comes
// first (its params struct is the one that matches the arguments).
struct ByAddress {
  void* real;
  bool old_abi;
  size_t slot;
  bool operator<(const ByAddress& o) const {
    return real != o.real ? std::less<void*>()(real, o.real) : old_abi < o.old_abi;
  }
};
ByAddress g_by_address[kSlotCount];
size_t g_by_address_n = 0;
std::atomic<bool> g_resolved{false};
std::mutex g_resolve_mu;

DlsymFn real_dlsym() {
  if (!g_real_dlsym) {
    void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    g_real_dlsym = reinterpret_cast<DlsymFn>(p);
  }
  return g_real_dlsym;
}

// Resolves every watched entry point from libcuda, once it is loaded. False before.
bool resolve_all() {
  if (g_resolved.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> lock(g_resolve_mu);
  if (g_resolved.load(std::memory_order_relaxed)) return true;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return false;
  DlsymFn d = real_dlsym();
  size_t n = 0;
  for (size_t i = 0; i < kSlotCount; ++i) {
    void* p = d(h, g_entries[i].name);
    g_entries[i].real.store(p, std::memory_order_release);
    if (p) g_by_address[n++] = {p, g_entries[i].old_abi, i};
  }
  std::sort(g_by_address, g_by_address + n);
  g_by_address_n = n;
  g_real_gpa.store(reinterpret_cast<GetProcFn>(d(h, "cuGetProcAddress")), std::memory_order_release);
  g_real_gpa2.store(reinterpret_cast<GetProcV2Fn>(d(h, "cuGetProcAddress_v2")), std::memory_order_release);
  g_ctx_current.store(reinterpret_cast<CtxGetCurrentFn>(d(h, "cuCtxGetCurrent")), std::memory_order_release);
  dlclose(h);  // NOLOAD took a reference; libcuda stays loaded by whoever loaded it
  g_resolved.store(true, std::memory_order_release);
  return true;
}

void* real_of(size_t slot) {
  void* p = g_entries[slot].real.load(std::memory_order_acquire);
  if (!p && resolve_all()) p = g_entries[slot].real.load(std::memory_order_acquire);
  return p;
}

// The wrapper for a pointer the driver handed out, or the pointer itself.
void* substitute(void* p) {
  if (!p || !resolve_all()) return p;
  auto end = g_by_address + g_by_address_n;
  auto it = std::lower_bound(g_by_address, end, ByAddress{p, false, 0});
  if (it == end || it->real != p) return p;
  g_handed.fetch_add(1, std::memory_order_relaxed);
  return g_entries[it->slot].wrapper;
}

// initial-exec: this library is only ever preloaded, so its TLS is static (no
// __tls_get_addr on every driver call).
__attribute__((tls_model("initial-exec"))) thread_local uint32_t tl_correlation = 0;

template <class Call>
CUresult around(size_t slot, Dispatch d, const void* params, Call&& call) {
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
  if (CtxGetCurrentFn f = g_ctx_current.load(std::memory_order_relaxed)) f(&ctx);
  cb.context = ctx;
  d(e.cbid, &cb);
  ret = call();
  cb.callbackSite = CUPTI_API_EXIT;
  d(e.cbid, &cb);
  return ret;
}

template <size_t S, class Params, class Fn>
struct Wrap;

template <size_t S, class Params, class... A>
struct Wrap<S, Params, CUresult (*)(A...)> {
  static CUresult CUDAAPI call(A... a) {
    using Real = CUresult (*)(A...);
    Real real = reinterpret_cast<Real>(real_of(S));
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;  // no driver loaded: nothing could have run
    Dispatch d = g_dispatch.load(std::memory_order_acquire);
    if (!d) return real(a...);
    const Params p{a...};  // CUPTI's params struct: the arguments, in order
    return around(S, d, &p, [&] { return real(a...); });
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
   old_abi(#proto), {nullptr}},
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

// cuGetProcAddress asked for itself: hand back the hook of the same ABI. libcuda may
// have been loaded just now (cudart dlopens it, then asks dlsym at once): resolve first.
void* own_hook(void* p) {
  if (!p || !resolve_all()) return p;
  if (p && p == reinterpret_cast<void*>(g_real_gpa2.load(std::memory_order_acquire)))
    return reinterpret_cast<void*>(&hooked_gpa2);
  if (p && p == reinterpret_cast<void*>(g_real_gpa.load(std::memory_order_acquire)))
    return reinterpret_cast<void*>(&hooked_gpa);
  return substitute(p);
}

CUresult hooked_gpa2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                     CUdriverProcAddressQueryResult* status) {
  resolve_all();
  GetProcV2Fn real = g_real_gpa2.load(std::memory_order_acquire);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn) *pfn = own_hook(*pfn);
  return r;
}

CUresult hooked_gpa(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  resolve_all();
  GetProcFn real = g_real_gpa.load(std::memory_order_acquire);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(symbol, pfn, version, flags);
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
    resolve_all();
    GetProcV2Fn real = g_real_gpa2.load(std::memory_order_acquire);
    return real ? real(symbol, pfn, version, flags, status) : CUDA_ERROR_NOT_INITIALIZED;
  }
  return hooked_gpa2(symbol, pfn, version, flags, status);
}

KC_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  if (tool_caller(__builtin_return_address(0))) {
    resolve_all();
    GetProcFn real = g_real_gpa.load(std::memory_order_acquire);
    return real ? real(symbol, pfn, version, flags) : CUDA_ERROR_NOT_INITIALIZED;
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
  kc_real_dlsym_ptr = reinterpret_cast<void*>(real_dlsym());
  resolve_all();  // an app linked against libcuda has it loaded already
}

// The injection library's dispatcher (inject.cpp); null detaches. Returns how many
// watched entry points the driver has (0: libcuda is not loaded yet).
KC_EXPORT int kerncap_entry_attach(Dispatch d) {
  resolve_all();
  g_dispatch.store(d, std::memory_order_release);
  return int(g_by_address_n);
}

// How many wrappers the app was handed so far.
KC_EXPORT uint64_t kerncap_entry_handed(void) { return g_handed.load(std::memory_order_relaxed); }

// dlsym without the hook: the injection library's own driver calls must not be wrapped.
KC_EXPORT void* kerncap_entry_real_dlsym(void* handle, const char* name) {
  DlsymFn d = real_dlsym();
  return d ? d(handle, name) : nullptr;
}
