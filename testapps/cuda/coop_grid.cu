// coop_grid: a cooperative launch with a grid-wide barrier (cudaLaunchCooperativeKernel,
// cooperative_groups::this_grid().sync()). coop_normalize sums its input per block into
// partial[], waits for the whole grid, then every thread adds the partial sums (in the
// same order, so the total is identical everywhere and run to run) and writes
// out[i] = in[i] * scale / total + scale; block 0 also writes the total. The grid is as large as the
// device holds resident at once (a cooperative launch may not exceed it). Launched 3
// times with a different input scale each time (argument `scale`).
#include <cooperative_groups.h>

#include "common/testapp.hpp"

namespace cg = cooperative_groups;

constexpr int kBlock = 256;

__global__ void coop_normalize(const float* in, float* partial, float* out, float* total, float scale, int n) {
  cg::grid_group grid = cg::this_grid();
  __shared__ float sums[kBlock];
  float s = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) s += in[i] * scale;
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int half = kBlock / 2; half > 0; half /= 2) {  // fixed tree: the same sum every run
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
  grid.sync();  // every block's partial sum is written before anyone reads them
  float t = 0.0f;
  for (unsigned b = 0; b < gridDim.x; ++b) t += partial[b];
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i] * scale / t + scale;
  if (blockIdx.x == 0 && threadIdx.x == 0) *total = t;
}

__global__ void coop_init(float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) in[i] = static_cast<float>(1 + i % 61) / 64.0f;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : (1 << 22);
  if (n <= 0) {
    std::fprintf(stderr, "coop_grid: bad n %s\n", argv[1]);
    return 2;
  }
  int device = 0, coop = 0, sms = 0, per_sm = 0;
  TA_CHECK(cudaGetDevice(&device));
  TA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device));
  if (!coop) {
    std::fprintf(stderr, "coop_grid: device %d does not support cooperative launches\n", device);
    return 1;
  }
  TA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  TA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, coop_normalize, kBlock, 0));
  const int grid = sms * per_sm;
  if (grid < 1) {
    std::fprintf(stderr, "coop_grid: no block of coop_normalize fits an SM (%d SMs, %d per SM)\n", sms, per_sm);
    return 1;
  }
  float *in = nullptr, *partial = nullptr, *out = nullptr, *total = nullptr;
  TA_CHECK(cudaMalloc(&in, size_t(n) * sizeof(float)));
  TA_CHECK(cudaMalloc(&partial, size_t(grid) * sizeof(float)));
  TA_CHECK(cudaMalloc(&out, size_t(n) * sizeof(float)));
  TA_CHECK(cudaMalloc(&total, sizeof(float)));
  coop_init<<<(n + kBlock - 1) / kBlock, kBlock>>>(in, n);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());

  testapp::Report report;
  report.add("in", in);
  report.add("partial", partial);
  report.add("out", out);
  report.add("total", total);
  report.add("n", static_cast<unsigned long long>(n));
  report.add("grid", static_cast<unsigned long long>(grid));
  report.write();

  for (int it = 0; it < 3; ++it) {
    float scale = 1.0f + it;
    void* args[] = {&in, &partial, &out, &total, &scale, const_cast<int*>(&n)};
    TA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(coop_normalize), dim3(grid), dim3(kBlock), args, 0,
                                         nullptr));
    TA_CHECK(cudaGetLastError());
  }
  TA_CHECK(cudaDeviceSynchronize());
  float host_total = 0.0f;
  TA_CHECK(cudaMemcpy(&host_total, total, sizeof(float), cudaMemcpyDeviceToHost));
  if (!(host_total > 0.0f)) {
    std::fprintf(stderr, "coop_grid: total %g, expected > 0\n", host_total);
    return 1;
  }
  TA_CHECK(cudaFree(in));
  TA_CHECK(cudaFree(partial));
  TA_CHECK(cudaFree(out));
  TA_CHECK(cudaFree(total));
  testapp::mark_done();
  return 0;
}
