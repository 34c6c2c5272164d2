// ptsz_stream: built with `--default-stream per-thread`, so every launch, copy and
// synchronize on the default stream goes through cudart's per-thread entry points (the
// driver's _ptsz ones). Two threads each launch ptsz_scale 4 times on their own
// per-thread default stream, into their own buffers; the target is thread 0's third
// launch (dispatch 2 of its buffers, scale 3). Each thread checks its buffer at the end.
#include <thread>

#include "common/testapp.hpp"

__global__ void ptsz_scale(const float* in, float* out, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * s + out[i];
}

__global__ void ptsz_init(float* in, float* out, int n, float seed) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    in[i] = static_cast<float>(i % 255) / 128.0f + seed;
    out[i] = 0.0f;
  }
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : (1 << 20);
  if (n <= 0) {
    std::fprintf(stderr, "ptsz_stream: bad n %s\n", argv[1]);
    return 2;
  }
  float* in[2] = {nullptr, nullptr};
  float* out[2] = {nullptr, nullptr};
  for (int t = 0; t < 2; ++t) {
    TA_CHECK(cudaMalloc(&in[t], size_t(n) * sizeof(float)));
    TA_CHECK(cudaMalloc(&out[t], size_t(n) * sizeof(float)));
  }
  testapp::Report report;
  report.add("in0", in[0]);
  report.add("out0", out[0]);
  report.add("in1", in[1]);
  report.add("out1", out[1]);
  report.add("n", static_cast<unsigned long long>(n));
  report.write();

  const int block = 256, grid = (n + block - 1) / block;
  int failed[2] = {0, 0};
  auto work = [&](int t) {
    // Thread 0 launches first; thread 1 waits for it so dispatch numbers are fixed.
    ptsz_init<<<grid, block>>>(in[t], out[t], n, static_cast<float>(t));
    TA_CHECK(cudaGetLastError());
    for (int k = 1; k <= 4; ++k) {
      ptsz_scale<<<grid, block>>>(in[t], out[t], static_cast<float>(k), n);
      TA_CHECK(cudaGetLastError());
    }
    TA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    float last = 0.0f;
    const size_t at = size_t(n - 1);
    TA_CHECK(cudaMemcpy(&last, out[t] + at, sizeof(float), cudaMemcpyDeviceToHost));
    const float want = (static_cast<float>(at % 255) / 128.0f + static_cast<float>(t)) * 10.0f;  // 1+2+3+4
    if (last != want) {
      std::fprintf(stderr, "ptsz_stream: thread %d out[%zu] = %.9g, expected %.9g\n", t, at, last, want);
      failed[t] = 1;
    }
  };
  std::thread first(work, 0);
  first.join();
  std::thread second(work, 1);
  second.join();
  for (int t = 0; t < 2; ++t) {
    TA_CHECK(cudaFree(in[t]));
    TA_CHECK(cudaFree(out[t]));
  }
  if (failed[0] || failed[1]) return 1;
  testapp::mark_done();
  return 0;
}
