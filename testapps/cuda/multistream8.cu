// multistream8: 8 host threads keep launching on 4 non-blocking streams (2 threads per
// stream), each into its own buffer, while the main thread launches the target
// (ms8_target) 12 times on the legacy default stream (issue 7: launches from many
// threads during a capture). After the target's last dispatch the app stops the
// threads, joins them and checks that every word of each thread's buffer equals the
// number of launches that thread made, and the target's output: an app harmed by the
// capture (a lost, doubled or reordered launch) exits 1.
// The report is written before the first target launch (buffer addresses) and again
// at the end with each thread's launch count (lt0..lt7) and the total (launches).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/testapp.hpp"

constexpr int kThreads = 8;
constexpr int kStreams = 4;
constexpr int kTargets = 12;
constexpr long kWarmLaunches = 100;  // per thread, before the first target launch

__global__ void ms8_target(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 2.0f + 1.0f;
}

// Every launch adds 1 to every word: the final value counts the launches that ran.
__global__ void ms8_count(unsigned* buf, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) buf[i] += 1u;
}

__global__ void ms8_init(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = static_cast<float>(i % 513);
}

int main() {
  const int n = 1 << 22;
  float *in = nullptr, *out = nullptr;
  TA_CHECK(cudaMalloc(&in, n * sizeof(float)));
  TA_CHECK(cudaMalloc(&out, n * sizeof(float)));
  TA_CHECK(cudaMemset(out, 0, n * sizeof(float)));
  ms8_init<<<(n + 255) / 256, 256>>>(in, n);
  TA_CHECK(cudaGetLastError());

  // Distinct sizes (1 MiB + t * 4 KiB), so no buffer is mistaken for another's region.
  unsigned* buf[kThreads];
  int words[kThreads];
  for (int t = 0; t < kThreads; ++t) {
    words[t] = (1 << 18) + t * 1024;
    TA_CHECK(cudaMalloc(&buf[t], words[t] * sizeof(unsigned)));
    TA_CHECK(cudaMemset(buf[t], 0, words[t] * sizeof(unsigned)));
  }
  cudaStream_t streams[kStreams];
  for (auto& s : streams) TA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  TA_CHECK(cudaDeviceSynchronize());

  testapp::Report report;
  report.add("in", in);
  report.add("out", out);
  for (int t = 0; t < kThreads; ++t) report.add("buf" + std::to_string(t), buf[t]);
  report.add("n", static_cast<unsigned long long>(n));
  report.add("threads", static_cast<unsigned long long>(kThreads));
  report.add("streams", static_cast<unsigned long long>(kStreams));
  report.add("targets", static_cast<unsigned long long>(kTargets));
  report.write();

  std::atomic<bool> stop{false};
  std::vector<std::atomic<long>> launched(kThreads);
  for (auto& l : launched) l.store(0);
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      cudaStream_t s = streams[t / 2];
      long mine = 0;
      while (!stop.load()) {
        ms8_count<<<66, 256, 0, s>>>(buf[t], words[t]);
        TA_CHECK(cudaGetLastError());
        launched[t].store(++mine);
        // A shallow queue, as real apps keep (the other thread of this stream waits too).
        if (mine % 16 == 0) TA_CHECK(cudaStreamSynchronize(s));
      }
    });
  }

  // Start the target only once every thread is busy.
  for (int t = 0; t < kThreads; ++t)
    while (launched[t].load() < kWarmLaunches) std::this_thread::sleep_for(std::chrono::microseconds(100));
  for (int it = 0; it < kTargets; ++it) {
    // Clear the output first, so every dispatch really changes it.
    TA_CHECK(cudaMemsetAsync(out, 0, n * sizeof(float), 0));
    ms8_target<<<(n + 255) / 256, 256>>>(in, out, n);
    TA_CHECK(cudaGetLastError());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  TA_CHECK(cudaStreamSynchronize(0));
  stop.store(true);
  for (auto& w : workers) w.join();
  TA_CHECK(cudaDeviceSynchronize());

  long total = 0, fewest = -1;
  std::vector<unsigned> host;
  for (int t = 0; t < kThreads; ++t) {
    const long expected = launched[t].load();
    host.assign(words[t], 0u);
    TA_CHECK(cudaMemcpy(host.data(), buf[t], words[t] * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (int i = 0; i < words[t]; ++i) {
      if (host[i] != static_cast<unsigned>(expected)) {
        std::fprintf(stderr, "multistream8: thread %d buffer word %d = %u, but the thread launched %ld times\n", t,
                     i, host[i], expected);
        return 1;
      }
    }
    total += expected;
    fewest = fewest < 0 ? expected : std::min(fewest, expected);
    report.add("lt" + std::to_string(t), static_cast<unsigned long long>(expected));
  }
  std::vector<float> result(n);
  TA_CHECK(cudaMemcpy(result.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    const float want = static_cast<float>(i % 513) * 2.0f + 1.0f;
    if (result[i] != want) {
      std::fprintf(stderr, "multistream8: out[%d] = %g, expected %g\n", i, result[i], want);
      return 1;
    }
  }
  report.add("launches", static_cast<unsigned long long>(total));
  report.write();
  std::printf("multistream8: %d threads on %d streams, %ld launches (fewest per thread %ld), %d targets: ok\n",
              kThreads, kStreams, total, fewest, kTargets);

  for (auto& s : streams) TA_CHECK(cudaStreamDestroy(s));
  TA_CHECK(cudaFree(in));
  TA_CHECK(cudaFree(out));
  for (auto* b : buf) TA_CHECK(cudaFree(b));
  testapp::mark_done();
  return 0;
}
