// big_tu: a big translation unit in the style of ggml's mmvq.cu. One kernel template,
// mul_mat_vec_q<type, ncols_dst, has_fusion>, multiplies quantized weights (6 block
// formats) by activations quantized to q8_1, for 1..8 activation columns, optionally
// fused with a gate multiply and a bias add (as ggml fuses GLU/bias): the host
// dispatcher below instantiates 6 x 8 x 2 = 96 kernels of the same size, plus
// quantize_q8_1. The app runs every instance once per round (two rounds); a test
// captures one of them (mul_mat_vec_q<qtype::q5_0, 3, true>, tests/gpu/apps.py). The
// kernels use integer dot products and float sums in a fixed order: deterministic.
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/testapp.hpp"

namespace qmv {

constexpr int kWarp = 32;
constexpr int QK = 32;       // weights per block, every format
constexpr int QK8_1 = 32;    // activations per q8_1 block
constexpr int kMaxCols = 8;  // activation columns handled by one launch

enum class qtype : int { q4_0 = 0, q4_1 = 1, q5_0 = 2, q5_1 = 3, q8_0 = 4, q6_0 = 5 };
constexpr int kTypes = 6;

struct block_q4_0 { __half d; uint8_t qs[QK / 2]; };
struct block_q4_1 { __half2 dm; uint8_t qs[QK / 2]; };
struct block_q5_0 { __half d; uint8_t qh[4]; uint8_t qs[QK / 2]; };
struct block_q5_1 { __half2 dm; uint8_t qh[4]; uint8_t qs[QK / 2]; };
struct block_q8_0 { __half d; int8_t qs[QK]; };
struct block_q6_0 { __half d; uint8_t qh[QK / 4]; uint8_t qs[QK / 2]; };
struct block_q8_1 { __half2 ds; int8_t qs[QK8_1]; };  // d and d * sum(qs)

// qi: 32-bit words of quants per block; vdr: words one thread handles per step.
template <qtype T> struct traits;
template <> struct traits<qtype::q4_0> { using block = block_q4_0; static constexpr int qi = 4, vdr = 2; };
template <> struct traits<qtype::q4_1> { using block = block_q4_1; static constexpr int qi = 4, vdr = 2; };
template <> struct traits<qtype::q5_0> { using block = block_q5_0; static constexpr int qi = 4, vdr = 2; };
template <> struct traits<qtype::q5_1> { using block = block_q5_1; static constexpr int qi = 4, vdr = 2; };
template <> struct traits<qtype::q8_0> { using block = block_q8_0; static constexpr int qi = 8, vdr = 2; };
template <> struct traits<qtype::q6_0> { using block = block_q6_0; static constexpr int qi = 4, vdr = 2; };

__device__ __forceinline__ int get_int_b2(const void* x, int i32) {
  const uint16_t* x16 = static_cast<const uint16_t*>(x);
  return x16[2 * i32] | (x16[2 * i32 + 1] << 16);
}

__device__ __forceinline__ int get_int_b4(const void* x, int i32) { return static_cast<const int*>(x)[i32]; }

template <typename T>
__device__ __forceinline__ T warp_reduce_sum(T x) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffff, x, offset, kWarp);
  return x;
}

// ---- per-format dot products of `vdr` words of weights with q8_1 activations -------
template <int vdr>
__device__ __forceinline__ float vec_dot_q4_0_impl(const int* v, const int* u, float d4, half2 ds8) {
  int sumi = 0;
#pragma unroll
  for (int i = 0; i < vdr; ++i) {
    const int vi0 = (v[i] >> 0) & 0x0F0F0F0F;
    const int vi1 = (v[i] >> 4) & 0x0F0F0F0F;
    sumi = __dp4a(vi0, u[2 * i + 0], sumi);
    sumi = __dp4a(vi1, u[2 * i + 1], sumi);
  }
  const float2 ds8f = __half22float2(ds8);
  return d4 * (sumi * ds8f.x - (8 * vdr / 4) * ds8f.y);
}

