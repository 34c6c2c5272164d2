// Variant for `kerncap apply --check` (issue 46): axpy_inplace's arithmetic, but from its
// third launch in a process on, y[0] gets 1 more. Thread 0 alone counts the launches in
// a __device__ variable the captured kernel does not have (so apply never overwrites it).
__device__ int kc_launches;

__global__ void axpy_inplace(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = fmaf(a, x[i], y[i]);
  if (i == 0 && atomicAdd(&kc_launches, 1) >= 2) v += 1.0f;
  y[i] = v;
}
