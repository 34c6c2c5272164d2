// Probe (docs/facts.md §24, issue 18): can a capture that does not subscribe CUPTI while
// the app runs still get each module's cubin exactly as CUPTI's module callback reports
// it? Two runs of the same app print one line per cubin (size and FNV-1a 64 hash):
//   early: CUDA_INJECTION64_PATH=liblate.so, CUPTI subscribed in cuInit (as kerncap is):
//          the cubins of the MODULE_LOADED callbacks as the app loads them;
//   late:  LD_PRELOAD=liblate.so, no CUPTI: wrappers record the images cudart hands to
//          cuLibraryLoadData (through cuGetProcAddress); at launch KC_LATE_AT (default
//          100) the probe subscribes CUPTI, loads each recorded image once more with
//          cuModuleLoadData in the app's context, forces it in (cuFuncLoad), takes the
//          cubin from the callback, unloads it and unsubscribes.
// Equal lines mean the late reload yields the cubins the early subscriber saw.
// Not part of kerncap; built by hand:
//   g++ -O2 -std=c++17 -shared -fPIC -o liblate.so late_cubin.cpp -I$CUDA/include
//       -L$CUDA/lib64 -lcupti -Wl,-rpath,$CUDA/lib64 -ldl
#include <cupti.h>
#include <cuda.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace {

uint64_t fnv1a(const void* p, size_t n) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

const char* g_tag = "early";

void CUPTIAPI on_resource(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RESOURCE || cbid != CUPTI_CBID_RESOURCE_MODULE_LOADED) return;
  const auto* rd = static_cast<const CUpti_ResourceData*>(data);
  const auto* md = static_cast<const CUpti_ModuleResourceData*>(rd->resourceDescriptor);
  if (!md || !md->pCubin) return;
  fprintf(stderr, "kc_late %s cubin size=%zu hash=%016llx\n", g_tag, md->cubinSize,
          (unsigned long long)fnv1a(md->pCubin, md->cubinSize));
}

bool subscribe(CUpti_SubscriberHandle* sub) {
  if (cuptiSubscribe(sub, on_resource, nullptr) != CUPTI_SUCCESS) {
    fprintf(stderr, "kc_late: cuptiSubscribe failed\n");
    return false;
  }
  cuptiEnableCallback(1, *sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED);
  return true;
}

// -- late mode: wrappers, no CUPTI until the reload ------------------------------------
typedef void* (*dlsym_fn)(void*, const char*);
typedef CUresult (*gpa2_fn)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
typedef CUresult (*lload_fn)(CUlibrary*, const void*, CUjit_option*, void**, unsigned, CUlibraryOption*, void**, unsigned);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                              void**, void**);

dlsym_fn real_dlsym() {
  static dlsym_fn d = [] {
    auto f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    return f ? f : (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  }();
  return d;
}
void* cuda_sym(const char* name) {
  static void* h = dlopen("libcuda.so.1", RTLD_LAZY);
  return real_dlsym()(h, name);
}

std::mutex g_mu;
std::vector<const void*> g_images;  // fatbins cudart registered (they live in its binary)
std::atomic<long> g_launches{0};
std::atomic<bool> g_done{false};

void late_reload() {
  if (g_done.exchange(true)) return;
  std::vector<const void*> images;
  {
    std::lock_guard<std::mutex> l(g_mu);
    images = g_images;
  }
  g_tag = "late";
  CUpti_SubscriberHandle sub;
  if (!subscribe(&sub)) return;
  auto load = (CUresult(*)(CUmodule*, const void*))cuda_sym("cuModuleLoadData");
  auto count = (CUresult(*)(unsigned*, CUmodule))cuda_sym("cuModuleGetFunctionCount");
  auto enumerate = (CUresult(*)(CUfunction*, unsigned, CUmodule))cuda_sym("cuModuleEnumerateFunctions");
  auto fload = (CUresult(*)(CUfunction))cuda_sym("cuFuncLoad");
  auto unload = (CUresult(*)(CUmodule))cuda_sym("cuModuleUnload");
  for (const void* image : images) {
    CUmodule m = nullptr;
    CUresult r = load(&m, image);
    if (r != CUDA_SUCCESS) {
      fprintf(stderr, "kc_late reload: cuModuleLoadData -> %d\n", (int)r);
      continue;
    }
    unsigned n = 0;
    count(&n, m);
    std::vector<CUfunction> fs(n);
    if (n && enumerate(fs.data(), n, m) == CUDA_SUCCESS) fload(fs[0]);  // lazy loading: force the module in
    unload(m);
  }
  cuptiUnsubscribe(sub);
  fprintf(stderr, "kc_late reloaded %zu images at launch %ld\n", images.size(), g_launches.load());
}

lload_fn r_lload;
launch_fn r_launch, r_launch_ptsz;
gpa2_fn r_gpa2;

}  // namespace

