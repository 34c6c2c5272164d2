// The cost floor of CUPTI itself, to read bench/overhead.py's figures against: an
// injection library that does nothing but what KC_FLOOR names.
//   inject     loaded as the injection library, nothing else (no CUPTI subscriber)
//   subscribe  cuptiSubscribe only, no callback enabled
//   launch     + the six kernel-launch callback ids, with an empty callback
//   graph      + cuGraphLaunch(_ptsz), with an empty callback (bench/graphs.py)
//   trace      every driver API callback id, counting calls per function name; the
//              counts are printed to stderr at exit (which API calls an app makes)
// Built and run by bench/cupti_floor.py; not part of kerncap.
#include <cupti.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>
#include <algorithm>

namespace {
CUpti_SubscriberHandle g_sub;
std::mutex g_mu;
std::map<std::string, unsigned long>* g_counts;

void CUPTIAPI empty_cb(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

void CUPTIAPI trace_cb(void*, CUpti_CallbackDomain domain, CUpti_CallbackId, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite != CUPTI_API_ENTER) return;
  std::lock_guard<std::mutex> lock(g_mu);
  (*g_counts)[cb->functionName]++;
}

void print_counts() {
  std::vector<std::pair<unsigned long, std::string>> v;
  for (auto& [k, n] : *g_counts) v.emplace_back(n, k);
  std::sort(v.rbegin(), v.rend());
  for (auto& [n, k] : v) std::fprintf(stderr, "kc_floor_trace %10lu %s\n", n, k.c_str());
}

void check(CUptiResult r, const char* what) {
  if (r != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kc_floor: %s failed (%d)\n", what, int(r));
    std::exit(90);
  }
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  const char* mode = std::getenv("KC_FLOOR");
  if (!mode) return 1;
  if (!std::strcmp(mode, "inject")) return 1;
  const bool trace = !std::strcmp(mode, "trace");
  check(cuptiSubscribe(&g_sub, trace ? trace_cb : empty_cb, nullptr), "cuptiSubscribe");
  if (!std::strcmp(mode, "launch")) {
    for (CUpti_CallbackId id :
         {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
          CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
          CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz})
      check(cuptiEnableCallback(1, g_sub, CUPTI_CB_DOMAIN_DRIVER_API, id), "cuptiEnableCallback");
  }
  if (!std::strcmp(mode, "graph")) {
    for (CUpti_CallbackId id : {CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz})
      check(cuptiEnableCallback(1, g_sub, CUPTI_CB_DOMAIN_DRIVER_API, id), "cuptiEnableCallback");
  } else if (trace) {
    g_counts = new std::map<std::string, unsigned long>;
    check(cuptiEnableDomain(1, g_sub, CUPTI_CB_DOMAIN_DRIVER_API), "cuptiEnableDomain");
    std::atexit(print_counts);
  }
  return 1;
}
