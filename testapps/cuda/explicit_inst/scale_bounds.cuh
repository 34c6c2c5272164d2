// A kernel template declared with __launch_bounds__ in a header and instantiated
// explicitly in one translation unit (explicit_inst.cu), as ggml's template-instances/
// files do: the reduced recompile must not instantiate the captured instance twice.
#pragma once
#include <cuda_fp16.h>

namespace ei {

template <typename T, int N>
__global__ void __launch_bounds__(256) scale_n(const T* __restrict__ x, T* __restrict__ y, int n);

template <typename T, int N>
__global__ void __launch_bounds__(256) scale_n(const T* __restrict__ x, T* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    T v = x[i];
#pragma unroll
    for (int j = 1; j < N; ++j) v = v + x[i];
    y[i] = v;  // N * x[i]
  }
}

}  // namespace ei
