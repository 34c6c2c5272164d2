// Which chunks changed since kerncap last copied them, without copying them again.
//
// A snapshot moves every chunk of every region over PCIe and hashes it on the host.
// Most chunks of a post-state, and of the next member of a set, hold what they held at
// the previous snapshot. kerncap computes a 128-bit fingerprint of every chunk on the
// GPU (chunk_fingerprint.cu: one pass at device bandwidth) and copies only the chunks
// whose fingerprint differs from the one recorded with their stored hash; the others
// keep that hash (and blob). KERNCAP_FINGERPRINT=0 turns this off (every chunk copied).
#pragma once
#include <cuda.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kc {

struct Fingerprint {
  uint64_t a = 0, b = 0;
  bool operator==(const Fingerprint& o) const { return a == o.a && b == o.b; }
};

// The fingerprint of `bytes` zero bytes (zero_fingerprint.cpp, host-side).
Fingerprint zero_fingerprint(uint64_t bytes);

// One chunk: device address and length (the address 8-byte aligned).
using DeviceChunk = std::pair<uint64_t, uint64_t>;

class ChunkFingerprinter {
 public:
  // Fingerprints of `chunks` in the current context, on `stream` (synchronized before
  // returning). False when fingerprints are unavailable (no PTX in this build, turned
  // off, the module does not load): then reason() says why and the caller copies.
  // Throws CudaError when a fingerprint launch itself fails.
  bool run(const std::vector<DeviceChunk>& chunks, CUstream stream, std::vector<Fingerprint>& out);
  // Whether run() can fingerprint in the current context (loads the module once per
  // context); when false, reason() says why. Asked first so that a snapshot without
  // fingerprints spends nothing on checking which regions are readable.
  bool available();
  const std::string& reason() const { return reason_; }

 private:
  CUfunction function_for_current_context();

  std::unordered_map<CUcontext, CUfunction> functions_;
  std::string reason_;
};

// What a chunk held when it was last snapshotted: its fingerprint and its stored hash
// (the blob name; `stored` false for an all-zero chunk). Keyed by address and length:
// a chunk counts as unchanged only when its fingerprint matches, whatever happened to
// the allocation in between.
struct RememberedChunk {
  Fingerprint fp;
  bool stored = false;
  uint64_t hash = 0;
};

class ChunkMemory {
 public:
  const RememberedChunk* find(const DeviceChunk& c) const;
  void remember(const DeviceChunk& c, const RememberedChunk& r) { map_[c] = r; }

 private:
  struct KeyHash {
    size_t operator()(const DeviceChunk& c) const { return std::hash<uint64_t>()(c.first * 31 + c.second); }
  };
  std::unordered_map<DeviceChunk, RememberedChunk, KeyHash> map_;
};

// Process-wide: every capture of the process (a set's members) shares them. Used only
// by the capturing thread, under the capture lock.
ChunkFingerprinter& chunk_fingerprinter();
ChunkMemory& chunk_memory();
// True while this thread loads kerncap's own fingerprint module (its load callback is
// not the app's: inject.cpp ignores it).
bool loading_own_module();

}  // namespace kc
