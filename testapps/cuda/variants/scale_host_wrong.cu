// A variant of host_register_scale's scale_host (testapps/cuda/hostmem/scale_kernel.cuh)
// that adds 0.5 instead of 0.25: its only output is host memory, which validate compares.
__global__ void scale_host(float* p, float a, float b, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * a + (b + 0.25f);
}
