// The mismatch map of one replayed item against its expected state (docs/replay.md,
// "Where a variant differs"): one pass over the item computes the counts, the error,
// ULP and value histograms, the per-cell counts and worst element of the 2-D view's
// grid, the row and column profiles, and a histogram of mismatch positions; a second,
// small pass over the first few non-empty position bins finds the first mismatches.
// engine/kerncap/replay/mismatch.py holds the numpy reference; every definition here
// (bins, keys, predicate) must match it exactly (the GPU suite compares the two).
//
// Compiled by nvcc into a fatbin embedded in the replay core; no cudart.
#include <cuda_fp16.h>

#define ERR_BINS 129
#define ULP_BINS 65
#define VALUE_BINS 260
#define LOG_MIN (-64)
#define LOG_MAX 63
#define KEY_NAN 0xFFFFFFFFull
#define KEY_INF 0xFFFFFFFEull
#define FULL 0xffffffffu

struct MapParams {
  const unsigned char* actual;
  const unsigned char* expected;
  const unsigned char* pre;
  unsigned long long n;  // whole elements
  unsigned long long view_start, view_rows, view_cols, row_stride;
  unsigned long long grid_rows, grid_cols, prof_rows, prof_cols, idx_bins;
  double atol, rtol;
  int tolerance;  // 0: a mismatch is a differing bit pattern
};

// Mirrors MapBuffers in mismatch.cpp: device pointers of the accumulators.
struct MapBuffers {
  unsigned long long* totals;  // see enum Total
  unsigned long long* err_hist;
  unsigned long long* ulp_hist;
  unsigned long long* value_hist;  // [3][VALUE_BINS]: pre, expected, actual
  unsigned long long* cell_count;
  unsigned long long* cell_worst;
  unsigned long long* row_prof;
  unsigned long long* col_prof;
  unsigned int* idx_hist;
};

enum Total {
  T_MISMATCHED, T_BYTES, T_NAN, T_INF, T_OUTSIDE, T_STALE, T_MAX_ABS, T_MAX_REL, T_RATIO_MIN, T_RATIO_MAX, T_COUNT
};

// Element kinds: how bits become a double and an IEEE-ordered distance.
enum Kind { K_F64, K_F32, K_F16, K_BF16, K_I32, K_I8, K_U8 };

template <int K> struct Traits;
template <> struct Traits<K_F64> { typedef unsigned long long Bits; enum { width = 64, is_float = 1 }; };
template <> struct Traits<K_F32> { typedef unsigned int Bits; enum { width = 32, is_float = 1 }; };
template <> struct Traits<K_F16> { typedef unsigned short Bits; enum { width = 16, is_float = 1 }; };
template <> struct Traits<K_BF16> { typedef unsigned short Bits; enum { width = 16, is_float = 1 }; };
template <> struct Traits<K_I32> { typedef unsigned int Bits; enum { width = 32, is_float = 0 }; };
template <> struct Traits<K_I8> { typedef unsigned char Bits; enum { width = 8, is_float = 0 }; };
template <> struct Traits<K_U8> { typedef unsigned char Bits; enum { width = 8, is_float = 0 }; };

template <int K>
__device__ __forceinline__ double to_double(unsigned long long b) {
  if (K == K_F64) return __longlong_as_double(static_cast<long long>(b));
  if (K == K_F32) return static_cast<double>(__uint_as_float(static_cast<unsigned>(b)));
  if (K == K_F16) return static_cast<double>(__half2float(__ushort_as_half(static_cast<unsigned short>(b))));
  if (K == K_BF16) return static_cast<double>(__uint_as_float(static_cast<unsigned>(b) << 16));
  if (K == K_I32) return static_cast<double>(static_cast<int>(static_cast<unsigned>(b)));
  if (K == K_I8) return static_cast<double>(static_cast<signed char>(static_cast<unsigned char>(b)));
  return static_cast<double>(b);  // K_U8 (also raw bytes)
}

// IEEE order as an unsigned number (integers: value + 2^(w-1); uint8: the value).
template <int K>
__device__ __forceinline__ unsigned long long ordered(unsigned long long b) {
  if (K == K_U8) return b;
  const unsigned long long half = 1ull << (Traits<K>::width - 1);
  if (!Traits<K>::is_float) return b ^ half;
  const unsigned long long mag = b & (half - 1);
  return (b & half) ? half - mag : half + mag;
}

__device__ __forceinline__ int log2_bin(double v) {  // floor(log2 |v|), clamped; v finite, != 0
  int e = ilogb(v);
  return e < LOG_MIN ? LOG_MIN : (e > LOG_MAX ? LOG_MAX : e);
}

