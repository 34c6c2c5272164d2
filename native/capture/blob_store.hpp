// Content-addressed chunk payloads of a capture (docs/capture-format.md, "Chunks"):
// an all-zero chunk is not stored (null); any other chunk is written once as
// blobs/<xxh64>.bin, via a temp file and rename so no blob is ever visible
// half-written. Thread-safe: the snapshot workers call put() concurrently.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>

#include "fsutil.hpp"

namespace kc {

// True when all `n` bytes are zero (word-wise; the compiler vectorizes the loop).
bool all_zero(const unsigned char* p, size_t n);

class BlobStore {
 public:
  BlobStore(std::string blobs_dir, WriteBudget* budget) : dir_(std::move(blobs_dir)), budget_(budget) {}
  // Returns false for an all-zero chunk; otherwise stores it (once) and sets *hash.
  // Throws IoError naming the blob file when it cannot be written.
  bool put(const unsigned char* data, size_t n, uint64_t* hash);
  uint64_t stored_bytes() const { return stored_.load(); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  WriteBudget* budget_;
  std::mutex mu_;
  std::unordered_set<uint64_t> known_;
  std::atomic<uint64_t> stored_{0};
};

}  // namespace kc
