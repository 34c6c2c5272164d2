// Chunk fingerprints on the GPU (chunk_fingerprint.hpp): two 64-bit sums per chunk of
// position-keyed, fully mixed 8-byte words. A sum does not depend on the order the
// threads add in, so the result is deterministic; a changed word changes each sum by a
// pseudo-random 64-bit amount, so a change goes unseen only if both 64-bit sums of the
// differences cancel exactly. Compiled to PTX by the build and JIT-compiled by the
// driver inside the captured app, so one build serves every architecture.
#include <stdint.h>

struct KcChunk {
  uint64_t addr;   // 8-byte aligned
  uint64_t bytes;  // any length; the tail is read byte by byte
};

__device__ __forceinline__ uint64_t kc_fmix(uint64_t k) {  // MurmurHash3's 64-bit finalizer
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

__device__ __forceinline__ void kc_mix_word(uint64_t w, uint64_t i, uint64_t& a, uint64_t& b) {
  a += kc_fmix(w ^ (i * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL));
  b += kc_fmix(((w << 29) | (w >> 35)) ^ (i * 0xd6e8feb86659fd93ULL + 0xa0761d6478bd642fULL));
}

// grid: (blocks per chunk, chunks); out[2c], out[2c+1] must be zero before the launch.
extern "C" __global__ void __launch_bounds__(256) kerncap_chunk_fingerprint(const KcChunk* chunks, uint64_t* out) {
  const KcChunk c = chunks[blockIdx.y];
  const uint64_t* w = reinterpret_cast<const uint64_t*>(c.addr);
  const uint64_t words = c.bytes >> 3;
  uint64_t a = 0, b = 0;
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += stride)
    kc_mix_word(__ldg(w + i), i, a, b);
  if (blockIdx.x == 0 && threadIdx.x == 0 && (c.bytes & 7)) {
    const unsigned char* tail = reinterpret_cast<const unsigned char*>(w + words);
    uint64_t t = 0;
    for (unsigned k = 0; k < (c.bytes & 7); ++k) t |= uint64_t(tail[k]) << (8 * k);
    kc_mix_word(t ^ (uint64_t(c.bytes & 7) << 56), words, a, b);
  }
  for (int off = 16; off > 0; off >>= 1) {
    a += __shfl_down_sync(0xffffffffu, a, off);
    b += __shfl_down_sync(0xffffffffu, b, off);
  }
  __shared__ uint64_t sa[8], sb[8];
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sa[warp] = a;
    sb[warp] = b;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (unsigned k = 1; k < (blockDim.x >> 5); ++k) {
      a += sa[k];
      b += sb[k];
    }
    atomicAdd(reinterpret_cast<unsigned long long*>(out + 2 * blockIdx.y), (unsigned long long)a);
    atomicAdd(reinterpret_cast<unsigned long long*>(out + 2 * blockIdx.y + 1), (unsigned long long)b);
  }
}
