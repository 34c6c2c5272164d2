// seq_tex_host: a sequence whose kernels read a texture over a cudaArray and a lookup
// table in mapped pinned host memory, and write mapped host memory (issue 43: a sequence
// carries what one dispatch carries; tests/gpu/test_sequence_sections_gpu.py). Inside
// the NVTX range "layer", run twice (instances 0 and 1); before each instance the host
// rewrites the array and the table, so instance 1's pre-state is not instance 0's:
//
//   st_sample  a[i] = tex2D(tex, u, v) * 2 + 0.125     launch 0 (bilinear: four texels a read)
//   st_gather  b[i] = a[i] + table[(i * 7) % t]        launch 1 (table: mapped host memory)
//   st_reduce  sums[k] = b[256 k] + ... + b[256 k + 255]  launch 2 (sums: mapped host memory)
//
// Decoy texture objects make the app's handle differ from the replay's. Reports a, b,
// table, sums, w, h, t and the texture's handle.
#include <nvtx3/nvToolsExt.h>

#include <cstdlib>
#include <vector>

#include "textures/textures.hpp"

__global__ void st_sample(cudaTextureObject_t tex, float* a, int w, int h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  a[y * w + x] = tex2D<float>(tex, (x + 0.37f) / w, (y + 0.61f) / h) * 2.0f + 0.125f;
}

__global__ void st_gather(const float* a, const float* table, int t, float* b, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = a[i] + table[(i * 7) % t];
}

// One thread a chunk, in order: the same bytes on every run (no atomics).
__global__ void st_reduce(const float* b, int n, float* sums) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k * 256 >= n) return;
  float s = 0.0f;
  for (int j = 0; j < 256 && k * 256 + j < n; ++j) s += b[k * 256 + j];
  sums[k] = s;
}

int main() {
  const int w = 256, h = 128, n = w * h, t = 4096, chunks = n / 256;
  TA_CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
  textures::Decoys decoys(3);
  cudaChannelFormatDesc fmt = cudaCreateChannelDesc<float>();
  cudaArray_t array = nullptr;
  TA_CHECK(cudaMallocArray(&array, &fmt, w, h));
  const cudaTextureObject_t tex = textures::bilinear_texture(array);
  decoys.release();
  float *a = nullptr, *b = nullptr, *table = nullptr, *sums = nullptr, *dtable = nullptr, *dsums = nullptr;
  TA_CHECK(cudaMalloc(&a, n * sizeof(float)));
  TA_CHECK(cudaMalloc(&b, n * sizeof(float)));
  TA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&table), t * sizeof(float), cudaHostAllocMapped));
  TA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&sums), chunks * sizeof(float), cudaHostAllocMapped));
  TA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dtable), table, 0));
  TA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dsums), sums, 0));

  testapp::Report report;
  report.add("a", a);
  report.add("b", b);
  report.add("table", table);
  report.add("sums", sums);
  report.add("w", static_cast<unsigned long long>(w));
  report.add("h", static_cast<unsigned long long>(h));
  report.add("t", static_cast<unsigned long long>(t));
  report.add("handle", static_cast<unsigned long long>(tex));
  report.write();

  std::vector<float> texels(n);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < n; ++i) texels[i] = float((i * 2654435761u + round * 40503u) % 10007) / 1024.0f;
    TA_CHECK(cudaMemcpy2DToArray(array, 0, 0, texels.data(), w * sizeof(float), w * sizeof(float), h,
                                 cudaMemcpyHostToDevice));
    for (int k = 0; k < t; ++k) table[k] = float((k * 13 + round * 5) % 1000) * 0.25f + float(round);
    for (int k = 0; k < chunks; ++k) sums[k] = -1.0f;
    TA_CHECK(cudaDeviceSynchronize());
    nvtxRangePushA("layer");
    st_sample<<<dim3(w / 32, h / 8), dim3(32, 8)>>>(tex, a, w, h);
    st_gather<<<n / 256, 256>>>(a, dtable, t, b, n);
    st_reduce<<<(chunks + 127) / 128, 128>>>(b, n, dsums);
    TA_CHECK(cudaGetLastError());
    nvtxRangePop();
    TA_CHECK(cudaDeviceSynchronize());
  }
  TA_CHECK(cudaDestroyTextureObject(tex));
  TA_CHECK(cudaFreeArray(array));
  TA_CHECK(cudaFree(a));
  TA_CHECK(cudaFree(b));
  TA_CHECK(cudaFreeHost(table));
  TA_CHECK(cudaFreeHost(sums));
  testapp::mark_done();
  return 0;
}