extern "C" {

static CUresult w_lload(CUlibrary* lib, const void* image, CUjit_option* o, void** v, unsigned n, CUlibraryOption* lo,
                        void** lv, unsigned ln) {
  const void* fatbin = image;
  uint32_t magic;
  memcpy(&magic, image, 4);
  if (magic == 0x466243b1u) memcpy(&fatbin, static_cast<const char*>(image) + 8, sizeof(fatbin));  // cudart's wrapper
  {
    std::lock_guard<std::mutex> l(g_mu);
    g_images.push_back(fatbin);
  }
  return r_lload(lib, image, o, v, n, lo, lv, ln);
}

static void count_launch() {
  static const long at = getenv("KC_LATE_AT") ? atol(getenv("KC_LATE_AT")) : 100;
  if (g_launches.fetch_add(1) + 1 == at) late_reload();
}
static CUresult w_launch(CUfunction f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g, unsigned s,
                         CUstream st, void** p, void** x) {
  count_launch();
  return r_launch(f, a, b, c, d, e, g, s, st, p, x);
}
static CUresult w_launch_ptsz(CUfunction f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g,
                              unsigned s, CUstream st, void** p, void** x) {
  count_launch();
  return r_launch_ptsz(f, a, b, c, d, e, g, s, st, p, x);
}

static void* substitute(void* p) {
  static std::once_flag once;
  std::call_once(once, [] {
    r_lload = (lload_fn)cuda_sym("cuLibraryLoadData");
    r_launch = (launch_fn)cuda_sym("cuLaunchKernel");
    r_launch_ptsz = (launch_fn)cuda_sym("cuLaunchKernel_ptsz");
    r_gpa2 = (gpa2_fn)cuda_sym("cuGetProcAddress_v2");
  });
  if (p && p == (void*)r_lload) return (void*)w_lload;
  if (p && p == (void*)r_launch) return (void*)w_launch;
  if (p && p == (void*)r_launch_ptsz) return (void*)w_launch_ptsz;
  return p;
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* sym, void** pfn, int ver,
                                                                   cuuint64_t flags,
                                                                   CUdriverProcAddressQueryResult* st) {
  substitute(nullptr);
  CUresult r = r_gpa2(sym, pfn, ver, flags, st);
  if (r == CUDA_SUCCESS && pfn && *pfn) {
    if (!strcmp(sym, "cuGetProcAddress")) *pfn = (void*)cuGetProcAddress_v2;
    else *pfn = substitute(*pfn);
  }
  return r;
}

__attribute__((visibility("default"))) void* dlsym(void* h, const char* sym) {
  void* p = real_dlsym()(h, sym);
  if (p && sym[0] == 'c' && sym[1] == 'u') {
    if (!strcmp(sym, "cuGetProcAddress_v2")) return (void*)cuGetProcAddress_v2;
    return substitute(p);
  }
  return p;
}

// early mode: the driver calls this inside cuInit (CUDA_INJECTION64_PATH)
__attribute__((visibility("default"))) int InitializeInjection() {
  static CUpti_SubscriberHandle sub;
  return subscribe(&sub) ? 1 : 0;
}

}  // extern "C"
