// Probe (docs/facts.md §21, issue 18): can the driver's entry points be interposed
// without CUPTI? LD_PRELOAD this library into an app: it replaces dlsym and
// cuGetProcAddress(_v2), hands back counting wrappers for the four cuLaunchKernel(Ex)
// entry points (chosen by comparing addresses with the exported symbols) and prints at
// exit how many launches went through them. KC_PROBE=pass: hooks only, no wrappers;
// KC_PROBE_NAMES=1: also the names asked for. Not part of kerncap; built by hand:
//   g++ -O2 -std=c++17 -shared -fPIC -o libprobe.so entry_probe.cpp -I$CUDA/include -ldl
//   LD_PRELOAD=./libprobe.so python3 testapps/python/launch_heavy.py --launches 300000
#include <dlfcn.h>
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <map>
#include <string>

typedef void* (*dlsym_fn)(void*, const char*);
static dlsym_fn real_dlsym_p;
static std::atomic<unsigned long> n_launch{0}, n_launch_ex{0}, n_gpa{0}, n_dlsym_cu{0};
static std::mutex mu;
static std::map<std::string, unsigned long>* gpa_names;
static std::map<std::string, unsigned long>* dlsym_names;
static const char* mode() { const char* m = getenv("KC_PROBE"); return m ? m : "count"; }

static dlsym_fn get_real_dlsym() {
  if (!real_dlsym_p) {
    real_dlsym_p = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!real_dlsym_p) real_dlsym_p = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  }
  return real_dlsym_p;
}
static void* libcuda() {
  static void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!h) h = dlopen("libcuda.so.1", RTLD_LAZY);
  return h;
}
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**, void**);
typedef CUresult (*launchex_fn)(const CUlaunchConfig*, CUfunction, void**, void**);
typedef CUresult (*gpa2_fn)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
typedef CUresult (*gpa1_fn)(const char*, void**, int, cuuint64_t);
static launch_fn r_launch, r_launch_ptsz;
static launchex_fn r_launchex, r_launchex_ptsz;
static gpa2_fn r_gpa2; static gpa1_fn r_gpa1;
static void* exp_launch; static void* exp_launch_ptsz; static void* exp_launchex; static void* exp_launchex_ptsz;
static std::atomic<int> addr_match{0}, addr_mismatch{0};

