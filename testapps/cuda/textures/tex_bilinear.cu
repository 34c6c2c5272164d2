// tex_bilinear: a bilinear (linear filtering) read of a 2-D float texture object over a
// cudaArray (issue 25): the kernel samples between texels, so the replay must recreate the
// array's contents and the texture's filter and address modes exactly. Launched 3 times;
// the output is cleared and the array rewritten between launches, so each dispatch reads
// other texels and writes other values. Reports out, w, h and the texture's handle.
#include <cstdlib>

#include "textures/textures.hpp"

__global__ void tex_bilinear(cudaTextureObject_t tex, float* out, int w, int h, float shift) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  // Normalized coordinates between texel centres: every fetch blends four texels.
  const float u = (x + 0.37f + shift) / w, v = (y + 0.61f) / h;
  out[y * w + x] = tex2D<float>(tex, u, v) * 2.0f + 0.125f;
}

int main(int argc, char** argv) {
  // argv[1], argv[2]: w, h (default 1024 x 1020; tests/gpu/make_small_fixtures.py asks for a small one)
  const int w = argc > 1 ? std::atoi(argv[1]) : 1024, h = argc > 2 ? std::atoi(argv[2]) : 1020;
  if (w <= 0 || h <= 0) {
    std::fprintf(stderr, "tex_bilinear: bad sizes\n");
    return 2;
  }
  textures::Decoys decoys(3);  // live while the target's texture is made: its handle is > 3
  cudaChannelFormatDesc fmt = cudaCreateChannelDesc<float>();
  cudaArray_t array = nullptr;
  TA_CHECK(cudaMallocArray(&array, &fmt, w, h));
  std::vector<float> host(size_t(w) * h);
  const cudaTextureObject_t tex = textures::bilinear_texture(array);
  decoys.release();  // the target's handle stays what it was; the replay's will be 1
  float* out = nullptr;
  TA_CHECK(cudaMalloc(&out, host.size() * sizeof(float)));

  testapp::Report report;
  report.add("out", out);
  report.add("w", static_cast<unsigned long long>(w));
  report.add("h", static_cast<unsigned long long>(h));
  report.add("handle", static_cast<unsigned long long>(tex));
  report.write();

  const dim3 block(32, 8), grid((w + 31) / 32, (h + 7) / 8);
  for (int it = 0; it < 3; ++it) {
    for (size_t i = 0; i < host.size(); ++i) host[i] = float((i * 2654435761u + it * 40503u) % 10007) / 1024.0f;
    TA_CHECK(cudaMemcpy2DToArray(array, 0, 0, host.data(), w * sizeof(float), w * sizeof(float), h,
                                 cudaMemcpyHostToDevice));
    TA_CHECK(cudaMemset(out, 0, host.size() * sizeof(float)));
    tex_bilinear<<<grid, block>>>(tex, out, w, h, 0.25f * it);
    TA_CHECK(cudaGetLastError());
  }
  TA_CHECK(cudaDeviceSynchronize());
  TA_CHECK(cudaDestroyTextureObject(tex));
  TA_CHECK(cudaFreeArray(array));
  TA_CHECK(cudaFree(out));
  testapp::mark_done();
  return 0;
}
