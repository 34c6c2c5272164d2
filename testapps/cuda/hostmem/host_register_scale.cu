// host_register_scale: a kernel updating a cudaHostRegister'ed malloc buffer in place,
// through the device pointer cudaHostGetDevicePointer gives for it (issue 25). The
// buffer starts in the middle of a page (malloc), as user code registers it.
#include <cstdlib>

#include "common/testapp.hpp"
#include "scale_kernel.cuh"

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : (1 << 20);
  if (n <= 0) {
    std::fprintf(stderr, "host_register_scale: bad n\n");
    return 2;
  }
  // 16 bytes past a malloc'd block's start: not page-aligned.
  char* block = static_cast<char*>(std::malloc(size_t(n) * sizeof(float) + 64));
  float* buf = reinterpret_cast<float*>(block + 16);
  for (int i = 0; i < n; ++i) buf[i] = float(i % 4096) * 0.125f;
  TA_CHECK(cudaHostRegister(buf, size_t(n) * sizeof(float), cudaHostRegisterMapped));
  float* dbuf = nullptr;
  TA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dbuf), buf, 0));

  testapp::Report report;
  report.add("buf", buf);
  report.add("dbuf", dbuf);
  report.add("n", static_cast<unsigned long long>(n));
  report.write();

  const int threads = 256, grid = (n + threads - 1) / threads;
  for (int it = 0; it < 3; ++it) {
    scale_host<<<grid, threads>>>(dbuf, 1.5f, 0.25f, n);
    TA_CHECK(cudaGetLastError());
    TA_CHECK(cudaDeviceSynchronize());
  }
  TA_CHECK(cudaHostUnregister(buf));
  std::free(block);
  testapp::mark_done();
  return 0;
}
