// Timing probe for `kerncap replay --compare` (not a correct variant): axpy_inplace that
// skips the first 1/16 of the elements, so it moves ~6% fewer bytes than the original
// and should time ~6% faster (the head, not the tail: after replay restores y, its tail
// is the part most likely still in L2). The comparison must call that significant.
__global__ void axpy_inplace(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n / 16 && i < n) y[i] = fmaf(a, x[i], y[i]);
}
