// Variant: correct result, plus a write 16 GiB past y, which no replay maps:
// the launch must end in an illegal-address error that replay reports.
__global__ void axpy_inplace(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    y[i] = fmaf(a, x[i], y[i]);
    if (i == 0) y[(1ull << 34) / sizeof(float)] = 1.0f;
  }
}
