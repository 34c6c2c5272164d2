// Probe (docs/facts.md §21, issue 18): can the driver's entry points be interposed
// without CUPTI? LD_PRELOAD this library into an app: it replaces dlsym and
// cuGetProcAddress(_v2), hands back counting wrappers for the four cuLaunchKernel(Ex)
// entry points (chosen by comparing addresses with the exported symbols) and prints at
// exit how many launches went through them. KC_PROBE=pass: hooks only, no wrappers;
// KC_PROBE_NAMES=1: also the names asked for. KC_PROBE_LOADS=1: wrap the module and
// library load entry points too and print, per call, what image they were handed (ELF
// cubin, PTX, a fatbin and its entries' kinds, architectures and compression flags, or
// cudart's fatbin wrapper): can a capture without CUPTI see every image it needs?
// Not part of kerncap; built by hand:
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
static void* exp_mload; static void* exp_mloadex; static void* exp_mfat; static void* exp_lload; static void* exp_lfile; static void* exp_mfile;

static void resolve() {
  static std::once_flag once;
  std::call_once(once, [] {
    dlsym_fn d = get_real_dlsym();
    void* h = libcuda();
    exp_launch = d(h, "cuLaunchKernel"); exp_launch_ptsz = d(h, "cuLaunchKernel_ptsz");
    exp_launchex = d(h, "cuLaunchKernelEx"); exp_launchex_ptsz = d(h, "cuLaunchKernelEx_ptsz");
    r_launch = (launch_fn)exp_launch; r_launch_ptsz = (launch_fn)exp_launch_ptsz;
    r_launchex = (launchex_fn)exp_launchex; r_launchex_ptsz = (launchex_fn)exp_launchex_ptsz;
    exp_mload = d(h, "cuModuleLoadData"); exp_mloadex = d(h, "cuModuleLoadDataEx"); exp_mfat = d(h, "cuModuleLoadFatBinary");
    exp_lload = d(h, "cuLibraryLoadData"); exp_lfile = d(h, "cuLibraryLoadFromFile"); exp_mfile = d(h, "cuModuleLoad");
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

// -- image loads ---------------------------------------------------------------------
typedef CUresult (*mload_fn)(CUmodule*, const void*);
typedef CUresult (*mloadex_fn)(CUmodule*, const void*, unsigned, CUjit_option*, void**);
typedef CUresult (*lload_fn)(CUlibrary*, const void*, CUjit_option*, void**, unsigned, CUlibraryOption*, void**, unsigned);
typedef CUresult (*lfile_fn)(CUlibrary*, const char*, CUjit_option*, void**, unsigned, CUlibraryOption*, void**, unsigned);
typedef CUresult (*mfile_fn)(CUmodule*, const char*);
static std::atomic<int> n_images{0};

static void describe_image(const char* api, const void* image) {
  const int k = n_images.fetch_add(1);
  if (!image) { fprintf(stderr, "kc_probe load %d %s: null image\n", k, api); return; }
  const unsigned char* b = (const unsigned char*)image;
  uint32_t magic; memcpy(&magic, b, 4);
  if (magic == 0x466243b1u) {  // cudart's __fatBinC_Wrapper_t {magic, version, data, filename_or_fatbins}
    const void* data; memcpy(&data, b + 8, sizeof(data));
    fprintf(stderr, "kc_probe load %d %s: fatbin wrapper -> ", k, api);
    b = (const unsigned char*)data; memcpy(&magic, b, 4);
  } else {
    fprintf(stderr, "kc_probe load %d %s: ", k, api);
  }
  if (magic == 0x464c457fu) { fprintf(stderr, "ELF cubin\n"); return; }
  if (magic != 0xBA55ED50u) { fprintf(stderr, "text? starts '%.12s'\n", (const char*)b); return; }
  uint16_t hsize; uint64_t fsize; memcpy(&hsize, b + 6, 2); memcpy(&fsize, b + 8, 8);
  fprintf(stderr, "fatbin %llu bytes:", (unsigned long long)fsize);
  const unsigned char* e = b + hsize;
  const unsigned char* end = e + fsize;
  int shown = 0;
  while (e + 64 <= end && shown < 12) {
    uint16_t kind; uint32_t ehsize; uint64_t psize, flags; uint32_t arch; uint64_t usize;
    memcpy(&kind, e, 2); memcpy(&ehsize, e + 4, 4); memcpy(&psize, e + 8, 8);
    memcpy(&arch, e + 28, 4); memcpy(&flags, e + 40, 8); memcpy(&usize, e + 56, 8);
    fprintf(stderr, " [%s sm_%u flags=%#llx size=%llu unpacked=%llu]", kind == 2 ? "elf" : kind == 1 ? "ptx" : "?", arch,
            (unsigned long long)flags, (unsigned long long)psize, (unsigned long long)usize);
    if (!ehsize) break;
    e += ehsize + psize; ++shown;
  }
  fprintf(stderr, "\n");
}
extern "C" {
static CUresult w_mload(CUmodule* m, const void* img) { describe_image("cuModuleLoadData", img); return ((mload_fn)exp_mload)(m, img); }
static CUresult w_mfat(CUmodule* m, const void* img) { describe_image("cuModuleLoadFatBinary", img); return ((mload_fn)exp_mfat)(m, img); }
static CUresult w_mloadex(CUmodule* m, const void* img, unsigned n, CUjit_option* o, void** v) {
  describe_image("cuModuleLoadDataEx", img); return ((mloadex_fn)exp_mloadex)(m, img, n, o, v); }
static CUresult w_lload(CUlibrary* l, const void* img, CUjit_option* o, void** v, unsigned n, CUlibraryOption* lo, void** lv, unsigned ln) {
  describe_image("cuLibraryLoadData", img); return ((lload_fn)exp_lload)(l, img, o, v, n, lo, lv, ln); }
static CUresult w_lfile(CUlibrary* l, const char* f, CUjit_option* o, void** v, unsigned n, CUlibraryOption* lo, void** lv, unsigned ln) {
  fprintf(stderr, "kc_probe load %d cuLibraryLoadFromFile: %s\n", n_images.fetch_add(1), f); return ((lfile_fn)exp_lfile)(l, f, o, v, n, lo, lv, ln); }
static CUresult w_mfile(CUmodule* m, const char* f) {
  fprintf(stderr, "kc_probe load %d cuModuleLoad: %s\n", n_images.fetch_add(1), f); return ((mfile_fn)exp_mfile)(m, f); }
}
static bool loads() { return getenv("KC_PROBE_LOADS") != nullptr; }

static void* substitute(void* p) {
  if (!p) return p;
  if (loads()) {
    if (p == exp_mload) return (void*)w_mload;
    if (p == exp_mloadex) return (void*)w_mloadex;
    if (p == exp_mfat) return (void*)w_mfat;
    if (p == exp_lload) return (void*)w_lload;
    if (p == exp_lfile) return (void*)w_lfile;
    if (p == exp_mfile) return (void*)w_mfile;
  }
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
