// launch_heavy: many tiny kernel launches (argv[1], default 200000) to measure what the
// capture library costs per launch. Prints one line: launches and loop wall time; the
// report (KC_TESTAPP_REPORT) gets the loop time in ns.
#include <chrono>

#include "common/testapp.hpp"

__global__ void kc_tiny(int* counter) {
  if (threadIdx.x == 0) atomicAdd(counter, 1);
}

int main(int argc, char** argv) {
  const long launches = argc > 1 ? std::atol(argv[1]) : 200000;
  int* counter = nullptr;
  TA_CHECK(cudaMalloc(&counter, sizeof(int)));
  TA_CHECK(cudaMemset(counter, 0, sizeof(int)));
  TA_CHECK(cudaDeviceSynchronize());
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < launches; ++i) {
    kc_tiny<<<1, 32>>>(counter);
    if (i % 4096 == 0) TA_CHECK(cudaGetLastError());
  }
  TA_CHECK(cudaDeviceSynchronize());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int count = 0;
  TA_CHECK(cudaMemcpy(&count, counter, sizeof(int), cudaMemcpyDeviceToHost));
  if (count != static_cast<int>(launches)) {
    std::fprintf(stderr, "launch_heavy: counter %d, expected %ld\n", count, launches);
    return 1;
  }
  std::printf("launch_heavy: %ld launches in %.3f s\n", launches, seconds);
  // For bench/overhead.py: the loop time, apart from process start and CUDA setup.
  testapp::Report report;
  report.add("launches", static_cast<unsigned long long>(launches));
  report.add("loop_ns", static_cast<unsigned long long>(seconds * 1e9));
  report.write();
  TA_CHECK(cudaFree(counter));
  testapp::mark_done();
  return 0;
}
