// The axpy target, shared by axpy_inplace.cu. The variants in variants/ declare the
// same signature, so their mangled name (_Z12axpy_inplacefPKfPfi) and parameter layout
// match and `kerncap replay --cubin` can swap them in.
#pragma once

// In place: replay needs y's pre-state, not just the captured outputs (DESIGN §6).
// fmaf spells out the contraction nvcc would make anyway, so every variant rounds alike.
__global__ void axpy_inplace(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaf(a, x[i], y[i]);
}
