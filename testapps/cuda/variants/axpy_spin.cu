// Variant: never ends. Every thread waits for y[0] to become -1, which nothing writes
// (axpy_inplace's y holds non-negative values), reading it through a volatile pointer so
// the loop stays a real memory poll; __nanosleep keeps the SMs cool while it spins. Same
// mangled name as axpy_inplace (_Z12axpy_inplacefPKfPfi): replay loads it as a variant,
// and only a timeout ends it (the server is killed; the next request starts a new one).
__global__ void axpy_inplace(float a, const float* x, float* y, int n) {
  volatile float* poll = y;
  while (poll[0] != -1.0f) __nanosleep(1000);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaf(a, x[i], y[i]);
}
