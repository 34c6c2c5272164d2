// tex_table: the kernel takes a table of texture handles in device memory (issue 25, bad
// input): kerncap replaces handles only in parameters, so the capture must name the table
// as not restorable. Four 1-D float textures; element i is read from texture i % 4.
#include "textures/textures.hpp"

__global__ void tex_table(const cudaTextureObject_t* table, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = tex1Dfetch<float>(table[i & 3], i);
}

int main() {
  const int n = 2048;
  float* data[4] = {};
  cudaTextureObject_t host_table[4] = {};
  std::vector<float> host(n);
  for (int t = 0; t < 4; ++t) {
    TA_CHECK(cudaMalloc(&data[t], n * sizeof(float)));
    for (int i = 0; i < n; ++i) host[i] = float(t * 1000 + i);
    TA_CHECK(cudaMemcpy(data[t], host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaResourceDesc res{};
    res.resType = cudaResourceTypeLinear;
    res.res.linear.devPtr = data[t];
    res.res.linear.desc = cudaCreateChannelDesc<float>();
    res.res.linear.sizeInBytes = n * sizeof(float);
    cudaTextureDesc td{};
    td.readMode = cudaReadModeElementType;
    TA_CHECK(cudaCreateTextureObject(&host_table[t], &res, &td, nullptr));
  }
  cudaTextureObject_t* table = nullptr;
  TA_CHECK(cudaMalloc(&table, sizeof host_table));
  TA_CHECK(cudaMemcpy(table, host_table, sizeof host_table, cudaMemcpyHostToDevice));
  float* out = nullptr;
  TA_CHECK(cudaMalloc(&out, n * sizeof(float)));
  TA_CHECK(cudaMemset(out, 0, n * sizeof(float)));

  testapp::Report report;
  report.add("table", table);
  report.add("out", out);
  for (int t = 0; t < 4; ++t) report.add("handle" + std::to_string(t), static_cast<unsigned long long>(host_table[t]));
  report.write();

  tex_table<<<(n + 255) / 256, 256>>>(table, out, n);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());
  for (int t = 0; t < 4; ++t) {
    TA_CHECK(cudaDestroyTextureObject(host_table[t]));
    TA_CHECK(cudaFree(data[t]));
  }
  TA_CHECK(cudaFree(table));
  TA_CHECK(cudaFree(out));
  testapp::mark_done();
  return 0;
}