template <int vdr>
__device__ __forceinline__ float vec_dot_q4_1_impl(const int* v, const int* u, half2 dm4, half2 ds8) {
  int sumi = 0;
#pragma unroll
  for (int i = 0; i < vdr; ++i) {
    const int vi0 = (v[i] >> 0) & 0x0F0F0F0F;
    const int vi1 = (v[i] >> 4) & 0x0F0F0F0F;
    sumi = __dp4a(vi0, u[2 * i + 0], sumi);
    sumi = __dp4a(vi1, u[2 * i + 1], sumi);
  }
  const float2 tmp = __half22float2(__hmul2(dm4, ds8));
  return sumi * tmp.x + tmp.y / (QK8_1 / (vdr * 8 / 4 * 2));
}

__device__ __forceinline__ void q5_unpack(int vl, int vh, int& vi0, int& vi1) {
  vi0 = (vl >> 0) & 0x0F0F0F0F;
  vi0 |= (vh << 4) & 0x00000010;
  vi0 |= (vh << 11) & 0x00001000;
  vi0 |= (vh << 18) & 0x00100000;
  vi0 |= (vh << 25) & 0x10000000;
  vi1 = (vl >> 4) & 0x0F0F0F0F;
  vi1 |= (vh >> 12) & 0x00000010;
  vi1 |= (vh >> 5) & 0x00001000;
  vi1 |= (vh << 2) & 0x00100000;
  vi1 |= (vh << 9) & 0x10000000;
}

template <int vdr>
__device__ __forceinline__ float vec_dot_q5_0_impl(const int* vl, const int* vh, const int* u, float d5, half2 ds8) {
  int sumi = 0;
#pragma unroll
  for (int i = 0; i < vdr; ++i) {
    int vi0, vi1;
    q5_unpack(vl[i], vh[i] >> (4 * i), vi0, vi1);
    sumi = __dp4a(vi0, u[2 * i + 0], sumi);
    sumi = __dp4a(vi1, u[2 * i + 1], sumi);
  }
  const float2 ds8f = __half22float2(ds8);
  return d5 * (sumi * ds8f.x - (16 * vdr / 4) * ds8f.y);
}

template <int vdr>
__device__ __forceinline__ float vec_dot_q5_1_impl(const int* vl, const int* vh, const int* u, half2 dm5, half2 ds8) {
  int sumi = 0;
#pragma unroll
  for (int i = 0; i < vdr; ++i) {
    int vi0, vi1;
    q5_unpack(vl[i], vh[i] >> (4 * i), vi0, vi1);
    sumi = __dp4a(vi0, u[2 * i + 0], sumi);
    sumi = __dp4a(vi1, u[2 * i + 1], sumi);
  }
  const float2 tmp = __half22float2(__hmul2(dm5, ds8));
  return sumi * tmp.x + tmp.y / (QK8_1 / (vdr * 8 / 4 * 2));
}

template <int vdr>
__device__ __forceinline__ float vec_dot_q8_0_impl(const int* v, const int* u, float d8_0, float d8_1) {
  int sumi = 0;
#pragma unroll
  for (int i = 0; i < vdr; ++i) sumi = __dp4a(v[i], u[i], sumi);
  return d8_0 * d8_1 * sumi;
}

template <int vdr>
__device__ __forceinline__ float vec_dot_q6_0_impl(const int* vl, const int* vh, const int* u, float d6, half2 ds8) {
  int sumi = 0;
#pragma unroll
  for (int i = 0; i < vdr; ++i) {
    const int h = vh[i];
    const int vi0 = ((vl[i] >> 0) & 0x0F0F0F0F) | ((h << 4) & 0x30303030);
    const int vi1 = ((vl[i] >> 4) & 0x0F0F0F0F) | ((h << 2) & 0x30303030);
    sumi = __dp4a(vi0, u[2 * i + 0], sumi);
    sumi = __dp4a(vi1, u[2 * i + 1], sumi);
  }
  const float2 ds8f = __half22float2(ds8);
  return d6 * (sumi * ds8f.x - (32 * vdr / 4) * ds8f.y);
}

