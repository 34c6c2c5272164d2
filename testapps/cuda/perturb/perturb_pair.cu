// perturb_pair: targets for perturbed validation (docs/replay.md, issue 14).
//
// pair_fma runs three times (dispatches 0, 1, 2), each on a fresh a == b: two buffers
// that happen to hold the same values, a property a wrong variant can rely on (it reads
// a twice; variants/pair_fma_cheat.cu). Then gather_unsigned runs once with positions
// in [0, table) stored as floats.
// Sizes: argv[1] rows (1024), argv[2] cols (4096).
#include "common/testapp.hpp"
#include "perturb/perturb_kernels.cuh"

__global__ void fill_pair(float* a, float* b, long long n, int round) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    // Small dyadic values in [0, 8): products and sums are exact.
    const float v = static_cast<float>((i * 37 + round * 11) % 1024) / 128.0f;
    a[i] = v;
    b[i] = v;
  }
}

__global__ void fill_gather(float* pos, float* table, int n, int table_n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) pos[i] = static_cast<float>((i * 7) % table_n);
  if (i < table_n) table[i] = static_cast<float>(i) * 0.25f;
}

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 1024;
  const int cols = argc > 2 ? std::atoi(argv[2]) : 4096;
  if (rows <= 0 || cols <= 0) {
    std::fprintf(stderr, "perturb_pair: bad size\n");
    return 2;
  }
  const long long n = static_cast<long long>(rows) * cols;
  float *a = nullptr, *b = nullptr, *out = nullptr;
  TA_CHECK(cudaMalloc(&a, n * sizeof(float)));
  TA_CHECK(cudaMalloc(&b, n * sizeof(float)));
  TA_CHECK(cudaMalloc(&out, n * sizeof(float)));
  const int gn = 1 << 16, table_n = 1024;
  float *pos = nullptr, *table = nullptr, *gathered = nullptr;
  TA_CHECK(cudaMalloc(&pos, gn * sizeof(float)));
  TA_CHECK(cudaMalloc(&table, table_n * sizeof(float)));
  TA_CHECK(cudaMalloc(&gathered, gn * sizeof(float)));

  testapp::Report report;
  report.add("a", a);
  report.add("b", b);
  report.add("out", out);
  report.add("pos", pos);
  report.add("table", table);
  report.add("gathered", gathered);
  report.add("n", static_cast<unsigned long long>(n));
  report.write();

  const int block = 256;
  const unsigned grid = static_cast<unsigned>((n + block - 1) / block);
  for (int round = 0; round < 3; ++round) {
    fill_pair<<<grid, block>>>(a, b, n, round);
    TA_CHECK(cudaGetLastError());
    pair_fma<<<grid, block>>>(a, b, out, rows, cols);
    TA_CHECK(cudaGetLastError());
  }
  fill_gather<<<(gn + block - 1) / block, block>>>(pos, table, gn, table_n);
  TA_CHECK(cudaGetLastError());
  gather_unsigned<<<(gn + block - 1) / block, block>>>(pos, table, gathered, gn);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());
  for (float* p : {a, b, out, pos, table, gathered}) TA_CHECK(cudaFree(p));
  testapp::mark_done();
  return 0;
}
