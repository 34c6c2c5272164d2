// The gather of zero_copy_gather.cu, in a header of its own so that a reproducer's
// source holds just what the kernel needs.
#pragma once

__global__ void gather_table(const float* __restrict__ table, const int* __restrict__ idx, float* __restrict__ out,
                             int n, float* unused) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (n < 0 && unused) unused[0] = 1.0f;  // never taken: `unused` points at pageable memory
  if (i < n) out[i] = table[idx[i]] * 2.0f + 1.0f;
}
