// Variant: same bytes as the original through another code path: float4 loads and
// stores, four elements per thread. Replay keeps the captured grid (one thread per
// element), so threads whose index is a multiple of 4 do the work and the rest return.
// cudaMalloc pointers are 256-byte aligned, so the float4 accesses are aligned.
__global__ void axpy_inplace(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i % 4 != 0 || i >= n) return;
  if (i + 3 < n) {
    float4 xv = *reinterpret_cast<const float4*>(x + i);
    float4 yv = *reinterpret_cast<float4*>(y + i);
    yv.x = fmaf(a, xv.x, yv.x);
    yv.y = fmaf(a, xv.y, yv.y);
    yv.z = fmaf(a, xv.z, yv.z);
    yv.w = fmaf(a, xv.w, yv.w);
    *reinterpret_cast<float4*>(y + i) = yv;
  } else {
    for (int j = i; j < n; ++j) y[j] = fmaf(a, x[j], y[j]);
  }
}
