// tex_pitched: a texture over pitched linear device memory (cudaMallocPitch, resource
// type Pitch2D, issue 25). The texture's memory is a captured region, restored at its
// address; the texture object must be recreated there and its handle put in the launch.
// Point sampling with unnormalized coordinates and border addressing (reads past the
// edge give 0). Launched 3 times, the image rewritten in between.
#include "textures/textures.hpp"

__global__ void tex_pitched(cudaTextureObject_t tex, float* out, int w, int h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x >= w || y >= h) return;
  out[y * w + x] = tex2D<float>(tex, x + 1.5f, y + 0.5f) - tex2D<float>(tex, x - 0.5f, y + 0.5f);
}

int main() {
  const int w = 500, h = 64;  // a row of 2000 bytes: the pitch is larger
  textures::Decoys decoys(2);
  float* image = nullptr;
  size_t pitch = 0;
  TA_CHECK(cudaMallocPitch(reinterpret_cast<void**>(&image), &pitch, w * sizeof(float), h));
  cudaResourceDesc res{};
  res.resType = cudaResourceTypePitch2D;
  res.res.pitch2D.devPtr = image;
  res.res.pitch2D.desc = cudaCreateChannelDesc<float>();
  res.res.pitch2D.width = w;
  res.res.pitch2D.height = h;
  res.res.pitch2D.pitchInBytes = pitch;
  cudaTextureDesc td{};
  td.addressMode[0] = cudaAddressModeBorder;
  td.addressMode[1] = cudaAddressModeBorder;
  td.filterMode = cudaFilterModePoint;
  td.readMode = cudaReadModeElementType;
  cudaTextureObject_t tex = 0;
  TA_CHECK(cudaCreateTextureObject(&tex, &res, &td, nullptr));
  decoys.release();
  float* out = nullptr;
  TA_CHECK(cudaMalloc(&out, size_t(w) * h * sizeof(float)));

  testapp::Report report;
  report.add("image", image);
  report.add("out", out);
  report.add("pitch", static_cast<unsigned long long>(pitch));
  report.add("w", static_cast<unsigned long long>(w));
  report.add("h", static_cast<unsigned long long>(h));
  report.add("handle", static_cast<unsigned long long>(tex));
  report.write();

  std::vector<float> host(size_t(w) * h);
  for (int it = 0; it < 3; ++it) {
    for (size_t i = 0; i < host.size(); ++i) host[i] = float((i * 7 + it * 13) % 101) * 0.5f;
    TA_CHECK(cudaMemcpy2D(image, pitch, host.data(), w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
    TA_CHECK(cudaMemset(out, 0, host.size() * sizeof(float)));
    tex_pitched<<<dim3((w + 127) / 128, h), 128>>>(tex, out, w, h);
    TA_CHECK(cudaGetLastError());
  }
  TA_CHECK(cudaDeviceSynchronize());
  TA_CHECK(cudaDestroyTextureObject(tex));
  TA_CHECK(cudaFree(image));
  TA_CHECK(cudaFree(out));
  testapp::mark_done();
  return 0;
}
