// tile2d [rows cols]: a 2-D output written in 64 x 64 tiles (tile2d_kernel.cuh), launched
// 3 times (1024 x 1024 by default; bench/heatmap.py uses 32768 x 32768, a 4 GiB output).
// The output starts zeroed, so dispatch 0's pre-state is all zeros and its post-state
// the result.
#include <cstdlib>

#include "common/testapp.hpp"
#include "tile2d/tile2d_kernel.cuh"

__global__ void init_colscale(float* s, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < cols) s[c] = 1.0f + static_cast<float>(c % 8) * 0.125f;
}

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 1024;
  const int cols = argc > 2 ? std::atoi(argv[2]) : 1024;
  if (rows <= 0 || cols <= 0 || rows % kTile || cols % kTile) {
    std::fprintf(stderr, "tile2d: rows and cols must be positive multiples of %d\n", kTile);
    return 2;
  }
  float *out = nullptr, *colscale = nullptr;
  const size_t n = static_cast<size_t>(rows) * cols;
  TA_CHECK(cudaMalloc(&out, n * sizeof(float)));
  TA_CHECK(cudaMalloc(&colscale, cols * sizeof(float)));
  TA_CHECK(cudaMemset(out, 0, n * sizeof(float)));
  init_colscale<<<(cols + 255) / 256, 256>>>(colscale, cols);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());

  testapp::Report report;
  report.add("out", out);
  report.add("colscale", colscale);
  report.add("rows", static_cast<unsigned long long>(rows));
  report.add("cols", static_cast<unsigned long long>(cols));
  report.write();

  const dim3 grid(cols / kTile, rows / kTile), block(kTile / kPerThread, kTile / kPerThread);
  for (int it = 0; it < 3; ++it) {
    tile2d<<<grid, block>>>(out, colscale, rows, cols);
    TA_CHECK(cudaGetLastError());
  }
  TA_CHECK(cudaDeviceSynchronize());
  TA_CHECK(cudaFree(out));
  TA_CHECK(cudaFree(colscale));
  testapp::mark_done();
  return 0;
}
