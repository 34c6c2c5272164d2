// template_multi: stencil<1> (tu_a.cu) smooths `in` into `mid`, stencil<3> (tu_b.cu)
// smooths `mid` into `out`; three rounds, so each instance has dispatches 0..2.
#include "../common/testapp.hpp"
#include "stencil.cuh"

__global__ void init_ramp(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = static_cast<float>(i % 4096) * 0.125f;
}

int main() {
  const int n = 1 << 22;
  float *in = nullptr, *mid = nullptr, *out = nullptr;
  TA_CHECK(cudaMalloc(&in, n * sizeof(float)));
  TA_CHECK(cudaMalloc(&mid, n * sizeof(float)));
  TA_CHECK(cudaMalloc(&out, n * sizeof(float)));
  TA_CHECK(cudaMemset(mid, 0, n * sizeof(float)));
  TA_CHECK(cudaMemset(out, 0, n * sizeof(float)));
  init_ramp<<<(n + 255) / 256, 256>>>(in, n);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());

  testapp::Report report;
  report.add("in", in);
  report.add("mid", mid);
  report.add("out", out);
  report.add("n", static_cast<unsigned long long>(n));
  report.write();

  for (int round = 0; round < 3; ++round) {
    // Cleared each round so that every dispatch changes `out` (see multistream.cu).
    TA_CHECK(cudaMemset(out, 0, n * sizeof(float)));
    TA_CHECK(run_stencil_k1(in, mid, n));
    TA_CHECK(run_stencil_k3(mid, out, n));
  }
  TA_CHECK(cudaDeviceSynchronize());
  TA_CHECK(cudaFree(in));
  TA_CHECK(cudaFree(mid));
  TA_CHECK(cudaFree(out));
  testapp::mark_done();
  return 0;
}
