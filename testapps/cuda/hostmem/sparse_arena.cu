// sparse_arena: a huge, mostly empty arena as JAX's BFC allocator or a vLLM KV cache
// preallocates it (issue 25). One cudaMalloc of <arena GiB>, zeroed; <data MiB> of
// non-zero data at 37 % of it; the kernel reduces the data into a small output inside
// the arena just after the data (one float per block, no atomics: deterministic).
// Used by tests/gpu/test_hostmem_gpu.py (2 GiB, 64 MiB) and bench/sparse.py (100 GiB,
// 1 GiB against 1 GiB dense).
#include <cstdlib>

#include "common/testapp.hpp"
#include "arena_kernel.cuh"

__global__ void fill_data(float* data, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    // splitmix64 of the index: no two 4 MiB chunks alike (a 32-bit multiplicative hash
    // repeated every 2^26 floats, so 1 GiB of data stored as 260 MiB of distinct chunks)
    unsigned long long z = i + 0x9E3779B97F4A7C15ull * seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    data[i] = float(z % 2048) * 0.0625f + 1.0f;  // exact, non-zero
  }
}

int main(int argc, char** argv) {
  const double arena_gib = argc > 1 ? std::atof(argv[1]) : 2.0;
  const double data_mib = argc > 2 ? std::atof(argv[2]) : 64.0;
  const size_t arena = size_t(arena_gib * double(1ull << 30));
  const size_t data_bytes = size_t(data_mib * double(1 << 20)) / 4096 * 4096;
  const size_t n = data_bytes / sizeof(float);
  const int block = 256, grid = 4096;
  const size_t out_bytes = size_t(grid) * sizeof(float);
  // Data at 37 % of the arena (4 MiB aligned), the output right after it, in its own chunk.
  size_t at = size_t(double(arena) * 0.37) / (4u << 20) * (4u << 20);
  if (at + data_bytes + (8u << 20) > arena) at = 0;
  if (n == 0 || at + data_bytes + (8u << 20) > arena) {
    std::fprintf(stderr, "sparse_arena: %.2f GiB cannot hold %.1f MiB of data and the output\n", arena_gib, data_mib);
    return 2;
  }
  char* base = nullptr;
  TA_CHECK(cudaMalloc(&base, arena));
  TA_CHECK(cudaMemset(base, 0, arena));
  float* data = reinterpret_cast<float*>(base + at);
  float* out = reinterpret_cast<float*>(base + at + (data_bytes + (4u << 20) - 1) / (4u << 20) * (4u << 20));
  fill_data<<<1024, 256>>>(data, n, 12345u);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());

  testapp::Report report;
  report.add("arena", base);
  report.add("data", data);
  report.add("out", out);
  report.add("n", static_cast<unsigned long long>(n));
  report.add("arena_bytes", static_cast<unsigned long long>(arena));
  report.add("data_bytes", static_cast<unsigned long long>(data_bytes));
  report.write();

  for (int it = 0; it < 2; ++it) {
    TA_CHECK(cudaMemset(out, 0, out_bytes));  // every dispatch changes `out`
    arena_reduce<<<grid, block>>>(data, n, out);
    TA_CHECK(cudaGetLastError());
    TA_CHECK(cudaDeviceSynchronize());
  }
  TA_CHECK(cudaFree(base));
  testapp::mark_done();
  return 0;
}
