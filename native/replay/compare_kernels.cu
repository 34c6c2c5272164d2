// GPU-side comparison of a replayed buffer ("actual") with the captured state
// ("expected"). Compiled by nvcc at build time into a fatbin that the replay core
// embeds and loads with cuModuleLoadData: no cudart, no host code here.
//
// Every kernel accumulates into one CmpResult: the number of mismatches, the lowest
// mismatching index (the host then copies a small window from there for the report)
// and, for floating-point tolerance checks, the largest absolute and relative error
// (non-negative doubles compare like their bit patterns, so atomicMax on the bits).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

struct CmpResult {
  unsigned long long mismatches;
  unsigned long long first;  // ~0ull when none
  unsigned long long max_abs_bits;
  unsigned long long max_rel_bits;
};

__device__ __forceinline__ unsigned long long warp_sum(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ unsigned long long warp_min(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}

// All lanes of every warp reach this (loops are grid-stride with no early exit).
__device__ void publish(CmpResult* out, unsigned long long count, unsigned long long first,
                        unsigned long long abs_bits, unsigned long long rel_bits) {
  count = warp_sum(count);
  first = warp_min(first);
  abs_bits = warp_max(abs_bits);
  rel_bits = warp_max(rel_bits);
  if ((threadIdx.x & 31) == 0 && count) {
    atomicAdd(&out->mismatches, count);
    atomicMin(&out->first, first);
    atomicMax(&out->max_abs_bits, abs_bits);
    atomicMax(&out->max_rel_bits, rel_bits);
  }
}

// Byte-exact: counts differing bytes. vec16 != 0 when both pointers are 16-byte aligned.
extern "C" __global__ void kc_cmp_bytes(const unsigned char* actual, const unsigned char* expected,
                                        unsigned long long n, int vec16, CmpResult* out) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned long long count = 0, first = ~0ull;
  const unsigned long long nvec = vec16 ? n / 16 : 0;
  const uint4* a4 = reinterpret_cast<const uint4*>(actual);
  const uint4* e4 = reinterpret_cast<const uint4*>(expected);
  for (unsigned long long i = tid; i < nvec; i += stride) {
    const uint4 a = a4[i], e = e4[i];
    const unsigned int words_a[4] = {a.x, a.y, a.z, a.w};
    const unsigned int words_e[4] = {e.x, e.y, e.z, e.w};
    for (int w = 0; w < 4; ++w) {
      const unsigned int ne = __vcmpne4(words_a[w], words_e[w]);  // 0xff per differing byte
      if (ne) {
        count += __popc(ne) / 8;
        first = min(first, i * 16 + w * 4 + (__ffs(ne) - 1) / 8);
      }
    }
  }
  for (unsigned long long i = nvec * 16 + tid; i < n; i += stride) {
    if (actual[i] != expected[i]) {
      ++count;
      first = min(first, i);
    }
  }
  publish(out, count, first, 0, 0);
}

__device__ __forceinline__ double infinity() { return __longlong_as_double(0x7ff0000000000000ll); }

template <class T>
__device__ __forceinline__ double to_double(T v) { return static_cast<double>(v); }
template <>
__device__ __forceinline__ double to_double<__half>(__half v) { return static_cast<double>(__half2float(v)); }
template <>
__device__ __forceinline__ double to_double<__nv_bfloat16>(__nv_bfloat16 v) {
  return static_cast<double>(__bfloat162float(v));
}

// Element-wise with tolerance: a mismatch is |a - e| > atol + rtol * |e| (NaN equals
// NaN, an infinity equals only itself). Integer types compare exactly. The tail bytes that
// do not fill a whole element compare exactly, each differing byte counting as one
// mismatch at index n_elems.
template <class T, bool kFloat>
__device__ void compare_elements(const T* actual, const T* expected, unsigned long long n_elems,
                                 unsigned long long n_bytes, double atol, double rtol, CmpResult* out) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned long long count = 0, first = ~0ull;
  double max_abs = 0.0, max_rel = 0.0;
  for (unsigned long long i = tid; i < n_elems; i += stride) {
    const double a = to_double(actual[i]), e = to_double(expected[i]);
    bool bad;
    if (!kFloat) {
      bad = a != e;
    } else if (isnan(a) || isnan(e)) {
      bad = !(isnan(a) && isnan(e));
    } else if (a == e) {
      bad = false;
    } else {
      const double d = fabs(a - e);
      const double rel = fabs(e) > 0.0 ? d / fabs(e) : infinity();
      max_abs = fmax(max_abs, d);
      max_rel = fmax(max_rel, rel);
      // Unequal infinities are never within tolerance (rtol * inf would admit them).
      bad = isinf(a) || isinf(e) || !(d <= atol + rtol * fabs(e));
    }
    if (!kFloat && a != e) {
      max_abs = fmax(max_abs, fabs(a - e));
      max_rel = fmax(max_rel, e != 0.0 ? fabs(a - e) / fabs(e) : infinity());
    }
    if (bad) {
      ++count;
      first = min(first, i);
    }
  }
  const unsigned char* ab = reinterpret_cast<const unsigned char*>(actual);
  const unsigned char* eb = reinterpret_cast<const unsigned char*>(expected);
  for (unsigned long long i = n_elems * sizeof(T) + tid; i < n_bytes; i += stride) {
    if (ab[i] != eb[i]) {
      ++count;
      first = min(first, n_elems);
    }
  }
  publish(out, count, first, __double_as_longlong(max_abs), __double_as_longlong(max_rel));
}

#define KC_CMP_KERNEL(suffix, T, is_float)                                                               \
  extern "C" __global__ void kc_cmp_##suffix(const T* actual, const T* expected, unsigned long long n_elems, \
                                             unsigned long long n_bytes, double atol, double rtol,         \
                                             CmpResult* out) {                                            \
    compare_elements<T, is_float>(actual, expected, n_elems, n_bytes, atol, rtol, out);                    \
  }

KC_CMP_KERNEL(f64, double, true)
KC_CMP_KERNEL(f32, float, true)
KC_CMP_KERNEL(f16, __half, true)
KC_CMP_KERNEL(bf16, __nv_bfloat16, true)
KC_CMP_KERNEL(i32, int, false)
KC_CMP_KERNEL(i8, signed char, false)
KC_CMP_KERNEL(u8, unsigned char, false)
