// The reduction of sparse_arena.cu: block b sums its grid-stride slice of `data` in a
// fixed order (per-thread strided sums, then a tree in shared memory) into out[b].
#pragma once
#include <cstddef>

__global__ void arena_reduce(const float* __restrict__ data, size_t n, float* __restrict__ out) {
  __shared__ float partial[256];
  float acc = 0.0f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    acc += data[i];
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
