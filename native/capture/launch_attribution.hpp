// Attributing kernel activity records to what was true at their launch.
//
// An activity record (profile mode, and set captures for the buckets' time shares)
// arrives long after its launch, on CUPTI's buffer thread, and says only which launch
// it came from (correlationId). So each launch's API entry tags its correlation id
// (the launching thread's NVTX path, whether it is inside the --nvtx selection, its
// shape bucket) and the record looks the tag up. A graph launch's kernels all carry
// the graph launch's id: its tag stays until exit and lists the buckets of its nodes.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "launch_buckets.hpp"
#include "nvtx_ranges.hpp"

namespace kc {

struct LaunchTag {
  uint32_t path = 0;                // NvtxRanges path id (0: no range, or NVTX not followed)
  bool in_range = true;             // inside the --nvtx selection (true without one)
  bool graph = false;               // a cuGraphLaunch: several records share the id
  uint32_t bucket = UINT32_MAX;     // an eager launch's bucket (when buckets are kept)
  std::vector<uint32_t> candidates; // a graph launch's target nodes' buckets (set captures)
};

struct RecordView {
  const char* name;  // mangled
  unsigned grid[3];
  unsigned block[3];
  unsigned smem;     // dynamic shared memory
  uint64_t ns;
};

class LaunchAttribution {
 public:
  // `nvtx`: follow paths (null: none); `buckets`: keep bucket times (null: none);
  // `by_nvtx`: aggregate per (path, kernel); `dims_buckets`: records without a bucket
  // tag get a bucket by dimensions (profile mode: a graph's kernels).
  LaunchAttribution(NvtxRanges* nvtx, LaunchBuckets* buckets, bool by_nvtx, bool dims_buckets)
      : nvtx_(nvtx), buckets_(buckets), by_nvtx_(by_nvtx), dims_buckets_(dims_buckets) {}

  void tag(uint32_t correlation, LaunchTag tag);
  // One kernel record. False: it falls outside the NVTX selection and counts nowhere.
  bool on_record(uint32_t correlation, const RecordView& r);
  // [{"path", "kernel", "calls", "total_ns", "min_ns", "max_ns"}] (by_nvtx)
  std::string nvtx_json() const;
  uint64_t untagged() const;  // records whose launch was never tagged

 private:
  static constexpr size_t kShards = 16;
  struct Shard {
    std::mutex mu;
    std::unordered_map<uint32_t, LaunchTag> tags;
  };
  struct Stat {
    uint64_t calls = 0, total_ns = 0, min_ns = UINT64_MAX, max_ns = 0;
  };

  NvtxRanges* nvtx_;
  LaunchBuckets* buckets_;
  bool by_nvtx_, dims_buckets_;
  Shard shards_[kShards];
  mutable std::mutex stats_mu_;
  std::map<std::pair<uint32_t, std::string>, Stat> by_path_;
  uint64_t untagged_ = 0;
};

}  // namespace kc
