// axpy_inplace: y += a*x in place, launched 10 times (n = 1<<24 by default, argv[1]
// overrides; ~50 us per launch on an H200). Inputs are small dyadic numbers, so every
// product and sum is exact in float32: tests can predict a variant's output bytes.
#include "axpy_kernel.cuh"
#include "common/testapp.hpp"

__global__ void init_axpy(float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    x[i] = static_cast<float>(i % 1024) / 256.0f;
    y[i] = static_cast<float>(i % 77) * 0.5f;
  }
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : (1 << 24);
  if (n <= 0) {
    std::fprintf(stderr, "axpy_inplace: bad n %s\n", argv[1]);
    return 2;
  }
  float *x = nullptr, *y = nullptr;
  TA_CHECK(cudaMalloc(&x, size_t(n) * sizeof(float)));
  TA_CHECK(cudaMalloc(&y, size_t(n) * sizeof(float)));
  const int block = 256;
  const int grid = (n + block - 1) / block;
  init_axpy<<<grid, block>>>(x, y, n);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());

  testapp::Report report;
  report.add("x", x);
  report.add("y", y);
  report.add("n", static_cast<unsigned long long>(n));
  report.write();

  for (int it = 0; it < 10; ++it) {
    axpy_inplace<<<grid, block>>>(0.5f, x, y, n);
    TA_CHECK(cudaGetLastError());
  }
  TA_CHECK(cudaDeviceSynchronize());
  TA_CHECK(cudaFree(x));
  TA_CHECK(cudaFree(y));
  testapp::mark_done();
  return 0;
}