static void resolve() {
  static std::once_flag once;
  std::call_once(once, [] {
    dlsym_fn d = get_real_dlsym();
    void* h = libcuda();
    exp_launch = d(h, "cuLaunchKernel"); exp_launch_ptsz = d(h, "cuLaunchKernel_ptsz");
    exp_launchex = d(h, "cuLaunchKernelEx"); exp_launchex_ptsz = d(h, "cuLaunchKernelEx_ptsz");
    r_launch = (launch_fn)exp_launch; r_launch_ptsz = (launch_fn)exp_launch_ptsz;
    r_launchex = (launchex_fn)exp_launchex; r_launchex_ptsz = (launchex_fn)exp_launchex_ptsz;
    r_gpa2 = (gpa2_fn)d(h, "cuGetProcAddress_v2"); r_gpa1 = (gpa1_fn)d(h, "cuGetProcAddress");
    gpa_names = new std::map<std::string, unsigned long>; dlsym_names = new std::map<std::string, unsigned long>;
  });
}
extern "C" {
static CUresult w_launch(CUfunction f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g, unsigned s, CUstream st, void** p, void** x) {
  n_launch.fetch_add(1, std::memory_order_relaxed); return r_launch(f, a, b, c, d, e, g, s, st, p, x); }
static CUresult w_launch_ptsz(CUfunction f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g, unsigned s, CUstream st, void** p, void** x) {
  n_launch.fetch_add(1, std::memory_order_relaxed); return r_launch_ptsz(f, a, b, c, d, e, g, s, st, p, x); }
static CUresult w_launchex(const CUlaunchConfig* c, CUfunction f, void** p, void** x) {
  n_launch_ex.fetch_add(1, std::memory_order_relaxed); return r_launchex(c, f, p, x); }
static CUresult w_launchex_ptsz(const CUlaunchConfig* c, CUfunction f, void** p, void** x) {
  n_launch_ex.fetch_add(1, std::memory_order_relaxed); return r_launchex_ptsz(c, f, p, x); }

static void* substitute(void* p) {
  if (!p) return p;
  if (p == exp_launch) return (void*)w_launch;
  if (p == exp_launch_ptsz) return (void*)w_launch_ptsz;
  if (p == exp_launchex) return (void*)w_launchex;
  if (p == exp_launchex_ptsz) return (void*)w_launchex_ptsz;
  return p;
}
extern "C" CUresult cuGetProcAddress_v2(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
extern "C" CUresult cuGetProcAddress(const char*, void**, int, cuuint64_t);
static void* self_gpa(const char* sym, void* p) {
  if (strcmp(sym, "cuGetProcAddress")) return p;
  if (p == (void*)r_gpa2) return (void*)cuGetProcAddress_v2;
  if (p == (void*)r_gpa1) return (void*)cuGetProcAddress;
  fprintf(stderr, "kc_probe: cuGetProcAddress returned an unknown pointer for itself\n");
  return p;
}
static void note_gpa(const char* sym, void* p) {
  n_gpa++;
  if (!strncmp(sym, "cuLaunchKernel", 14)) { if (substitute(p) != p) addr_match++; else addr_mismatch++; }
  std::lock_guard<std::mutex> l(mu); (*gpa_names)[sym]++;
}
__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* sym, void** pfn, int ver, cuuint64_t flags, CUdriverProcAddressQueryResult* st) {
  resolve(); CUresult r = r_gpa2(sym, pfn, ver, flags, st);
  if (r == CUDA_SUCCESS && pfn && *pfn) { note_gpa(sym, *pfn); *pfn = self_gpa(sym, *pfn); if (strcmp(mode(), "pass")) *pfn = substitute(*pfn); }
  return r;
}
__attribute__((visibility("default"))) CUresult cuGetProcAddress(const char* sym, void** pfn, int ver, cuuint64_t flags) {
  resolve(); CUresult r = r_gpa1(sym, pfn, ver, flags);
  if (r == CUDA_SUCCESS && pfn && *pfn) { note_gpa(sym, *pfn); *pfn = self_gpa(sym, *pfn); if (strcmp(mode(), "pass")) *pfn = substitute(*pfn); }
  return r;
}
__attribute__((visibility("default"))) void* dlsym(void* h, const char* sym) {
  void* p = get_real_dlsym()(h, sym);
  if (sym && sym[0] == 'c' && sym[1] == 'u' && p) {
    resolve();
    n_dlsym_cu++;
    { std::lock_guard<std::mutex> l(mu); (*dlsym_names)[sym]++; }
    if (!strcmp(sym, "cuGetProcAddress_v2")) return (void*)cuGetProcAddress_v2;
    if (!strcmp(sym, "cuGetProcAddress")) return (void*)cuGetProcAddress;
    if (strcmp(mode(), "pass")) return substitute(p);
  }
  return p;
}
}
__attribute__((destructor)) static void fini() {
  fprintf(stderr, "kc_probe launches=%lu launch_ex=%lu gpa=%lu dlsym_cu=%lu addr_match=%d addr_mismatch=%d\n",
          n_launch.load(), n_launch_ex.load(), n_gpa.load(), n_dlsym_cu.load(), addr_match.load(), addr_mismatch.load());
  if (getenv("KC_PROBE_NAMES") && gpa_names) {
    std::string s;
    for (auto& [k, v] : *dlsym_names) s += " " + k;
    fprintf(stderr, "kc_probe dlsym:%s\n", s.c_str());
    s.clear(); int n = 0;
    for (auto& [k, v] : *gpa_names) { if (n++ < 400) s += " " + k; }
    fprintf(stderr, "kc_probe gpa(%zu):%s\n", gpa_names->size(), s.c_str());
  }
}
