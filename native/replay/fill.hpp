// Host side of the perturbation kernels (perturb_kernels.cu, embedded as a fatbin):
// reproducible pseudo-random fills of captured memory, and the empty kernel that
// measures the launch/timing floor, and the read that warms L2 before a timed launch.
#pragma once
#include <cuda.h>

#include <string>

#include "resources.hpp"

namespace kc::replay {

// Mirrors FillParams in perturb_kernels.cu.
struct FillParams {
  double mean, stddev, lo, hi, p_zero;
  unsigned long long seed;
};

class Filler {
 public:
  Filler();  // loads the embedded fatbin
  // Fills `count` elements of `dtype` at `dst` (device memory); `what` names it in errors.
  void fill(CUstream s, const std::string& dtype, CUdeviceptr dst, unsigned long long count, const FillParams& p,
            const std::string& what);
  // One launch of the empty kernel (1 block of 1 thread).
  void empty(CUstream s);
  // Reads one byte of every 32-byte sector of [p, p + n) (kc_touch): those sectors in L2.
  void touch(CUstream s, CUdeviceptr p, unsigned long long n, const std::string& what);

 private:
  CUfunction function(const char* name);
  Module module_;
  CUfunction empty_ = nullptr;
  CUfunction touch_ = nullptr;
};

}  // namespace kc::replay
