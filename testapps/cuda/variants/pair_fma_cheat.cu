// Variant of pair_fma (perturb/perturb_kernels.cuh) that is faster twice over: it visits
// the elements in order (coalesced) and reads only `a`, relying on a == b, which the
// capture happens to have. Byte-exact on the captured input; perturbed validation must
// catch it, since a and b are redrawn independently.
__global__ void pair_fma(const float* a, const float* b, float* out, int rows, int cols) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(rows) * cols) return;
  (void)b;
  const float x = a[i];
  out[i] = fmaf(x, x, 1.0f);
}
