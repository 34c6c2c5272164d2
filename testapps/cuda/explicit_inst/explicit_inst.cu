// explicit_inst: ei::scale_n<__half, 4> and ei::scale_n<float, 2> (scale_bounds.cuh,
// __launch_bounds__(256)) instantiated explicitly here and launched once each through a
// host launcher (issue 43: the reduced recompile of an explicitly instantiated template).
// y = N * x, exact for the small integers used.
#include "common/testapp.hpp"
#include "explicit_inst/scale_bounds.cuh"

template __global__ void ei::scale_n<__half, 4>(const __half* __restrict__, __half* __restrict__, int);
template __global__ void ei::scale_n<float, 2>(const float* __restrict__, float* __restrict__, int);

__global__ void init_ei(__half* xh, float* xf, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    xh[i] = __float2half(static_cast<float>(i % 64));
    xf[i] = static_cast<float>(i % 100);
  }
}

template <typename T, int N>
static void launch(const T* x, T* y, int n) {
  ei::scale_n<T, N><<<(n + 255) / 256, 256>>>(x, y, n);
  TA_CHECK(cudaGetLastError());
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : (1 << 16);
  if (n <= 0) {
    std::fprintf(stderr, "explicit_inst: bad n %s\n", argv[1]);
    return 2;
  }
  __half *xh = nullptr, *yh = nullptr;
  float *xf = nullptr, *yf = nullptr;
  TA_CHECK(cudaMalloc(&xh, size_t(n) * sizeof(__half)));
  TA_CHECK(cudaMalloc(&yh, size_t(n) * sizeof(__half)));
  TA_CHECK(cudaMalloc(&xf, size_t(n) * sizeof(float)));
  TA_CHECK(cudaMalloc(&yf, size_t(n) * sizeof(float)));
  init_ei<<<(n + 255) / 256, 256>>>(xh, xf, n);
  TA_CHECK(cudaGetLastError());
  launch<__half, 4>(xh, yh, n);
  launch<float, 2>(xf, yf, n);
  TA_CHECK(cudaDeviceSynchronize());
  float last = 0.0f;
  TA_CHECK(cudaMemcpy(&last, yf + (n - 1), sizeof(float), cudaMemcpyDeviceToHost));
  if (last != 2.0f * static_cast<float>((n - 1) % 100)) {
    std::fprintf(stderr, "explicit_inst: y[%d] = %g\n", n - 1, last);
    return 1;
  }
  TA_CHECK(cudaFree(xh));
  TA_CHECK(cudaFree(yh));
  TA_CHECK(cudaFree(xf));
  TA_CHECK(cudaFree(yf));
  testapp::mark_done();
  return 0;
}
