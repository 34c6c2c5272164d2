// The snapshot engine: copies device ranges to the blob store through a ring of
// pinned host buffers on a private non-blocking stream, while worker threads check
// for zeros, hash and write the chunks that have arrived (DESIGN fact 9: staging
// through a reused pinned ring and overlapping copies with writes decides speed).
//
// All driver calls are made by the calling (capturing) thread, which must have the
// target's context current and kerncap's reentrancy guard set; the workers only
// touch host memory and files.
#pragma once
#include <cuda.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "blob_store.hpp"
#include "json_writer.hpp"
#include "xxh64.hpp"

namespace kc {

class ChunkMemory;

struct SnapshotItem {
  uint64_t base = 0;
  uint64_t size = 0;
  std::string label;  // names the item in errors: "region 3 (cuMemAlloc_v2 0x7f.. + 4096)"
  bool host = false;  // host memory (pinned, registered): read by the CPU at `base`
};

struct ChunkHash {
  bool stored = false;  // false: all-zero chunk (null in the manifest)
  uint64_t hash = 0;
  bool operator==(const ChunkHash& o) const { return stored == o.stored && (!stored || hash == o.hash); }
};

// A manifest chunk list: each chunk's blob name, null for an all-zero chunk.
inline void write_hashes(JsonWriter& w, const std::vector<ChunkHash>& chunks) {
  w.begin_array();
  for (const ChunkHash& c : chunks) {
    if (c.stored) w.value(xxh64_hex(c.hash));
    else w.null();
  }
  w.end_array();
}

struct ItemSnapshot {
  std::vector<ChunkHash> chunks;
  uint64_t zero_bytes = 0;
};

class Snapshotter {
 public:
  static constexpr size_t kChunkSize = 4u << 20;   // chunk_size of the format
  static constexpr size_t kSlotSize = 64u << 20;   // one pinned ring buffer
  static constexpr size_t kSlots = 4;

  explicit Snapshotter(BlobStore& store);
  ~Snapshotter();
  Snapshotter(const Snapshotter&) = delete;
  Snapshotter& operator=(const Snapshotter&) = delete;

  // Copies and stores every item; returns one ItemSnapshot per item. Throws
  // CudaError (naming the item) or IoError (naming the file); on return every copy
  // has completed and every blob is on disk.
  // Chunks whose GPU fingerprint matches the one remembered with their stored hash
  // (chunk_fingerprint.hpp) keep that hash without being copied.
  std::vector<ItemSnapshot> run(const std::vector<SnapshotItem>& items);
  uint64_t logical_bytes() const { return logical_; }         // copied over PCIe, all runs
  uint64_t unchanged_bytes() const { return unchanged_; }     // kept by fingerprint, all runs
  uint64_t zero_bytes() const { return zero_; }               // all zero by fingerprint, not copied
  const std::string& fingerprint_note() const { return fingerprint_note_; }  // why none were used

 private:
  struct Task {
    const unsigned char* host;
    size_t len;
    ChunkHash* out;
    size_t slot;
  };
  struct Slot {
    unsigned char* host = nullptr;
    CUevent done = nullptr;
    size_t fill = 0;
    std::vector<Task> tasks;
    size_t pending = 0;  // tasks handed to workers and not finished
    bool busy = false;   // filling, copying or being processed
  };

  void init_resources();
  void ensure_ring(uint64_t bytes);  // pinned slots for `bytes` of copies (kept across runs)
  void free_ring();
  void worker_main();
  void dispatch(size_t slot);            // hand a copied slot's chunks to the workers
  size_t acquire_slot(std::deque<size_t>& in_flight);
  void rethrow_worker_error();
  // run()'s steps.
  struct Fingerprints;
  void fingerprint(const std::vector<SnapshotItem>& items, const std::vector<ItemSnapshot>& out,
                   std::vector<std::vector<char>>& keep, Fingerprints& fp);
  void keep_known(const Fingerprints& fp, const ChunkMemory& memory, std::vector<ItemSnapshot>& out,
                  std::vector<std::vector<char>>& keep);
  void copy_chunks(const std::vector<SnapshotItem>& items, std::vector<ItemSnapshot>& out,
                   const std::vector<std::vector<char>>& keep, std::deque<size_t>& in_flight);
  void finish_copies(std::deque<size_t>& in_flight);
  void idle_ring();  // after a failure: nothing in flight, no slot busy, no error kept

  BlobStore& store_;
  CUstream stream_ = nullptr;
  std::vector<Slot> slots_;
  size_t slot_size_ = 0;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_, free_cv_;
  std::deque<Task> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  uint64_t logical_ = 0;
  uint64_t unchanged_ = 0;
  uint64_t zero_ = 0;
  std::string fingerprint_note_;
};

}  // namespace kc
