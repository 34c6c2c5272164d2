// Timing probe for `kerncap replay --compare` (not a correct variant): axpy_inplace that
// skips the last 1/16 of the elements, so it moves ~6% fewer bytes than the original and
// should time ~6% faster. The comparison must call that difference significant.
__global__ void axpy_inplace(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n - n / 16) y[i] = fmaf(a, x[i], y[i]);
}