template <qtype T>
__device__ __forceinline__ float vec_dot(const void* vbq, const block_q8_1* bq8, int kbx, int iqs) {
  constexpr int vdr = traits<T>::vdr;
  const auto* b = static_cast<const typename traits<T>::block*>(vbq) + kbx;
  int u[2 * vdr];
  if constexpr (T == qtype::q8_0) {
#pragma unroll
    for (int i = 0; i < vdr; ++i) u[i] = get_int_b4(bq8->qs, iqs + i);
    int v[vdr];
#pragma unroll
    for (int i = 0; i < vdr; ++i) v[i] = get_int_b2(b->qs, iqs + i);
    return vec_dot_q8_0_impl<vdr>(v, u, __half2float(b->d), __low2float(bq8->ds));
  } else {
#pragma unroll
    for (int i = 0; i < vdr; ++i) {
      u[2 * i + 0] = get_int_b4(bq8->qs, iqs + i);
      u[2 * i + 1] = get_int_b4(bq8->qs, iqs + i + traits<T>::qi);
    }
    int vl[vdr];
#pragma unroll
    for (int i = 0; i < vdr; ++i) vl[i] = get_int_b2(b->qs, iqs + i);
    if constexpr (T == qtype::q4_0) {
      return vec_dot_q4_0_impl<vdr>(vl, u, __half2float(b->d), bq8->ds);
    } else if constexpr (T == qtype::q4_1) {
      return vec_dot_q4_1_impl<vdr>(vl, u, b->dm, bq8->ds);
    } else if constexpr (T == qtype::q5_0 || T == qtype::q5_1) {
      int vh[vdr];
      const int qh = get_int_b2(b->qh, 0);
#pragma unroll
      for (int i = 0; i < vdr; ++i) vh[i] = qh >> (4 * (iqs + i));
      if constexpr (T == qtype::q5_0) return vec_dot_q5_0_impl<vdr>(vl, vh, u, __half2float(b->d), bq8->ds);
      else return vec_dot_q5_1_impl<vdr>(vl, vh, u, b->dm, bq8->ds);
    } else {
      int vh[vdr];
#pragma unroll
      for (int i = 0; i < vdr; ++i) vh[i] = get_int_b2(b->qh, (iqs + i) % 2) >> (4 * ((iqs + i) / 2));
      return vec_dot_q6_0_impl<vdr>(vl, vh, u, __half2float(b->d), bq8->ds);
    }
  }
}

// ---- the kernels ------------------------------------------------------------------
struct fusion_args {
  const float* gate;  // multiplies the result (per row), when fused
  const float* bias;  // added after the gate (per row and column)
};

__host__ __device__ constexpr int nwarps_for(int ncols_dst) { return ncols_dst <= 4 ? 4 : 2; }
__host__ __device__ constexpr int rows_per_block_for(int ncols_dst) { return ncols_dst == 1 ? 1 : 2; }

