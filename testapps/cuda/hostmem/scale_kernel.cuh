// The in-place update of host_register_scale.cu: p[i] = p[i] * a + b (exact in float32
// for the app's inputs: multiples of 1/8 below 2^12 times 1.5, plus 1/4).
#pragma once

__global__ void scale_host(float* p, float a, float b, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * a + b;
}
