#include "kernel_timer.hpp"

#include <cupti.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include "resources.hpp"

#ifndef KC_CUPTI_LIBRARY
#define KC_CUPTI_LIBRARY "libcupti.so"
#endif

namespace kc::replay {
namespace {

constexpr size_t kBufferSize = 4u << 20;
constexpr auto kTag = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;

struct Span {
  uint64_t start = UINT64_MAX, end = 0;
};

// CUPTI's callbacks are plain functions: what they collect lives here, for the one timer
// recording at a time.
struct Records {
  std::mutex mu;
  std::unordered_map<uint32_t, uint64_t> tag_of;  // correlation id -> k
  std::unordered_map<uint32_t, Span> kernels;     // correlation id -> its kernels' span
  size_t dropped = 0;
  bool active = false;
};
Records& records() {
  static Records* r = new Records;  // never destroyed: a late buffer may arrive at exit
  return *r;
}

// The CUPTI entry points, resolved from the library opened at run time.
struct Cupti {
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped = nullptr;
  decltype(&cuptiActivityPushExternalCorrelationId) push = nullptr;
  decltype(&cuptiActivityPopExternalCorrelationId) pop = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  std::string missing;  // why it could not be opened, else empty
};

template <class F>
bool resolve(void* lib, F& fn, const char* name, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn && missing.empty()) missing = std::string("libcupti has no ") + name;
  return fn != nullptr;
}

const Cupti& cupti() {
  static const Cupti c = [] {
    Cupti c;
    void* lib = dlopen(KC_CUPTI_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcupti.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      c.missing = std::string("libcupti could not be opened (") + KC_CUPTI_LIBRARY + ", then the loader's path)";
      return c;
    }
    resolve(lib, c.register_callbacks, "cuptiActivityRegisterCallbacks", c.missing);
    resolve(lib, c.enable, "cuptiActivityEnable", c.missing);
    resolve(lib, c.disable, "cuptiActivityDisable", c.missing);
    resolve(lib, c.flush_all, "cuptiActivityFlushAll", c.missing);
    resolve(lib, c.next_record, "cuptiActivityGetNextRecord", c.missing);
    resolve(lib, c.dropped, "cuptiActivityGetNumDroppedRecords", c.missing);
    resolve(lib, c.push, "cuptiActivityPushExternalCorrelationId", c.missing);
    resolve(lib, c.pop, "cuptiActivityPopExternalCorrelationId", c.missing);
    resolve(lib, c.result_string, "cuptiGetResultString", c.missing);
    return c;
  }();
  return c;
}

void check(CUptiResult r, const char* call) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  if (cupti().result_string) cupti().result_string(r, &msg);
  throw Error("input", std::string("the kernel timer: ") + call + " failed: " + (msg ? msg : "unknown CUPTI error") +
                           " (" + std::to_string(int(r)) + "); time with CUDA events instead (--timer events)");
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferSize));
  *size = *buffer ? kBufferSize : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid) {
  Records& s = records();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    CUpti_Activity* rec = nullptr;
    while (s.active && cupti().next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
      if (rec->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
        if (e->externalKind == kTag) s.tag_of[e->correlationId] = e->externalId;
      } else if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        Span& sp = s.kernels[k->correlationId];
        sp.start = std::min<uint64_t>(sp.start, k->start);
        sp.end = std::max<uint64_t>(sp.end, k->end);
      }
    }
    size_t dropped = 0;
    if (s.active && cupti().dropped(ctx, stream_id, &dropped) == CUPTI_SUCCESS) s.dropped += dropped;
  }
  std::free(buffer);
}

}  // namespace

KernelTimer::KernelTimer() {
  const Cupti& c = cupti();
  if (!c.missing.empty()) throw Error("input", "the kernel timer needs CUPTI: " + c.missing +
                                                   "; time with CUDA events instead (--timer events)");
  if (std::getenv("CUDA_INJECTION64_PATH"))  // another CUPTI client owns the activity callbacks
    throw Error("input", "the kernel timer cannot run in a process with a CUDA injection library "
                         "(CUDA_INJECTION64_PATH is set: e.g. under kerncap profile); time with --timer events");
  Records& s = records();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.active) throw Error("input", "another kernel timer is recording in this process");
    s.tag_of.clear();
    s.kernels.clear();
    s.dropped = 0;
    s.active = true;
  }
  try {
    check(c.register_callbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    // CUPTI writes an external-correlation record only for an API call it records: the
    // driver's records are on for that alone (measured on an H100: none without them).
    check(c.enable(CUPTI_ACTIVITY_KIND_DRIVER), "cuptiActivityEnable(DRIVER)");
    check(c.enable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION), "cuptiActivityEnable(EXTERNAL_CORRELATION)");
    check(c.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(CONCURRENT_KERNEL)");
  } catch (...) {
    stop();
    throw;
  }
}

KernelTimer::~KernelTimer() { stop(); }

void KernelTimer::stop() noexcept {
  const Cupti& c = cupti();
  c.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  c.disable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  c.disable(CUPTI_ACTIVITY_KIND_DRIVER);
  c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  Records& s = records();
  std::lock_guard<std::mutex> lock(s.mu);
  s.active = false;
  s.tag_of.clear();
  s.kernels.clear();
}

void KernelTimer::begin(uint64_t k) { check(cupti().push(kTag, k), "cuptiActivityPushExternalCorrelationId"); }

void KernelTimer::end() {
  uint64_t last = 0;
  check(cupti().pop(kTag, &last), "cuptiActivityPopExternalCorrelationId");
}

std::vector<double> KernelTimer::spans_ms(uint64_t n) {
  check(cupti().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  Records& s = records();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.dropped)
    throw Error("input", "the kernel timer: CUPTI dropped " + std::to_string(s.dropped) +
                             " records; time fewer iterations or with --timer events");
  std::vector<Span> per(n);
  for (const auto& [corr, span] : s.kernels) {
    auto it = s.tag_of.find(corr);
    if (it == s.tag_of.end() || it->second >= n) continue;  // not a timed launch (restores, checks, warm-up)
    Span& p = per[it->second];
    p.start = std::min(p.start, span.start);
    p.end = std::max(p.end, span.end);
  }
  std::vector<double> out;
  out.reserve(n);
  for (uint64_t k = 0; k < n; ++k) {
    if (per[k].end < per[k].start || per[k].start == UINT64_MAX)
      throw Error("input", "the kernel timer has no kernel record of timed launch " + std::to_string(k) + " (" +
                               std::to_string(s.kernels.size()) + " kernel records, " +
                               std::to_string(s.tag_of.size()) + " tagged calls); time with --timer events");
    out.push_back(double(per[k].end - per[k].start) * 1e-6);
  }
  s.tag_of.clear();
  s.kernels.clear();
  return out;
}

}  // namespace kc::replay
