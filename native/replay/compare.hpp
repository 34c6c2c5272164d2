// Host side of the GPU compare kernels (compare_kernels.cu, embedded as a fatbin).
#pragma once
#include <cuda.h>

#include <string>

#include "resources.hpp"

namespace kc::replay {

// Mirrors CmpResult in compare_kernels.cu.
struct CmpResult {
  unsigned long long mismatches;
  unsigned long long first;  // lowest mismatching byte / element index; ~0ull when none
  unsigned long long max_abs_bits;
  unsigned long long max_rel_bits;
};
constexpr unsigned long long kNone = ~0ull;

// Bytes per element of a tolerance dtype ("float32", ...); 0 when unknown.
size_t dtype_size(const std::string& dtype);

class Comparer {
 public:
  Comparer();  // loads the embedded fatbin
  // Byte-exact comparison of `size` bytes into *out (device memory).
  void bytes(CUstream s, CUdeviceptr actual, CUdeviceptr expected, size_t size, CUdeviceptr out);
  // Element-wise comparison with tolerance; `what` names the buffer in errors.
  void elements(CUstream s, const std::string& dtype, double atol, double rtol, CUdeviceptr actual,
                CUdeviceptr expected, size_t size, CUdeviceptr out, const std::string& what);

 private:
  CUfunction function(const std::string& name);
  Module module_;
};

}  // namespace kc::replay
