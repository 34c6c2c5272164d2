// Content-addressed chunk payloads of a capture (docs/capture-format.md, "Chunks"):
// an all-zero chunk is not stored (null); any other chunk is written once as
// blobs/<xxh64>.bin, via a temp file and rename so no blob is ever visible
// half-written. Thread-safe: the snapshot workers call put() concurrently.
// With a pool directory (set captures: several captures of one process), a blob is
// written once into the pool and hard-linked into each capture's blobs/, so memory
// that several captures share costs one write.
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
  BlobStore(std::string blobs_dir, WriteBudget* budget, std::string pool_dir = std::string())
      : dir_(std::move(blobs_dir)), pool_(std::move(pool_dir)), budget_(budget) {}
  // Returns false for an all-zero chunk; otherwise stores it (once) and sets *hash.
  // Throws IoError naming the blob file when it cannot be written.
  bool put(const unsigned char* data, size_t n, uint64_t* hash);
  // Makes an already stored blob (this store's, or the pool's) part of this store
  // without its bytes: a chunk whose fingerprint shows it unchanged. False when the
  // blob is in neither place (the caller copies the chunk instead).
  bool adopt(uint64_t hash);
  uint64_t stored_bytes() const { return stored_.load(); }
  const std::string& dir() const { return dir_; }

 private:
  void write(const std::string& path, const unsigned char* data, size_t n, uint64_t h);

  std::string dir_;
  std::string pool_;
  WriteBudget* budget_;
  std::mutex mu_;
  std::unordered_set<uint64_t> known_;
  std::atomic<uint64_t> stored_{0};
};

}  // namespace kc
