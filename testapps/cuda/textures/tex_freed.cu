// tex_freed: a texture object whose cudaArray was freed before the dispatch (issue 25,
// bad input). Reading it would read freed memory, so the kernel samples only when
// `sample` is set, and the app passes 0: the dispatch is well defined, yet its texture
// parameter names an object the replay cannot recreate, which the capture must say.
#include "textures/textures.hpp"

__global__ void tex_freed(cudaTextureObject_t tex, float* out, int n, int sample) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = float(i) * 0.5f + (sample ? tex1D<float>(tex, i + 0.5f) : 0.0f);
}

int main() {
  const int n = 4096;
  cudaChannelFormatDesc fmt = cudaCreateChannelDesc<float>();
  cudaArray_t array = nullptr;
  TA_CHECK(cudaMallocArray(&array, &fmt, n));
  cudaResourceDesc res{};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = array;
  cudaTextureDesc td{};
  td.readMode = cudaReadModeElementType;
  cudaTextureObject_t tex = 0;
  TA_CHECK(cudaCreateTextureObject(&tex, &res, &td, nullptr));
  TA_CHECK(cudaFreeArray(array));  // the texture object outlives its array
  float* out = nullptr;
  TA_CHECK(cudaMalloc(&out, n * sizeof(float)));
  TA_CHECK(cudaMemset(out, 0, n * sizeof(float)));

  testapp::Report report;
  report.add("out", out);
  report.add("handle", static_cast<unsigned long long>(tex));
  report.write();

  tex_freed<<<(n + 255) / 256, 256>>>(tex, out, n, 0);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());
  TA_CHECK(cudaDestroyTextureObject(tex));
  TA_CHECK(cudaFree(out));
  testapp::mark_done();
  return 0;
}
