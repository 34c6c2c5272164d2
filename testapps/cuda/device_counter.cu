// device_counter: the kernel's result is a __device__ global, not a buffer a parameter
// points at; the host zeroes it with cudaMemcpyToSymbol and reads it with
// cudaMemcpyFromSymbol after each of 4 launches (issue 46: `kerncap apply` must copy a
// global the kernel writes back into the app's module, and --check compare it).
#include "common/testapp.hpp"

__device__ unsigned long long nonzero_count;

__global__ void count_nonzero(const float* x, int n) {
  unsigned long long mine = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    mine += x[i] != 0.0f;
  if (mine) atomicAdd(&nonzero_count, mine);
}

// Step s: every (s + 2)-th element zero.
__global__ void fill(float* x, int n, int step) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = i % (step + 2) == 0 ? 0.0f : 1.0f + static_cast<float>(i % 7);
}

int main() {
  const int n = 1 << 20;
  float* x = nullptr;
  TA_CHECK(cudaMalloc(&x, n * sizeof(float)));
  testapp::Report report;
  report.add("x", x);
  report.add("n", static_cast<unsigned long long>(n));
  report.write();
  for (int step = 0; step < 4; ++step) {
    fill<<<(n + 255) / 256, 256>>>(x, n, step);
    const unsigned long long zero = 0;
    TA_CHECK(cudaMemcpyToSymbol(nonzero_count, &zero, sizeof(zero)));
    count_nonzero<<<128, 256>>>(x, n);
    TA_CHECK(cudaGetLastError());
    unsigned long long got = 0;
    TA_CHECK(cudaMemcpyFromSymbol(&got, nonzero_count, sizeof(got)));
    const unsigned long long want = n - (n + step + 1) / (step + 2);
    std::printf("step %d: %llu nonzero (expected %llu)\n", step, got, want);
  }
  TA_CHECK(cudaFree(x));
  testapp::mark_done();
  return 0;
}
