// The sampled profile (profile mode's default, docs/interposer.md "Sampled profile"):
// the launch sampler (launch_sampler.hpp), the executable graphs the app launches (a
// graph's launches are timed as a whole: one row per graph), and profile-<pid>.json.
#pragma once
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "func_cache.hpp"
#include "launch_sampler.hpp"

namespace kc {

// An executable graph as the sampled profile ranks it.
struct ProfGraph {
  uint64_t id = 0;
  std::string name;                 // "CUDA graph #3: 12 kernel nodes (a, b, c, ...)"
  std::atomic<uint64_t> launches{0};  // launches of threads without a slot entry for it
  std::atomic<bool> launched{false};  // uploaded (by kerncap or a launch): a launch may be held
};

class SampledProfile {
 public:
  LaunchSampler sampler;

  // The graph record of `exec` (created on first sight, never freed).
  ProfGraph* graph(CUgraphExec exec);
  // Changes at every instantiation (an exec handle may now be another graph): per-thread
  // caches of graph() are valid while it holds.
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // At a successful instantiation: names the graph after its kernel nodes. Call with
  // kerncap's reentrancy guard set (driver calls).
  void instantiated(CUgraphExec exec, CUgraph g, FuncCache& funcs);

  // profile-<pid>.json: every kernel and graph with its exact count and its timed
  // launches' estimate. `per_thread`: ThreadSlots::kernel_counts().
  std::string to_json(int pid, const FuncCache& funcs, const std::unordered_map<const void*, uint64_t>& per_thread);

 private:
  std::mutex mu_;
  std::atomic<uint64_t> epoch_{1};
  std::unordered_map<CUgraphExec, ProfGraph*> execs_;
  std::vector<ProfGraph*> graphs_;
};

}  // namespace kc
