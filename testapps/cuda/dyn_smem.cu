// dyn_smem: a kernel using 100 KiB of dynamic shared memory, above the 48 KiB default,
// which needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize). Replay must carry both.
#include "common/testapp.hpp"

constexpr int kTile = 25600;  // floats: 100 KiB per block
constexpr int kSmemBytes = kTile * sizeof(float);

// Each block stages one tile in shared memory and writes it back reversed.
__global__ void reverse_tiles(const float* in, float* out, int n) {
  extern __shared__ float tile[];
  const int base = blockIdx.x * kTile;
  for (int i = threadIdx.x; i < kTile; i += blockDim.x)
    tile[i] = base + i < n ? in[base + i] : 0.0f;
  __syncthreads();
  for (int i = threadIdx.x; i < kTile; i += blockDim.x)
    if (base + i < n) out[base + i] = tile[kTile - 1 - i];
}

__global__ void init_seq(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = static_cast<float>(i);
}

int main() {
  const int n = kTile * 256;
  float *in = nullptr, *out = nullptr;
  TA_CHECK(cudaMalloc(&in, n * sizeof(float)));
  TA_CHECK(cudaMalloc(&out, n * sizeof(float)));
  TA_CHECK(cudaMemset(out, 0, n * sizeof(float)));
  init_seq<<<(n + 255) / 256, 256>>>(in, n);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaFuncSetAttribute(reverse_tiles, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  TA_CHECK(cudaDeviceSynchronize());

  testapp::Report report;
  report.add("in", in);
  report.add("out", out);
  report.add("n", static_cast<unsigned long long>(n));
  report.add("smem", static_cast<unsigned long long>(kSmemBytes));
  report.write();

  reverse_tiles<<<(n + kTile - 1) / kTile, 512, kSmemBytes>>>(in, out, n);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());

  float last = 0.0f;
  TA_CHECK(cudaMemcpy(&last, out + kTile - 1, sizeof(float), cudaMemcpyDeviceToHost));
  if (last != 0.0f) {
    std::fprintf(stderr, "dyn_smem: out[%d] = %g, expected 0\n", kTile - 1, last);
    return 1;
  }
  TA_CHECK(cudaFree(in));
  TA_CHECK(cudaFree(out));
  testapp::mark_done();
  return 0;
}
