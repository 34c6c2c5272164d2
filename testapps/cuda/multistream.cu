// multistream: the target (ms_target) runs on the legacy default stream in the main
// thread while another thread keeps launching ms_writer on its own non-blocking stream
// into a buffer the target never touches (DESIGN fact 7). If the capture does not hold
// the other thread, that buffer differs between the pre- and post-state.
#include <atomic>
#include <chrono>
#include <thread>

#include "common/testapp.hpp"

__global__ void ms_target(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 2.0f + 1.0f;
}

// Every launch changes every word of `buf`, so any launch between the snapshots shows.
__global__ void ms_writer(unsigned* buf, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    buf[i] += 1u;
}

__global__ void init_in(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = static_cast<float>(i % 513);
}

int main() {
  const int n = 1 << 22;
  const int other_n = 3 << 20;  // 12 MiB, a size no other buffer has
  float *in = nullptr, *out = nullptr;
  unsigned* other = nullptr;
  TA_CHECK(cudaMalloc(&in, n * sizeof(float)));
  TA_CHECK(cudaMalloc(&out, n * sizeof(float)));
  TA_CHECK(cudaMalloc(&other, other_n * sizeof(unsigned)));
  TA_CHECK(cudaMemset(out, 0, n * sizeof(float)));
  TA_CHECK(cudaMemset(other, 0, other_n * sizeof(unsigned)));
  init_in<<<(n + 255) / 256, 256>>>(in, n);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());

  testapp::Report report;
  report.add("in", in);
  report.add("out", out);
  report.add("other", other);
  report.add("n", static_cast<unsigned long long>(n));
  report.write();

  std::atomic<bool> stop{false};
  std::atomic<long> launched{0};
  std::thread writer([&] {
    cudaStream_t s;
    TA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    while (!stop.load()) {
      ms_writer<<<132, 256, 0, s>>>(other, other_n);
      TA_CHECK(cudaGetLastError());
      // A shallow queue, as real apps keep: the writer is always a launch or two ahead.
      if (launched.fetch_add(1) % 16 == 15) TA_CHECK(cudaStreamSynchronize(s));
    }
    TA_CHECK(cudaStreamSynchronize(s));
    TA_CHECK(cudaStreamDestroy(s));
  });

  // Start the target only once the writer is busy.
  while (launched.load() < 200) std::this_thread::sleep_for(std::chrono::microseconds(100));
  for (int it = 0; it < 3; ++it) {
    // Clear the output first, so every dispatch really changes it (an idempotent
    // rewrite of the same values would leave pre == post).
    TA_CHECK(cudaMemsetAsync(out, 0, n * sizeof(float), 0));
    ms_target<<<(n + 255) / 256, 256>>>(in, out, n);
    TA_CHECK(cudaGetLastError());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  TA_CHECK(cudaStreamSynchronize(0));
  stop.store(true);
  writer.join();
  TA_CHECK(cudaDeviceSynchronize());
  TA_CHECK(cudaFree(in));
  TA_CHECK(cudaFree(out));
  TA_CHECK(cudaFree(other));
  testapp::mark_done();
  return 0;
}
