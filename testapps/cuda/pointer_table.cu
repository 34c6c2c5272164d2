// pointer_table: the kernel reaches its buffers only through device-resident pointer
// tables and scales by a __constant__ set with cudaMemcpyToSymbol (DESIGN facts 4, 7).
// A capture must hold the tables' regions, the buffers they point to and `scale`.
#include "common/testapp.hpp"

constexpr int kBuffers = 4;

__constant__ float scale;

__global__ void scale_table(const float* const* in, float* const* out, int n) {
  const int b = blockIdx.y;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[b][i] = in[b][i] * scale;
}

__global__ void fill(float* p, int n, float base) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = base + static_cast<float>(i % 1000) * 0.25f;
}

int main() {
  const int n = 1 << 20;
  float* in[kBuffers];
  float* out[kBuffers];
  testapp::Report report;
  for (int b = 0; b < kBuffers; ++b) {
    TA_CHECK(cudaMalloc(&in[b], n * sizeof(float)));
    TA_CHECK(cudaMalloc(&out[b], n * sizeof(float)));
    TA_CHECK(cudaMemset(out[b], 0, n * sizeof(float)));
    fill<<<(n + 255) / 256, 256>>>(in[b], n, static_cast<float>(b + 1));
    TA_CHECK(cudaGetLastError());
    report.add("in" + std::to_string(b), in[b]);
    report.add("out" + std::to_string(b), out[b]);
  }
  float** in_table = nullptr;
  float** out_table = nullptr;
  TA_CHECK(cudaMalloc(&in_table, sizeof(in)));
  TA_CHECK(cudaMalloc(&out_table, sizeof(out)));
  TA_CHECK(cudaMemcpy(in_table, in, sizeof(in), cudaMemcpyHostToDevice));
  TA_CHECK(cudaMemcpy(out_table, out, sizeof(out), cudaMemcpyHostToDevice));
  report.add("in_table", in_table);
  report.add("out_table", out_table);
  report.add("n", static_cast<unsigned long long>(n));

  const float s = 1.5f;
  TA_CHECK(cudaMemcpyToSymbol(scale, &s, sizeof(s)));
  TA_CHECK(cudaDeviceSynchronize());
  report.write();

  scale_table<<<dim3(256, kBuffers), 256>>>(in_table, out_table, n);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());

  // Check one value so a broken capture/restore of `scale` in the app itself shows.
  float first = 0.0f;
  TA_CHECK(cudaMemcpy(&first, out[1], sizeof(float), cudaMemcpyDeviceToHost));
  if (first != 2.0f * s) {
    std::fprintf(stderr, "pointer_table: out1[0] = %g, expected %g\n", first, 2.0f * s);
    return 1;
  }
  for (int b = 0; b < kBuffers; ++b) {
    TA_CHECK(cudaFree(in[b]));
    TA_CHECK(cudaFree(out[b]));
  }
  TA_CHECK(cudaFree(in_table));
  TA_CHECK(cudaFree(out_table));
  testapp::mark_done();
  return 0;
}
