// GPU side of perturbed validation (docs/replay.md, "Perturbed inputs"): fill a span of
// captured memory with reproducible pseudo-random values of its dtype, and an empty
// kernel that measures the launch/timing floor. Compiled by nvcc at build time into a
// fatbin the replay core embeds (like compare_kernels.cu): no cudart, no host code.
//
// The values must be *exactly* those of the numpy reference in
// engine/kerncap/replay/perturb.py (`reference_fill`), so every step is spelled out:
// integer hashing (splitmix64), uniforms from the top 53 bits, an Irwin-Hall sum of four
// uniforms as an approximately normal draw, and double arithmetic with explicit
// round-to-nearest intrinsics so nvcc cannot contract a*b+c into an FMA (numpy does not).
// 16-bit floats go through float32, as the reference does.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

struct FillParams {
  double mean, stddev, lo, hi, p_zero;
  unsigned long long seed;
};

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) for element i, draw j (0..4) of a span seeded with `seed`.
__device__ __forceinline__ double uniform(unsigned long long seed, unsigned long long i, unsigned j) {
  const unsigned long long h = mix64(seed ^ mix64(i * 8ull + j));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

__device__ __forceinline__ double draw(const FillParams& p, unsigned long long i) {
  const double u0 = uniform(p.seed, i, 0), u1 = uniform(p.seed, i, 1);
  const double u2 = uniform(p.seed, i, 2), u3 = uniform(p.seed, i, 3);
  // Irwin-Hall(4) has mean 2 and variance 1/3: scaled to unit variance.
  const double s = __dadd_rn(__dadd_rn(u0, u1), __dadd_rn(u2, u3));
  const double z = __dmul_rn(__dadd_rn(s, -2.0), 1.7320508075688772);
  double v = __dadd_rn(p.mean, __dmul_rn(p.stddev, z));
  v = fmin(fmax(v, p.lo), p.hi);
  if (uniform(p.seed, i, 4) < p.p_zero) v = 0.0;
  return v;
}

template <class T>
__device__ __forceinline__ T convert(double v);
template <>
__device__ __forceinline__ double convert<double>(double v) { return v; }
template <>
__device__ __forceinline__ float convert<float>(double v) { return __double2float_rn(v); }
template <>
__device__ __forceinline__ __half convert<__half>(double v) { return __float2half_rn(__double2float_rn(v)); }
template <>
__device__ __forceinline__ __nv_bfloat16 convert<__nv_bfloat16>(double v) {
  return __float2bfloat16_rn(__double2float_rn(v));
}
// Integers: round half to even (rint, like numpy.rint) inside [lo, hi], which the host
// keeps within the type's range.
template <>
__device__ __forceinline__ int convert<int>(double v) { return static_cast<int>(rint(v)); }
template <>
__device__ __forceinline__ signed char convert<signed char>(double v) { return static_cast<signed char>(rint(v)); }
template <>
__device__ __forceinline__ unsigned char convert<unsigned char>(double v) {
  return static_cast<unsigned char>(rint(v));
}

template <class T>
__device__ void fill(T* out, unsigned long long n, const FillParams& p) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = convert<T>(draw(p, i));
}

#define KC_FILL_KERNEL(suffix, T)                                                               \
  extern "C" __global__ void kc_fill_##suffix(T* out, unsigned long long n, FillParams params) { \
    fill<T>(out, n, params);                                                                    \
  }

KC_FILL_KERNEL(f64, double)
KC_FILL_KERNEL(f32, float)
KC_FILL_KERNEL(f16, __half)
KC_FILL_KERNEL(bf16, __nv_bfloat16)
KC_FILL_KERNEL(i32, int)
KC_FILL_KERNEL(i8, signed char)
KC_FILL_KERNEL(u8, unsigned char)

// The floor of event timing: what a launch that does nothing measures.
extern "C" __global__ void kc_empty() {}

// The warm-L2 timing (Session::time): one byte of every 32-byte sector of [p, p + n) read,
// so the sectors sit in L2 as an app that just produced them leaves them. The sum is
// stored only when it equals a value n/32 bytes cannot add up to, so the loads stay and
// nothing is written.
extern "C" __global__ void kc_touch(const unsigned char* p, unsigned long long n, unsigned long long* sink) {
  const unsigned long long stride = 32ull * gridDim.x * blockDim.x;
  unsigned long long sum = 0;
  for (unsigned long long i = 32ull * (blockIdx.x * blockDim.x + threadIdx.x); i < n; i += stride) sum += p[i];
  if (sum == ~0ull) *sink = sum;
}
