// Per-handle facts about launched kernels (name, CUfunction vs CUkernel, does it
// match the target pattern), resolved once per handle so a launch costs one hash
// lookup under a shared lock and no allocation.
#pragma once
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kc {

class KernelMatcher;

// NCCL's own kernels (they need their peers): ncclKernel_* / ncclDevKernel_*.
bool is_nccl_kernel(const std::string& demangled);

struct FuncInfo {
  std::string name;       // mangled, as the cubin's symbol table holds it
  std::string demangled;
  bool is_kernel = false; // the handle is a CUkernel passed as CUfunction (cudart 13, PyTorch eager)
  bool resolved = false;  // false: neither cuFuncGetName nor cuKernelGetName knew the handle
  bool matched = false;
  // Matched the pattern but can never be a target: NCCL's own kernels (ncclKernel*,
  // ncclDevKernel*) wait for their peer ranks, so one of them cannot run alone.
  bool refused = false;
  bool xla_helper = false;  // one of XLA's autotuner helper kernels (xla_autotune.hpp)
  std::atomic<uint64_t> launches{0};
  // A launch of it returned successfully: its module is loaded (the sampled profile never
  // holds a stream for a kernel's first launch, docs/interposer.md).
  std::atomic<bool> loaded{false};
};

class FuncCache {
 public:
  // `epoch` is kept by the owner, beside what every launch reads (inject.cpp State): it
  // starts at 1 (per-thread caches start at 0: invalid) and only clear() changes it.
  explicit FuncCache(std::atomic<uint64_t>& epoch) : epoch_(epoch) {}
  // Call with kerncap's reentrancy guard set: resolving makes driver calls.
  FuncInfo* get(CUfunction f, const KernelMatcher* matcher);
  // Forget every handle (a module was unloaded and handles may be reused). Entries
  // are retired, not freed: another thread may still hold a pointer.
  void clear();
  // Changes whenever clear() runs: per-thread caches of get() are valid while it holds.
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // Per-thread launch counts by FuncInfo (ThreadSlots::kernel_counts), added to each
  // entry's own `launches`.
  using ExtraCounts = std::unordered_map<const void*, uint64_t>;
  // Launch counts merged by demangled name, highest first, at most `limit`.
  std::vector<std::pair<std::string, uint64_t>> launch_counts(size_t limit, const ExtraCounts* extra = nullptr) const;
  // Every entry, live or retired (valid for the process's life).
  std::vector<const FuncInfo*> all() const;
  // Demangled names of launched kernels that matched but were refused (FuncInfo::refused).
  std::vector<std::string> refused_names(const ExtraCounts* extra = nullptr) const;

 private:
  std::atomic<uint64_t>& epoch_;
  mutable std::shared_mutex mu_;
  std::unordered_map<CUfunction, FuncInfo*> live_;
  std::vector<std::unique_ptr<FuncInfo>> all_;  // owns live and retired entries
};

}  // namespace kc
