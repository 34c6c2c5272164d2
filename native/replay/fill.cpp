#include "fill.hpp"

#include <algorithm>
#include <cmath>

#include "compare.hpp"       // dtype_size
#include "perturb_fatbin.h"  // generated: kc_perturb_fatbin[]

namespace kc::replay {
namespace {

struct FillKernel {
  const char* dtype;
  const char* kernel;
};
constexpr FillKernel kFillKernels[] = {
    {"float64", "kc_fill_f64"}, {"float32", "kc_fill_f32"}, {"float16", "kc_fill_f16"},
    {"bfloat16", "kc_fill_bf16"}, {"int32", "kc_fill_i32"}, {"int8", "kc_fill_i8"},
    {"uint8", "kc_fill_u8"},
};

constexpr unsigned kThreads = 256;
constexpr unsigned long long kMaxBlocks = 8192;  // grid-stride beyond this

}  // namespace

Filler::Filler() : module_(kc_perturb_fatbin, "the embedded perturbation kernels") {
  empty_ = function("kc_empty");
  touch_ = function("kc_touch");
}

CUfunction Filler::function(const char* name) {
  CUfunction f = nullptr;
  KC_CHECK(cuModuleGetFunction, (&f, module_.get(), name), std::string(name) + " in the embedded perturbation kernels");
  return f;
}

void Filler::fill(CUstream s, const std::string& dtype, CUdeviceptr dst, unsigned long long count,
                  const FillParams& p, const std::string& what) {
  const FillKernel* k = nullptr;
  for (const FillKernel& c : kFillKernels)
    if (dtype == c.dtype) k = &c;
  if (!k) throw Error("input", "cannot perturb " + what + ": unsupported dtype " + dtype);
  const size_t size = dtype_size(dtype);
  if (dst % size) throw Error("input", what + " at " + hex_address(dst) + " is not aligned for " + dtype);
  // Integer conversions of out-of-range doubles are undefined: the range must fit.
  const std::string t = dtype;
  const double lo = t == "int32" ? -2147483648.0 : t == "int8" ? -128.0 : t == "uint8" ? 0.0 : -INFINITY;
  const double hi = t == "int32" ? 2147483647.0 : t == "int8" ? 127.0 : t == "uint8" ? 255.0 : INFINITY;
  if (!(p.lo >= lo && p.hi <= hi && p.lo <= p.hi))
    throw Error("input", "cannot perturb " + what + ": range [" + std::to_string(p.lo) + ", " + std::to_string(p.hi) +
                             "] does not fit " + dtype);
  if (count == 0) return;
  CUfunction f = function(k->kernel);
  FillParams params = p;
  void* args[] = {&dst, &count, &params};
  const unsigned blocks =
      static_cast<unsigned>(std::clamp<unsigned long long>((count + kThreads - 1) / kThreads, 1, kMaxBlocks));
  KC_CHECK(cuLaunchKernel, (f, blocks, 1, 1, kThreads, 1, 1, 0, s, args, nullptr), std::string(k->kernel) + " on " + what);
}

void Filler::empty(CUstream s) {
  KC_CHECK(cuLaunchKernel, (empty_, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr), "kc_empty (the launch floor)");
}

void Filler::touch(CUstream s, CUdeviceptr p, unsigned long long n, const std::string& what) {
  if (n == 0) return;
  CUdeviceptr sink = 0;  // never written (kc_touch)
  void* args[] = {&p, &n, &sink};
  const unsigned long long sectors = (n + 31) / 32;
  const unsigned blocks =
      static_cast<unsigned>(std::clamp<unsigned long long>((sectors + kThreads - 1) / kThreads, 1, kMaxBlocks));
  KC_CHECK(cuLaunchKernel, (touch_, blocks, 1, 1, kThreads, 1, 1, 0, s, args, nullptr), "kc_touch warming L2 with " + what);
}

}  // namespace kc::replay
