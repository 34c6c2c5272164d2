// Variant: scales by (a + 1) instead of a. Validation must fail on y's region.
__global__ void axpy_inplace(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaf(a + 1.0f, x[i], y[i]);
}
