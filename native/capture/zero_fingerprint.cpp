// The fingerprint (chunk_fingerprint.cu) an all-zero chunk of a given length has,
// computed on the host: a chunk whose GPU fingerprint equals it is all zero with the
// same certainty as a fingerprint-matched chunk is unchanged, so it is neither copied
// nor stored (a 100 GiB arena that is mostly zeros costs one GPU pass, not 100 GiB of
// PCIe). Prefix sums over the word index make every length O(1) after the first call.
#include <mutex>
#include <vector>

#include "chunk_fingerprint.hpp"

namespace kc {

namespace {

uint64_t fmix(uint64_t k) {  // kc_fmix of chunk_fingerprint.cu
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

// kc_mix_word(w, i) added to (a, b).
void mix(uint64_t w, uint64_t i, uint64_t& a, uint64_t& b) {
  a += fmix(w ^ (i * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL));
  b += fmix(((w << 29) | (w >> 35)) ^ (i * 0xd6e8feb86659fd93ULL + 0xa0761d6478bd642fULL));
}

}  // namespace

Fingerprint zero_fingerprint(uint64_t bytes) {
  static std::mutex mu;
  static std::vector<Fingerprint> prefix{Fingerprint{}};  // prefix[n]: sums over words [0, n)
  const uint64_t words = bytes >> 3;
  Fingerprint fp;
  {
    std::lock_guard<std::mutex> lock(mu);
    while (prefix.size() <= words) {
      const uint64_t i = prefix.size() - 1;
      Fingerprint next = prefix.back();
      mix(0, i, next.a, next.b);
      prefix.push_back(next);
    }
    fp = prefix[words];
  }
  if (bytes & 7) mix(uint64_t(bytes & 7) << 56, words, fp.a, fp.b);  // the tail word of zero bytes
  return fp;
}

}  // namespace kc
