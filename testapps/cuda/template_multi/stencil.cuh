// One kernel template, instantiated with different K in two translation units
// (tu_a.cu: K=1, tu_b.cu: K=3). The tests capture one instance by its mangled name.
#pragma once

#include <cuda_runtime.h>

template <int K>
__global__ void stencil(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float sum = 0.0f;
#pragma unroll
  for (int j = -K; j <= K; ++j) {
    int k = min(max(i + j, 0), n - 1);
    sum += in[k];
  }
  out[i] = sum * (1.0f / (2 * K + 1));
}

// Host launchers, one per translation unit.
cudaError_t run_stencil_k1(const float* in, float* out, int n);
cudaError_t run_stencil_k3(const float* in, float* out, int n);