__device__ __forceinline__ int value_bin(double v) {
  if (isnan(v)) return 0;
  if (isinf(v)) return v > 0 ? 1 : 2;
  if (v == 0.0) return 3;
  const int k = log2_bin(v) - LOG_MIN;
  return v > 0 ? 4 + k : 4 + 128 + k;
}

// A double as an unsigned key whose order is the doubles' order (atomicMin/Max).
__device__ __forceinline__ unsigned long long order_key(double d) {
  const unsigned long long b = static_cast<unsigned long long>(__double_as_longlong(d));
  return (b >> 63) ? ~b : (b | (1ull << 63));
}

__device__ __forceinline__ unsigned lane() { return threadIdx.x & 31; }

// Adds one for each lane with `on`, grouped by key: one atomic per distinct key of the warp.
// All 32 lanes must call it.
template <class C>
__device__ __forceinline__ void add_by_key(C* base, unsigned long long key, bool on) {
  unsigned mask = __ballot_sync(FULL, on);
  while (mask) {
    const int leader = __ffs(mask) - 1;
    const unsigned long long k = __shfl_sync(FULL, key, leader);
    const unsigned same = __ballot_sync(FULL, on && key == k);
    if (static_cast<int>(lane()) == leader) atomicAdd(&base[k], static_cast<C>(__popc(same)));
    mask &= ~same;
  }
}

// atomicMax of `value` per key, reduced over the warp first. All 32 lanes must call it.
__device__ __forceinline__ void max_by_key(unsigned long long* base, unsigned long long key, unsigned long long value,
                                           bool on) {
  unsigned mask = __ballot_sync(FULL, on);
  while (mask) {
    const int leader = __ffs(mask) - 1;
    const unsigned long long k = __shfl_sync(FULL, key, leader);
    const unsigned same = __ballot_sync(FULL, on && key == k);
    unsigned long long v = (same >> lane()) & 1u ? value : 0ull;
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(FULL, v, o));
    if (static_cast<int>(lane()) == leader) atomicMax(&base[k], v);
    mask &= ~same;
  }
}

__device__ __forceinline__ unsigned long long warp_sum(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
  return v;
}
__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(FULL, v, o));
  return v;
}
__device__ __forceinline__ unsigned long long warp_min(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(FULL, v, o));
  return v;
}

template <int K>
__device__ __forceinline__ unsigned long long load(const unsigned char* p, unsigned long long i) {
  return static_cast<unsigned long long>(reinterpret_cast<const typename Traits<K>::Bits*>(p)[i]);
}

// The GPU compare's predicate (compare_kernels.cu): NaN equals NaN, an infinity only itself.
template <int K>
__device__ __forceinline__ bool mismatch(unsigned long long ab, unsigned long long eb, double a, double e,
                                         const MapParams& p) {
  if (!p.tolerance || !Traits<K>::is_float) return p.tolerance ? a != e : ab != eb;
  if (isnan(a) || isnan(e)) return !(isnan(a) && isnan(e));
  if (a == e) return false;
  if (isinf(a) || isinf(e)) return true;
  return !(fabs(a - e) <= p.atol + p.rtol * fabs(e));
}

// One thread's share of the totals (enum Total), reduced per warp at the end of pass 1.
struct ThreadTotals {
  unsigned long long mismatched = 0, bytes = 0, nan_err = 0, inf_err = 0, outside = 0, stale = 0;
  unsigned long long max_abs = 0, max_rel = 0, ratio_min = ~0ull, ratio_max = 0;
};

// One mismatched element into t and the block's error and ULP histograms; returns its key
// for the cell's worst element: KEY_NAN, KEY_INF, or |a - e| as a float's bits.
template <int K>
__device__ __forceinline__ unsigned long long tally_mismatch(ThreadTotals& t, unsigned int* s_err,
                                                            unsigned int* s_ulp, unsigned long long ab,
                                                            unsigned long long eb, unsigned long long pb,
                                                            double a, double e) {
  const bool is_nan = isnan(a) || isnan(e);
  const bool is_inf = !is_nan && (isinf(a) || isinf(e));
  const double d = fabs(a - e);
  ++t.mismatched;
  t.stale += ab == pb;
  if (is_nan) {
    ++t.nan_err;
    return KEY_NAN;
  }
  if (is_inf) {
    ++t.inf_err;
    return KEY_INF;
  }
  const unsigned long long key = __float_as_uint(__double2float_rn(d));
  const double rel = fabs(e) > 0.0 ? d / fabs(e) : (d > 0.0 ? __longlong_as_double(0x7ff0000000000000ll) : 0.0);
  t.max_abs = max(t.max_abs, static_cast<unsigned long long>(__double_as_longlong(d)));
  t.max_rel = max(t.max_rel, static_cast<unsigned long long>(__double_as_longlong(rel)));
  if (e != 0.0) {
    const unsigned long long rk = order_key(a / e);
    t.ratio_min = min(t.ratio_min, rk);
    t.ratio_max = max(t.ratio_max, rk);
  }
  atomicAdd(&s_err[d == 0.0 ? 0 : 1 + log2_bin(d) - LOG_MIN], 1u);
  const unsigned long long oa = ordered<K>(ab), oe = ordered<K>(eb);
  const unsigned long long u = oa > oe ? oa - oe : oe - oa;
  atomicAdd(&s_ulp[u ? 64 - __clzll(static_cast<long long>(u)) : 0], 1u);
  return key;
}

