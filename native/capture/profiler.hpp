// profile mode: CUPTI activity records of kind CONCURRENT_KERNEL, aggregated per
// kernel name as buffers complete (never a list: >1M dispatches stay cheap), written
// to $KERNCAP_OUT/profile-<pid>.json at exit.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kc {

class LaunchAttribution;

struct KernelStats {
  std::string name;
  uint64_t calls = 0;
  uint64_t total_ns = 0;
  uint64_t min_ns = UINT64_MAX;
  uint64_t max_ns = 0;
  int32_t grid[3] = {0, 0, 0};
  int32_t block[3] = {0, 0, 0};
};

namespace profiler {

// Registers the buffer callbacks and enables CONCURRENT_KERNEL records.
// Returns an empty string on success, else what failed. `attribution` (may be null,
// must outlive the process's records) sees every kernel record first and may drop it
// from the per-kernel statistics (outside the --nvtx selection).
std::string start(LaunchAttribution* attribution = nullptr);
// Flushes every pending record and stops collecting (idempotent).
void flush_and_stop();
// Flushes pending records (e.g. before a context is destroyed).
void flush();
// Aggregated statistics, merged by name.
std::vector<KernelStats> stats();
uint64_t dropped_records();
// The profile-<pid>.json document; `extra` adds (key, raw JSON) fields.
std::string to_json(int pid, const std::vector<std::pair<std::string, std::string>>& extra = {});

}  // namespace profiler
}  // namespace kc
