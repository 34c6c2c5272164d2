// Shared by the texture/surface test apps (issue 25): texture objects the app holds
// besides the one the target reads, so that the target's handle value differs from the
// one the replay process hands out (handles are small integers per process and a
// destroyed one's value comes back: DESIGN fact 14). Without kerncap patching the
// parameter, the replayed kernel would read another object or none.
#pragma once
#include <cuda_runtime.h>

#include "common/testapp.hpp"

namespace textures {

// `count` live 4x4 float textures over one small array; destroy them with release().
struct Decoys {
  cudaArray_t array = nullptr;
  cudaTextureObject_t objects[8] = {};
  int count = 0;

  explicit Decoys(int n) : count(n) {
    cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
    TA_CHECK(cudaMallocArray(&array, &f, 4, 4));
    cudaResourceDesc res{};
    res.resType = cudaResourceTypeArray;
    res.res.array.array = array;
    cudaTextureDesc tex{};
    tex.readMode = cudaReadModeElementType;
    for (int i = 0; i < count; ++i) TA_CHECK(cudaCreateTextureObject(&objects[i], &res, &tex, nullptr));
  }
  void release() {
    for (int i = 0; i < count; ++i) TA_CHECK(cudaDestroyTextureObject(objects[i]));
    TA_CHECK(cudaFreeArray(array));
    count = 0;
  }
};

// A bilinear (linear filtering, normalized coordinates) float texture over `array`,
// clamped in x and mirrored in y: every fetch between texel centres blends four texels,
// so a replay must recreate the array's contents and the sampler exactly.
inline cudaTextureObject_t bilinear_texture(cudaArray_t array) {
  cudaResourceDesc res{};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = array;
  cudaTextureDesc td{};
  td.addressMode[0] = cudaAddressModeClamp;
  td.addressMode[1] = cudaAddressModeMirror;
  td.filterMode = cudaFilterModeLinear;
  td.readMode = cudaReadModeElementType;
  td.normalizedCoords = 1;
  cudaTextureObject_t tex = 0;
  TA_CHECK(cudaCreateTextureObject(&tex, &res, &td, nullptr));
  return tex;
}

}  // namespace textures
