// Run-time access to the CUDA driver API.
//
// Nothing in kerncap links against libcuda (build machines have none, DESIGN fact 11):
// entry points are resolved on first use through cuGetProcAddress from
// dlopen("libcuda.so.1"). Use KC_CU(cuMemAlloc)(&p, n): the base name is looked up
// (cuGetProcAddress picks the ABI version matching the cuda.h we compiled against)
// and the pointer is cached per call site.
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
// Resolves a driver entry point by base name ("cuMemAlloc"); throws when missing.
void* driver_symbol(const char* base_name);
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

// decltype(&::cuMemAlloc) expands cuda.h's versioning macro (cuMemAlloc_v2) while
// #name keeps the base name that cuGetProcAddress wants.
#define KC_CU(name) \
  ([]() -> decltype(&::name) { static ::kc::DriverFn<decltype(&::name)> f(#name); return f.fn; }())

// KC_CHECK(cuMemAlloc, (&p, n), "region 3") -> checked call naming the object.
#define KC_CHECK(name, args, what) ::kc::check(KC_CU(name) args, #name, (what))