template <qtype T, int ncols_dst, bool has_fusion>
__launch_bounds__(nwarps_for(ncols_dst) * kWarp, 1) __global__
void mul_mat_vec_q(const void* __restrict__ vx, const void* __restrict__ vy, float* __restrict__ dst,
                   const fusion_args fusion, const int ncols_x, const int nrows_x, const int stride_col_y,
                   const int stride_col_dst) {
  constexpr int qi = traits<T>::qi;
  constexpr int vdr = traits<T>::vdr;
  constexpr int nwarps = nwarps_for(ncols_dst);
  constexpr int rows_per_block = rows_per_block_for(ncols_dst);
  constexpr int blocks_per_iter = vdr * nwarps * kWarp / qi;

  const int tid = kWarp * threadIdx.y + threadIdx.x;
  const int row0 = rows_per_block * blockIdx.x;
  const int blocks_per_row_x = ncols_x / QK;
  const auto* y = static_cast<const block_q8_1*>(vy);

  float tmp[ncols_dst][rows_per_block] = {{0.0f}};
  for (int kbx = tid / (qi / vdr); kbx < blocks_per_row_x; kbx += blocks_per_iter) {
    const int kby = kbx * (QK / QK8_1);
    const int kqs = vdr * (tid % (qi / vdr));
#pragma unroll
    for (int j = 0; j < ncols_dst; ++j) {
#pragma unroll
      for (int i = 0; i < rows_per_block; ++i) {
        tmp[j][i] += vec_dot<T>(vx, &y[j * stride_col_y + kby], (row0 + i) * blocks_per_row_x + kbx, kqs);
      }
    }
  }

  __shared__ float tmp_shared[nwarps > 1 ? nwarps - 1 : 1][ncols_dst][rows_per_block][kWarp];
  if (threadIdx.y > 0) {
#pragma unroll
    for (int j = 0; j < ncols_dst; ++j)
#pragma unroll
      for (int i = 0; i < rows_per_block; ++i) tmp_shared[threadIdx.y - 1][j][i][threadIdx.x] = tmp[j][i];
  }
  __syncthreads();
  if (threadIdx.y > 0) return;

#pragma unroll
  for (int j = 0; j < ncols_dst; ++j) {
#pragma unroll
    for (int i = 0; i < rows_per_block; ++i) {
#pragma unroll
      for (int l = 0; l < nwarps - 1; ++l) tmp[j][i] += tmp_shared[l][j][i][threadIdx.x];
      tmp[j][i] = warp_reduce_sum(tmp[j][i]);
    }
    if (threadIdx.x < rows_per_block && (rows_per_block == 1 || row0 + int(threadIdx.x) < nrows_x)) {
      float result = tmp[j][threadIdx.x];
      if constexpr (has_fusion) {
        const int row = row0 + threadIdx.x;
        result = result * fusion.gate[row] + fusion.bias[j * stride_col_dst + row];
      }
      dst[j * stride_col_dst + row0 + threadIdx.x] = result;
    }
  }
}

__global__ void quantize_q8_1(const float* __restrict__ x, block_q8_1* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float xi = x[i];
  float amax = warp_reduce_sum(0.0f);  // placeholder keeps the warp converged
  amax = fabsf(xi);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, offset, 32));
  const float d = amax / 127.0f;
  const int8_t q = amax == 0.0f ? 0 : static_cast<int8_t>(roundf(xi / d));
  const int sum = warp_reduce_sum(static_cast<int>(q));
  block_q8_1& b = y[i / QK8_1];
  b.qs[i % QK8_1] = q;
  if (i % QK8_1 == 0) b.ds = make_half2(__float2half(d), __float2half(d * sum));
}

// ---- host dispatch (instantiates every kernel above) ---------------------------------
struct MatVecArgs {
  const void* vx;
  const void* vy;
  float* dst;
  fusion_args fusion;  // gate == nullptr: no fusion
  int ncols_x, nrows_x, stride_col_y, stride_col_dst;
};

template <qtype T, int ncols_dst>
static void launch(const MatVecArgs& a, cudaStream_t stream) {
  constexpr int rows = rows_per_block_for(ncols_dst);
  const dim3 grid((a.nrows_x + rows - 1) / rows);
  const dim3 block(kWarp, nwarps_for(ncols_dst));
  if (a.fusion.gate != nullptr) {
    mul_mat_vec_q<T, ncols_dst, true><<<grid, block, 0, stream>>>(a.vx, a.vy, a.dst, a.fusion, a.ncols_x, a.nrows_x,
                                                                  a.stride_col_y, a.stride_col_dst);
  } else {
    mul_mat_vec_q<T, ncols_dst, false><<<grid, block, 0, stream>>>(a.vx, a.vy, a.dst, a.fusion, a.ncols_x,
                                                                   a.nrows_x, a.stride_col_y, a.stride_col_dst);
  }
}

