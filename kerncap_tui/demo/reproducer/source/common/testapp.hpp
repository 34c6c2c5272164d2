// Shared by the CUDA test applications: error checking and the report file.
//
// The GPU tests need to know which device buffers an app allocated (addresses move on
// every run, DESIGN fact 5). When KC_TESTAPP_REPORT names a file, an app writes its
// buffer addresses there as flat JSON *before* launching the target kernel, so the
// report exists even when the capturing process exits right after the capture. When
// KC_TESTAPP_DONE names a file, the app creates it on normal exit.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

#define TA_CHECK(call)                                                                   \
  do {                                                                                   \
    cudaError_t err_ = (call);                                                           \
    if (err_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,          \
                   cudaGetErrorString(err_));                                            \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

namespace testapp {

class Report {
 public:
  void add(const std::string& key, const void* device_ptr) {
    entries_.emplace_back(key, static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(device_ptr)));
  }
  void add(const std::string& key, unsigned long long value) { entries_.emplace_back(key, value); }

  // Writes {"key": value, ...} to $KC_TESTAPP_REPORT; does nothing when it is unset.
  void write() const {
    const char* path = std::getenv("KC_TESTAPP_REPORT");
    if (!path || !*path) return;
    FILE* f = std::fopen(path, "w");
    if (!f) {
      std::fprintf(stderr, "testapp: cannot write report %s\n", path);
      std::exit(1);
    }
    std::fprintf(f, "{");
    for (size_t i = 0; i < entries_.size(); ++i)
      std::fprintf(f, "%s\"%s\": %llu", i ? ", " : "", entries_[i].first.c_str(), entries_[i].second);
    std::fprintf(f, "}\n");
    if (std::fclose(f) != 0) {
      std::fprintf(stderr, "testapp: cannot write report %s\n", path);
      std::exit(1);
    }
  }

 private:
  std::vector<std::pair<std::string, unsigned long long>> entries_;
};

// Creates $KC_TESTAPP_DONE (if set): the app reached its normal end.
inline void mark_done() {
  const char* path = std::getenv("KC_TESTAPP_DONE");
  if (!path || !*path) return;
  FILE* f = std::fopen(path, "w");
  if (f) std::fclose(f);
}

// Driver API functions through cudart's entry points (the build machines have no libcuda
// to link): driver_entry("cuMemMap") or exit 1 naming it; cu_check(r, "what") exits 1
// naming the call and the CUresult. `app` prefixes the messages.
inline const char*& app_name() {
  static const char* name = "testapp";
  return name;
}

inline void* driver_entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  TA_CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q));
  if (!fn || q != cudaDriverEntryPointSuccess) {
    std::fprintf(stderr, "%s: no driver entry point %s (query result %d)\n", app_name(), name, int(q));
    std::exit(1);
  }
  return fn;
}

inline void cu_check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  using ErrFn = CUresult (*)(CUresult, const char**);
  static ErrFn error_name = reinterpret_cast<ErrFn>(driver_entry("cuGetErrorName"));
  const char* name = "?";
  error_name(r, &name);
  std::fprintf(stderr, "%s: %s failed: %s (%d)\n", app_name(), what, name, int(r));
  std::exit(1);
}

}  // namespace testapp
