// surf_write: surf2Dwrite into a cudaArray through a surface object (issue 25). The
// kernel updates the array in place (reads each texel with surf2Dread, writes a new
// value): its only output is the array, so validate must compare the array's contents,
// and the pre-state must be restored before every replay. Launched 4 times on the same
// array; dispatch 2 is captured (its pre-state holds the first two launches' writes).
#include "textures/textures.hpp"

__global__ void surf_update(cudaSurfaceObject_t surf, int w, int h, float scale) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  float v;
  surf2Dread(&v, surf, x * int(sizeof(float)), y);
  surf2Dwrite(v * scale + float(x - y) * 0.0625f, surf, x * int(sizeof(float)), y);
}

int main() {
  const int w = 700, h = 300;
  textures::Decoys decoys(2);
  cudaChannelFormatDesc fmt = cudaCreateChannelDesc<float>();
  cudaArray_t array = nullptr;
  TA_CHECK(cudaMallocArray(&array, &fmt, w, h, cudaArraySurfaceLoadStore));
  std::vector<float> host(size_t(w) * h);
  for (size_t i = 0; i < host.size(); ++i) host[i] = float(i % 977) * 0.25f;
  TA_CHECK(cudaMemcpy2DToArray(array, 0, 0, host.data(), w * sizeof(float), w * sizeof(float), h,
                               cudaMemcpyHostToDevice));
  cudaResourceDesc res{};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = array;
  cudaSurfaceObject_t surf = 0;
  TA_CHECK(cudaCreateSurfaceObject(&surf, &res));
  decoys.release();

  testapp::Report report;
  report.add("w", static_cast<unsigned long long>(w));
  report.add("h", static_cast<unsigned long long>(h));
  report.add("handle", static_cast<unsigned long long>(surf));
  report.write();

  const dim3 block(32, 8), grid((w + 31) / 32, (h + 7) / 8);
  for (int it = 0; it < 4; ++it) {
    surf_update<<<grid, block>>>(surf, w, h, 0.5f + 0.125f * it);
    TA_CHECK(cudaGetLastError());
  }
  TA_CHECK(cudaDeviceSynchronize());
  TA_CHECK(cudaDestroySurfaceObject(surf));
  TA_CHECK(cudaFreeArray(array));
  testapp::mark_done();
  return 0;
}
