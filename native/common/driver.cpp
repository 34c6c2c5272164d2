#include "driver.hpp"

#include <dlfcn.h>

#include <mutex>

namespace kc {

void* driver_library() {
  static void* handle = [] {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      const char* e = dlerror();
      throw std::runtime_error(std::string("no CUDA driver: dlopen(libcuda.so.1) failed: ") +
                               (e ? e : "unknown error") +
                               ". Run on a machine with an NVIDIA GPU and driver installed.");
    }
    return h;
  }();
  return handle;
}

void* driver_symbol(const char* name) {
  // Inside a captured app libkerncap_entry.so hooks dlsym and would hand kerncap the
  // wrappers it hands the app; kerncap's own calls go to the driver itself.
  using Dlsym = void* (*)(void*, const char*);
  static Dlsym lookup = [] {
    auto real = reinterpret_cast<Dlsym>(dlsym(RTLD_DEFAULT, "kerncap_entry_real_dlsym"));
    return real ? real : static_cast<Dlsym>(&dlsym);
  }();
  void* fn = lookup(driver_library(), name);
  if (!fn) {
    throw std::runtime_error(std::string("the CUDA driver (libcuda.so.1) has no entry point ") + name +
                             ": driver older than the CUDA " + std::to_string(CUDA_VERSION / 1000) +
                             " headers kerncap was built with? Update the NVIDIA driver.");
  }
  return fn;
}

std::string cu_error_string(CUresult r) {
  const char* name = nullptr;
  const char* desc = nullptr;
  try {
    static auto get_name = reinterpret_cast<CUresult (*)(CUresult, const char**)>(driver_symbol("cuGetErrorName"));
    static auto get_desc = reinterpret_cast<CUresult (*)(CUresult, const char**)>(driver_symbol("cuGetErrorString"));
    get_name(r, &name);
    get_desc(r, &desc);
  } catch (const std::exception&) {
  }
  std::string s = name ? name : "CUDA_ERROR";
  s += " (" + std::to_string(static_cast<int>(r)) + ")";
  if (desc) s += std::string(": ") + desc;
  return s;
}

void check(CUresult r, const char* call, const std::string& what) {
  if (r == CUDA_SUCCESS) return;
  std::string msg = call;
  if (!what.empty()) msg += " on " + what;
  msg += " failed: " + cu_error_string(r);
  throw CudaError(r, msg);
}

}  // namespace kc
