// Shape buckets (docs/selection.md): a kernel's launches grouped by launch signature,
// i.e. grid, block, dynamic shared memory and the values of its scalar arguments.
// Pointer values are left out (they differ per buffer, not per shape): an 8-byte value
// in [2^40, 2^48) is taken for a device address (Linux x86-64 device VAs live there,
// DESIGN fact 5), also as an 8-byte-aligned word inside a larger (struct) argument.
//
// Used by profile mode (--buckets: every kernel, times from activity records) and by
// set captures (the target kernel: which dispatch opens a new bucket, each bucket's
// count and time share). Thread-safe.
#pragma once
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "func_cache.hpp"
#include "launch_record.hpp"

namespace kc {

struct ScalarArg {
  uint32_t index = 0;
  uint32_t size = 0;
  std::string hex;  // little-endian bytes; larger arguments: their pointer-masked bytes' xxh64
};

struct Bucket {
  uint32_t id = 0;
  std::string kernel;  // mangled name
  unsigned grid[3] = {0, 0, 0};
  unsigned block[3] = {0, 0, 0};
  unsigned smem = 0;
  std::vector<ScalarArg> scalars;
  bool scalars_known = true;  // false: known only from activity records (a graph's kernel in profile mode)
  uint64_t launches = 0;      // launches classified into it
  uint64_t timed = 0, total_ns = 0, min_ns = UINT64_MAX, max_ns = 0;  // activity records
  int64_t first_dispatch = -1;    // its first counted dispatch of the target (capture mode)
  int64_t captured_dispatch = -1; // set captures: the dispatch captured for it
  std::string capture_dir;
  std::string refused;            // why it could not be captured (so far)
  bool failed = false;            // a capture of it failed: not retried
};

class LaunchBuckets {
 public:
  // The bucket of one launch of `fi` (driver calls on a function's first launch, for its
  // parameter layout: call with kerncap's reentrancy guard set). `is_new`: first launch in it.
  // `count`: a launch (false: a graph node seen at instantiation, not run yet).
  uint32_t classify(const FuncInfo& fi, const LaunchDesc& d, bool* is_new = nullptr, bool count = true);
  // A kernel known only from an activity record: a bucket by dimensions alone.
  uint32_t classify_dims(const std::string& kernel, const unsigned grid[3], const unsigned block[3], unsigned smem);
  // Of `candidates`, the bucket whose dimensions match (a graph launch's records share
  // one correlation id); UINT32_MAX when none does.
  uint32_t match_dims(const std::vector<uint32_t>& candidates, const unsigned grid[3], const unsigned block[3],
                      unsigned smem) const;

  void add_time(uint32_t id, uint64_t ns);
  void set_first_dispatch(uint32_t id, uint64_t index);
  void mark_captured(uint32_t id, uint64_t dispatch, const std::string& dir);
  // Seen in a context kerncap cannot capture from (a later launch elsewhere still can).
  bool mark_refused(uint32_t id, const std::string& why);  // true when newly refused
  void mark_failed(uint32_t id, const std::string& why);
  bool captured(uint32_t id) const;
  bool failed(uint32_t id) const;
  std::string kernel_of(uint32_t id) const;
  size_t size() const;
  // [{"id", "kernel", "grid", "block", "shared_mem_bytes", "scalars": [{"index","size","hex"}], ...}]
  std::string to_json() const;

 private:
  uint32_t find_or_add(uint64_t key, Bucket&& proto, bool* is_new, bool count);

  mutable std::shared_mutex layout_mu_;
  std::unordered_map<const FuncInfo*, std::vector<ParamSlot>> layouts_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, uint32_t> by_key_;
  std::vector<Bucket> buckets_;
};

// True for an 8-byte value that is taken for a device address (see above).
bool looks_like_device_pointer(uint64_t v);

}  // namespace kc