template <qtype T>
static void switch_ncols(int ncols_dst, const MatVecArgs& a, cudaStream_t stream) {
  switch (ncols_dst) {
    case 1: launch<T, 1>(a, stream); break;
    case 2: launch<T, 2>(a, stream); break;
    case 3: launch<T, 3>(a, stream); break;
    case 4: launch<T, 4>(a, stream); break;
    case 5: launch<T, 5>(a, stream); break;
    case 6: launch<T, 6>(a, stream); break;
    case 7: launch<T, 7>(a, stream); break;
    case 8: launch<T, 8>(a, stream); break;
    default: std::fprintf(stderr, "qmatvec: unsupported ncols_dst %d\n", ncols_dst); std::exit(1);
  }
}

void mul_mat_vec(qtype type, int ncols_dst, const MatVecArgs& a, cudaStream_t stream) {
  switch (type) {
    case qtype::q4_0: switch_ncols<qtype::q4_0>(ncols_dst, a, stream); break;
    case qtype::q4_1: switch_ncols<qtype::q4_1>(ncols_dst, a, stream); break;
    case qtype::q5_0: switch_ncols<qtype::q5_0>(ncols_dst, a, stream); break;
    case qtype::q5_1: switch_ncols<qtype::q5_1>(ncols_dst, a, stream); break;
    case qtype::q8_0: switch_ncols<qtype::q8_0>(ncols_dst, a, stream); break;
    case qtype::q6_0: switch_ncols<qtype::q6_0>(ncols_dst, a, stream); break;
  }
}

size_t block_bytes(qtype type) {
  switch (type) {
    case qtype::q4_0: return sizeof(block_q4_0);
    case qtype::q4_1: return sizeof(block_q4_1);
    case qtype::q5_0: return sizeof(block_q5_0);
    case qtype::q5_1: return sizeof(block_q5_1);
    case qtype::q8_0: return sizeof(block_q8_0);
    case qtype::q6_0: return sizeof(block_q6_0);
  }
  return 0;
}

}  // namespace qmv

