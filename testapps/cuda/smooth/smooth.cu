// smooth: y = w (*) x, a 64-tap filter, launched 5 times (n = 1<<22 by default, argv[1]
// overrides; argv[2] the launch count, for bench/apply_speedup.py's warm-up runs). Inputs are small dyadic numbers so every sum is exact in float32.
#include "common/testapp.hpp"
#include "smooth/smooth_kernel.cuh"

__global__ void init_smooth(float* x, float* w, int n, int taps) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = static_cast<float>((i * 37) % 64) / 64.0f;
  if (i < taps) w[i] = static_cast<float>(1 + (i % 5)) / 16.0f;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : (1 << 22);
  const int launches = argc > 2 ? std::atoi(argv[2]) : 5;
  const int taps = 64;
  if (n < taps || launches < 1) {
    std::fprintf(stderr, "smooth: n must be at least %d and launches at least 1\n", taps);
    return 2;
  }
  float *x = nullptr, *y = nullptr, *w = nullptr;
  TA_CHECK(cudaMalloc(&x, size_t(n) * sizeof(float)));
  TA_CHECK(cudaMalloc(&y, size_t(n) * sizeof(float)));
  TA_CHECK(cudaMalloc(&w, taps * sizeof(float)));
  const int block = 256, grid = (n + block - 1) / block;
  init_smooth<<<grid, block>>>(x, w, n, taps);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());

  testapp::Report report;
  report.add("x", x);
  report.add("y", y);
  report.add("w", w);
  report.add("n", static_cast<unsigned long long>(n));
  report.write();

  for (int it = 0; it < launches; ++it) {
    TA_CHECK(cudaMemsetAsync(y, 0, size_t(n) * sizeof(float)));  // every dispatch changes y
    smooth<<<grid, block>>>(x, y, w, n, taps);
    TA_CHECK(cudaGetLastError());
  }
  TA_CHECK(cudaDeviceSynchronize());
  TA_CHECK(cudaFree(x));
  TA_CHECK(cudaFree(y));
  TA_CHECK(cudaFree(w));
  testapp::mark_done();
  return 0;
}
