// Run-time access to the CUDA driver API.
//
// Nothing in kerncap links against libcuda (build machines have none, DESIGN fact 11):
// entry points are resolved on first use with dlsym on dlopen("libcuda.so.1"). Use
// KC_CU(cuMemAlloc)(&p, n): the name is looked up *after* cuda.h's versioning macros
// (cuMemAlloc -> "cuMemAlloc_v2"), so the symbol has exactly the prototype we compiled
// against. Not cuGetProcAddress(base name, CUDA_VERSION): it returns the newest ABI,
// which for some calls differs from the header's unversioned prototype (measured on
// the H200: "cuCtxGetDevice" at 13000 is cuCtxGetDevice_v2(CUdevice*, CUcontext) and
// crashed when called with one argument).
#pragma once
#include <cuda.h>

#include <stdexcept>
#include <string>

namespace kc {

// Thrown for every failing driver call; what() names the call and the object.
class CudaError : public std::runtime_error {
 public:
  CudaError(CUresult code, const std::string& msg) : std::runtime_error(msg), code(code) {}
  CUresult code;
};

// Loads libcuda.so.1 once; throws std::runtime_error naming the library when absent.
void* driver_library();
// Resolves an exported driver symbol ("cuMemAlloc_v2"); throws when missing.
void* driver_symbol(const char* name);
// "CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal memory access was encountered".
std::string cu_error_string(CUresult r);

template <class F>
struct DriverFn {
  F fn = nullptr;
  explicit DriverFn(const char* name) : fn(reinterpret_cast<F>(driver_symbol(name))) {}
};

// Throws CudaError("<call> on <what>: <error>") unless r == CUDA_SUCCESS.
void check(CUresult r, const char* call, const std::string& what = std::string());

}  // namespace kc

#define KC_STR2(x) #x
#define KC_STR(x) KC_STR2(x)
// decltype(&::cuMemAlloc) and KC_STR(cuMemAlloc) both see the expanded cuMemAlloc_v2.
#define KC_CU(name) \
  ([]() -> decltype(&::name) { static ::kc::DriverFn<decltype(&::name)> f(KC_STR(name)); return f.fn; }())

// KC_CHECK(cuMemAlloc, (&p, n), "region 3") -> checked call naming the object.
#define KC_CHECK(name, args, what) ::kc::check(KC_CU(name) args, #name, (what))