// Where in the view element i lies: row and column, grid cell, profile bins; then the
// position histogram. Counts a mismatch (`bad`) outside the view. All 32 lanes must call it.
__device__ __forceinline__ void add_position(const MapParams& p, const MapBuffers& o, unsigned long long i, bool bad,
                                             unsigned long long key, unsigned long long& outside) {
  const unsigned long long k = i - p.view_start;  // wraps for i < start: then outside
  const unsigned long long r = i >= p.view_start ? k / p.row_stride : p.view_rows;
  const unsigned long long c = i >= p.view_start ? k % p.row_stride : 0;
  const bool inside = bad && r < p.view_rows && c < p.view_cols;
  outside += bad && !inside;
  const unsigned long long gy = inside ? r * p.grid_rows / p.view_rows : 0;
  const unsigned long long gx = inside ? c * p.grid_cols / p.view_cols : 0;
  const unsigned long long cell = gy * p.grid_cols + gx;
  add_by_key(o.cell_count, cell, inside);
  max_by_key(o.cell_worst, cell, (key << 32) | (i & 0xffffffffull), inside);
  add_by_key(o.row_prof, inside ? r * p.prof_rows / p.view_rows : 0, inside);
  add_by_key(o.col_prof, inside ? c * p.prof_cols / p.view_cols : 0, inside);
  add_by_key(o.idx_hist, bad ? i * p.idx_bins / p.n : 0, bad);
}

// Per-thread totals: one atomic per warp. All 32 lanes must call it.
__device__ __forceinline__ void add_totals(ThreadTotals t, const MapBuffers& o) {
  t.mismatched = warp_sum(t.mismatched);
  t.bytes = warp_sum(t.bytes);
  t.nan_err = warp_sum(t.nan_err);
  t.inf_err = warp_sum(t.inf_err);
  t.outside = warp_sum(t.outside);
  t.stale = warp_sum(t.stale);
  t.max_abs = warp_max(t.max_abs);
  t.max_rel = warp_max(t.max_rel);
  t.ratio_min = warp_min(t.ratio_min);
  t.ratio_max = warp_max(t.ratio_max);
  if (lane() == 0) {
    if (t.bytes) atomicAdd(&o.totals[T_BYTES], t.bytes);
    if (t.mismatched) {
      atomicAdd(&o.totals[T_MISMATCHED], t.mismatched);
      atomicAdd(&o.totals[T_NAN], t.nan_err);
      atomicAdd(&o.totals[T_INF], t.inf_err);
      atomicAdd(&o.totals[T_OUTSIDE], t.outside);
      atomicAdd(&o.totals[T_STALE], t.stale);
      atomicMax(&o.totals[T_MAX_ABS], t.max_abs);
      atomicMax(&o.totals[T_MAX_REL], t.max_rel);
      atomicMin(&o.totals[T_RATIO_MIN], t.ratio_min);
      atomicMax(&o.totals[T_RATIO_MAX], t.ratio_max);
    }
  }
}

