// A variant of sparse_arena's arena_reduce (testapps/cuda/hostmem/arena_kernel.cuh) that
// also writes 64 MiB past its output: memory of the arena the captured kernel never
// wrote, which a sparse replay backs read-only (tests/gpu/test_hostmem_gpu.py).
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
  if (threadIdx.x == 0) {
    out[blockIdx.x] = partial[0];
    out[(size_t(64) << 20) / sizeof(float) + blockIdx.x] = partial[0];  // the stray write
  }
}
