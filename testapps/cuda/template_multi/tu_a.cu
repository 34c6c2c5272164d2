#include "stencil.cuh"

cudaError_t run_stencil_k1(const float* in, float* out, int n) {
  stencil<1><<<(n + 255) / 256, 256>>>(in, out, n);
  return cudaGetLastError();
}