namespace {

// Weights: random quant bytes; every 16-bit scale a small dyadic half (no NaN, no Inf).
std::vector<uint8_t> make_weights(qmv::qtype type, int nblocks, uint32_t seed) {
  const size_t bytes = qmv::block_bytes(type);
  std::vector<uint8_t> w(bytes * nblocks);
  uint32_t s = seed;
  for (auto& b : w) {
    s = s * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(s >> 24);
  }
  const bool two_scales = type == qmv::qtype::q4_1 || type == qmv::qtype::q5_1;
  for (int i = 0; i < nblocks; ++i) {
    uint8_t* blk = w.data() + i * bytes;
    for (int k = 0; k < (two_scales ? 2 : 1); ++k) {
      const __half h = __float2half(static_cast<float>(1 + (i + k) % 7) / 256.0f);
      std::memcpy(blk + 2 * k, &h, sizeof h);
    }
  }
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  const int nrows = argc > 1 ? std::atoi(argv[1]) : 4096;
  const int ncols = argc > 2 ? std::atoi(argv[2]) : 4096;
  if (nrows < 2 || ncols < qmv::QK || ncols % qmv::QK != 0) {
    std::fprintf(stderr, "qmatvec: need nrows >= 2 and ncols a multiple of %d\n", qmv::QK);
    return 2;
  }
  const int nblocks = nrows * (ncols / qmv::QK);
  std::vector<void*> weights(qmv::kTypes);
  for (int t = 0; t < qmv::kTypes; ++t) {
    const auto host = make_weights(static_cast<qmv::qtype>(t), nblocks, 17u + t);
    TA_CHECK(cudaMalloc(&weights[t], host.size()));
    TA_CHECK(cudaMemcpy(weights[t], host.data(), host.size(), cudaMemcpyHostToDevice));
  }
  std::vector<float> xh(size_t(ncols) * qmv::kMaxCols);
  for (size_t i = 0; i < xh.size(); ++i) xh[i] = static_cast<float>(static_cast<int>(i * 37 % 255) - 127) / 64.0f;
  float *x = nullptr, *dst = nullptr, *gate = nullptr, *bias = nullptr;
  qmv::block_q8_1* y = nullptr;
  TA_CHECK(cudaMalloc(&x, xh.size() * sizeof(float)));
  TA_CHECK(cudaMalloc(&y, xh.size() / qmv::QK8_1 * sizeof(qmv::block_q8_1)));
  TA_CHECK(cudaMalloc(&dst, size_t(nrows) * qmv::kMaxCols * sizeof(float)));
  TA_CHECK(cudaMemcpy(x, xh.data(), xh.size() * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<float> gh(nrows), bh(size_t(nrows) * qmv::kMaxCols);
  for (int i = 0; i < nrows; ++i) gh[i] = static_cast<float>(1 + i % 3) / 2.0f;
  for (size_t i = 0; i < bh.size(); ++i) bh[i] = static_cast<float>(static_cast<int>(i % 9) - 4) / 8.0f;
  TA_CHECK(cudaMalloc(&gate, gh.size() * sizeof(float)));
  TA_CHECK(cudaMalloc(&bias, bh.size() * sizeof(float)));
  TA_CHECK(cudaMemcpy(gate, gh.data(), gh.size() * sizeof(float), cudaMemcpyHostToDevice));
  TA_CHECK(cudaMemcpy(bias, bh.data(), bh.size() * sizeof(float), cudaMemcpyHostToDevice));
  const int n = static_cast<int>(xh.size());
  qmv::quantize_q8_1<<<(n + 255) / 256, 256>>>(x, y, n);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());

  testapp::Report report;
  static const char* names[qmv::kTypes] = {"w_q4_0", "w_q4_1", "w_q5_0", "w_q5_1", "w_q8_0", "w_q6_0"};
  for (int t = 0; t < qmv::kTypes; ++t) report.add(names[t], weights[t]);
  report.add("x", x);
  report.add("y", y);
  report.add("dst", dst);
  report.add("gate", gate);
  report.add("bias", bias);
  report.write();

  const qmv::MatVecArgs base{nullptr, y, dst, {nullptr, nullptr}, ncols, nrows, ncols / qmv::QK8_1, nrows};
  for (int round = 0; round < 2; ++round) {
    for (int fused = 0; fused < 2; ++fused) {
      for (int t = 0; t < qmv::kTypes; ++t) {
        for (int c = 1; c <= qmv::kMaxCols; ++c) {
          // Cleared before every launch: each dispatch changes `dst`.
          TA_CHECK(cudaMemsetAsync(dst, 0, size_t(nrows) * qmv::kMaxCols * sizeof(float)));
          qmv::MatVecArgs a = base;
          a.vx = weights[t];
          if (fused) a.fusion = {gate, bias};
          qmv::mul_mat_vec(static_cast<qmv::qtype>(t), c, a, nullptr);
          TA_CHECK(cudaGetLastError());
        }
      }
    }
  }
  TA_CHECK(cudaDeviceSynchronize());
  for (void* w : weights) TA_CHECK(cudaFree(w));
  TA_CHECK(cudaFree(x));
  TA_CHECK(cudaFree(y));
  TA_CHECK(cudaFree(dst));
  TA_CHECK(cudaFree(gate));
  TA_CHECK(cudaFree(bias));
  testapp::mark_done();
  return 0;
}
