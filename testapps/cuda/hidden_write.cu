// hidden_write: the kernel writes through a pointer it decodes at run time (XOR with a
// key), so no value in its arguments or in device memory looks like the output's
// address. kerncap prune must refuse: the written region is outside the pointer closure.
#include "common/testapp.hpp"

constexpr unsigned long long kKey = 0xA5A5A5A5A5A5A5A5ull;  // far above any device address

__global__ void hidden_write(const float* in, unsigned long long masked, unsigned long long key, int n) {
  float* out = reinterpret_cast<float*>(masked ^ key);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = in[i] * 2.0f + 1.0f;
}

__global__ void fill(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = static_cast<float>(i % 977) * 0.5f;
}

int main() {
  const int n = 1 << 18;
  float* in = nullptr;
  float* out = nullptr;
  TA_CHECK(cudaMalloc(&in, n * sizeof(float)));
  TA_CHECK(cudaMalloc(&out, n * sizeof(float)));
  TA_CHECK(cudaMemset(out, 0, n * sizeof(float)));
  fill<<<(n + 255) / 256, 256>>>(in, n);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());
  testapp::Report report;
  report.add("in", in);
  report.add("out", out);
  report.write();

  const unsigned long long masked = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(out)) ^ kKey;
  hidden_write<<<256, 256>>>(in, masked, kKey, n);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());

  float v = 0.0f;
  TA_CHECK(cudaMemcpy(&v, out + 3, sizeof(float), cudaMemcpyDeviceToHost));
  if (v != 3 * 0.5f * 2.0f + 1.0f) {
    std::fprintf(stderr, "hidden_write: out[3] = %g, expected %g\n", v, 3 * 0.5f * 2.0f + 1.0f);
    return 1;
  }
  TA_CHECK(cudaFree(in));
  TA_CHECK(cudaFree(out));
  testapp::mark_done();
  return 0;
}
