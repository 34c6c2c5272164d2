// zero_copy_gather: a gather from a lookup table in mapped pinned host memory
// (cudaHostAlloc(..., cudaHostAllocMapped)), indices in managed memory, output in device
// memory (issue 25). The host rewrites the table between launches, so every dispatch
// reads other host bytes: dispatch 1's table is the one its capture must hold.
//
// The kernel also takes a pointer to pageable malloc'd memory it never dereferences
// (`unused` is set only when n < 0): kerncap cannot capture pageable memory, and its
// manifest must name that parameter word (the closure check).
#include <cstdlib>
#include <cstring>

#include "common/testapp.hpp"
#include "gather_kernel.cuh"

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : (1 << 20);   // gathered elements
  const int t = argc > 2 ? std::atoi(argv[2]) : (1 << 16);   // table entries
  if (n <= 0 || t <= 0) {
    std::fprintf(stderr, "zero_copy_gather: bad sizes\n");
    return 2;
  }
  TA_CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
  float* table = nullptr;  // host pointer; with unified addressing also the device pointer
  TA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&table), size_t(t) * sizeof(float), cudaHostAllocMapped));
  float* dtable = nullptr;
  TA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dtable), table, 0));
  int* idx = nullptr;
  TA_CHECK(cudaMallocManaged(&idx, size_t(n) * sizeof(int)));
  for (int i = 0; i < n; ++i) idx[i] = int((uint64_t(i) * 2654435761u) % uint64_t(t));
  float* out = nullptr;
  TA_CHECK(cudaMalloc(&out, size_t(n) * sizeof(float)));
  float* pageable = static_cast<float*>(std::malloc(1 << 20));
  std::memset(pageable, 0, 1 << 20);

  testapp::Report report;
  report.add("table", table);
  report.add("dtable", dtable);
  report.add("idx", idx);
  report.add("out", out);
  report.add("pageable", pageable);
  report.add("n", static_cast<unsigned long long>(n));
  report.add("t", static_cast<unsigned long long>(t));
  report.write();

  const int block = 256, grid = (n + block - 1) / block;
  for (int it = 0; it < 4; ++it) {
    // The host rewrites the table between launches (the GPU is idle: synchronized below).
    for (int k = 0; k < t; ++k) table[k] = float((k * 7 + it * 13) % 1000) * 0.25f + float(it);
    TA_CHECK(cudaMemset(out, 0, size_t(n) * sizeof(float)));
    gather_table<<<grid, block>>>(dtable, idx, out, n, pageable);
    TA_CHECK(cudaGetLastError());
    TA_CHECK(cudaDeviceSynchronize());
  }
  std::free(pageable);
  TA_CHECK(cudaFree(out));
  TA_CHECK(cudaFree(idx));
  TA_CHECK(cudaFreeHost(table));
  testapp::mark_done();
  return 0;
}
