// Kernels for array_units_test.cpp: texture and surface instructions found in SASS.
#include <cuda_runtime.h>

__global__ void texread(cudaTextureObject_t t, float* out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.25f);
}
__global__ void tabread(const cudaTextureObject_t* tab, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<float>(tab[i & 3], i);
}
__global__ void surfw(cudaSurfaceObject_t s, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) surf2Dwrite(float(x * y), s, x * 4, y);
}
__global__ void lod(cudaTextureObject_t t, float4* out, float u) {
  float4 g = tex2Dgather<float4>(t, u, u, 1);
  g.x += tex2DLod<float>(t, u, u, u);
  out[threadIdx.x] = g;
}
__global__ void plain(float* out, unsigned long long n) {
  unsigned i = threadIdx.x;
  if (i < n) out[i] = 1.0f;
}
