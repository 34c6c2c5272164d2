#include "compare.hpp"

#include <algorithm>

#include "compare_fatbin.h"  // generated: kc_compare_fatbin[]

namespace kc::replay {
namespace {

struct Dtype {
  const char* name;
  const char* kernel;
  size_t size;
};
constexpr Dtype kDtypes[] = {
    {"float64", "kc_cmp_f64", 8}, {"float32", "kc_cmp_f32", 4}, {"float16", "kc_cmp_f16", 2},
    {"bfloat16", "kc_cmp_bf16", 2}, {"int32", "kc_cmp_i32", 4}, {"int8", "kc_cmp_i8", 1},
    {"uint8", "kc_cmp_u8", 1},
};

const Dtype* find_dtype(const std::string& name) {
  for (const Dtype& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

constexpr unsigned kThreads = 256;
constexpr unsigned long long kMaxBlocks = 4096;  // grid-stride beyond this

unsigned blocks_for(unsigned long long work) {
  return static_cast<unsigned>(std::clamp<unsigned long long>((work + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

}  // namespace

size_t dtype_size(const std::string& dtype) {
  const Dtype* d = find_dtype(dtype);
  return d ? d->size : 0;
}

Comparer::Comparer() : module_(kc_compare_fatbin, "the embedded compare kernels") {}

CUfunction Comparer::function(const std::string& name) {
  CUfunction f = nullptr;
  KC_CHECK(cuModuleGetFunction, (&f, module_.get(), name.c_str()), name + " in the embedded compare kernels");
  return f;
}

void Comparer::bytes(CUstream s, CUdeviceptr actual, CUdeviceptr expected, size_t size, CUdeviceptr out) {
  CUfunction f = function("kc_cmp_bytes");
  unsigned long long n = size;
  int vec16 = (actual % 16 == 0 && expected % 16 == 0) ? 1 : 0;
  void* args[] = {&actual, &expected, &n, &vec16, &out};
  const unsigned long long work = vec16 ? n / 16 + n % 16 : n;
  KC_CHECK(cuLaunchKernel, (f, blocks_for(work), 1, 1, kThreads, 1, 1, 0, s, args, nullptr), "kc_cmp_bytes");
}

void Comparer::elements(CUstream s, const std::string& dtype, double atol, double rtol, CUdeviceptr actual,
                        CUdeviceptr expected, size_t size, CUdeviceptr out, const std::string& what) {
  const Dtype* d = find_dtype(dtype);
  if (!d) throw Error("input", "unknown dtype " + dtype + " for " + what);
  if (actual % d->size || expected % d->size)
    throw Error("input", what + " at " + hex_address(actual) + " is not aligned for " + dtype);
  CUfunction f = function(d->kernel);
  unsigned long long n_elems = size / d->size, n_bytes = size;
  void* args[] = {&actual, &expected, &n_elems, &n_bytes, &atol, &rtol, &out};
  KC_CHECK(cuLaunchKernel, (f, blocks_for(n_elems), 1, 1, kThreads, 1, 1, 0, s, args, nullptr), d->kernel);
}

}  // namespace kc::replay
