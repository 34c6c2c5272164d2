// Kernels for the CPU unit tests of the cubin reader and the cubin selection.
// Compiled to a cubin twice: as is, and with -DVARIANT (same kernel name, other code)
// to stand for the several same-named cubins an autotuner produces.
__constant__ float scale;
__constant__ float table[16];
__device__ int counter;
__device__ float ginit[4] = {1, 2, 3, 4};
static __device__ int hidden;

extern "C" __global__ void scale_kern(float* a, const float* b, int n) {
  __shared__ float tile[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = b[i % n];
  __syncthreads();
#ifdef VARIANT
  float acc = 0.f;
  for (int k = 0; k < 16; ++k) acc += table[(i + k) & 15] * tile[(threadIdx.x + k) & 255];
  if (i < n) a[i] = acc * scale + ginit[i & 3];
#else
  if (i < n) a[i] = tile[threadIdx.x] * scale + table[i & 15] + ginit[i & 3];
#endif
  if (i == 0) {
    atomicAdd(&counter, 1);
    hidden++;
  }
}

template <typename T>
__global__ void tmpl(T* x, T v) { x[threadIdx.x] += v; }
template __global__ void tmpl<float>(float*, float);
template __global__ void tmpl<double>(double*, double);

__global__ void spill(float* out, int n) {
  float loc[64];
  for (int j = 0; j < 64; j++) loc[j] = out[(j * n) % 97];
  out[threadIdx.x] = loc[threadIdx.x % n];
}