// Pass 1. Warps walk the item 32 consecutive elements at a time, all lanes together (the
// by-key helpers need converged warps); block-shared histograms are flushed at the end.
template <int K>
__device__ void map_pass(const MapParams& p, const MapBuffers& o) {
  __shared__ unsigned int s_value[3 * VALUE_BINS];
  __shared__ unsigned int s_err[ERR_BINS];
  __shared__ unsigned int s_ulp[ULP_BINS];
  for (unsigned t = threadIdx.x; t < 3 * VALUE_BINS; t += blockDim.x) s_value[t] = 0;
  for (unsigned t = threadIdx.x; t < ERR_BINS; t += blockDim.x) s_err[t] = 0;
  for (unsigned t = threadIdx.x; t < ULP_BINS; t += blockDim.x) s_ulp[t] = 0;
  __syncthreads();

  const unsigned long long warps = static_cast<unsigned long long>(gridDim.x) * (blockDim.x / 32);
  const unsigned long long warp = static_cast<unsigned long long>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  ThreadTotals totals;
  const unsigned nbytes = Traits<K>::width / 8;
  for (unsigned long long base = warp * 32; base < p.n; base += warps * 32) {
    const unsigned long long i = base + lane();
    const bool valid = i < p.n;
    unsigned long long ab = 0, eb = 0, pb = 0;
    if (valid) {
      ab = load<K>(p.actual, i);
      eb = load<K>(p.expected, i);
      pb = load<K>(p.pre, i);
    }
    const double a = to_double<K>(ab), e = to_double<K>(eb), v = to_double<K>(pb);
    if (valid) {
      atomicAdd(&s_value[value_bin(v)], 1u);
      atomicAdd(&s_value[VALUE_BINS + value_bin(e)], 1u);
      atomicAdd(&s_value[2 * VALUE_BINS + value_bin(a)], 1u);
      const unsigned long long x = ab ^ eb;
      for (unsigned k = 0; k < nbytes; ++k) totals.bytes += ((x >> (8 * k)) & 0xffu) != 0;
    }
    const bool bad = valid && mismatch<K>(ab, eb, a, e, p);
    if (!__any_sync(FULL, bad)) continue;
    unsigned long long key = 0;
    if (bad) key = tally_mismatch<K>(totals, s_err, s_ulp, ab, eb, pb, a, e);
    add_position(p, o, i, bad, key, totals.outside);
  }
  add_totals(totals, o);
  __syncthreads();
  for (unsigned t = threadIdx.x; t < 3 * VALUE_BINS; t += blockDim.x)
    if (s_value[t]) atomicAdd(&o.value_hist[t], static_cast<unsigned long long>(s_value[t]));
  for (unsigned t = threadIdx.x; t < ERR_BINS; t += blockDim.x)
    if (s_err[t]) atomicAdd(&o.err_hist[t], static_cast<unsigned long long>(s_err[t]));
  for (unsigned t = threadIdx.x; t < ULP_BINS; t += blockDim.x)
    if (s_ulp[t]) atomicAdd(&o.ulp_hist[t], static_cast<unsigned long long>(s_ulp[t]));
}

// Pass 2: the mismatches inside the given element ranges (the first non-empty position
// bins), unordered, into `found` (at most `capacity`; `count` says how many there were).
template <int K>
__device__ void first_pass(const MapParams& p, const unsigned long long* ranges, unsigned nranges,
                           unsigned long long* found, unsigned long long capacity, unsigned long long* count) {
  for (unsigned rg = blockIdx.y; rg < nranges; rg += gridDim.y) {
    const unsigned long long lo = ranges[2 * rg], hi = ranges[2 * rg + 1];
    for (unsigned long long i = lo + static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < hi;
         i += static_cast<unsigned long long>(gridDim.x) * blockDim.x) {
      const unsigned long long ab = load<K>(p.actual, i), eb = load<K>(p.expected, i);
      if (mismatch<K>(ab, eb, to_double<K>(ab), to_double<K>(eb), p)) {
        const unsigned long long slot = atomicAdd(count, 1ull);
        if (slot < capacity) found[slot] = i;
      }
    }
  }
}

#define KC_MM_KERNELS(suffix, kind)                                                                          \
  extern "C" __global__ void kc_mm_map_##suffix(MapParams p, MapBuffers o) { map_pass<kind>(p, o); }         \
  extern "C" __global__ void kc_mm_first_##suffix(MapParams p, const unsigned long long* ranges,             \
                                                  unsigned nranges, unsigned long long* found,               \
                                                  unsigned long long capacity, unsigned long long* count) {   \
    first_pass<kind>(p, ranges, nranges, found, capacity, count);                                             \
  }

KC_MM_KERNELS(f64, K_F64)
KC_MM_KERNELS(f32, K_F32)
KC_MM_KERNELS(f16, K_F16)
KC_MM_KERNELS(bf16, K_BF16)
KC_MM_KERNELS(i32, K_I32)
KC_MM_KERNELS(i8, K_I8)
KC_MM_KERNELS(u8, K_U8)

// Copies `size` bytes at each element index (src + index * size) into out, in order.
extern "C" __global__ void kc_mm_gather(const unsigned char* src, const unsigned long long* indices,
                                        unsigned long long n, unsigned size, unsigned char* out) {
  for (unsigned long long t = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; t < n * size;
       t += static_cast<unsigned long long>(gridDim.x) * blockDim.x) {
    const unsigned long long j = t / size, b = t % size;
    out[t] = src[indices[j] * size + b];
  }
}
