// The kernel timer: what CUPTI's activity records say each timed launch's kernels ran on
// the GPU, from the first one's start to the last one's end. It is the clock `kerncap
// profile` and `kerncap apply` time an application with, so a replay speedup on it compares
// with the in-app one; CUDA events around a launch add what the stream does between them
// (~2 µs a launch on an H100, docs/facts.md §49), which a short kernel's speedup reads lower by.
//
// libcupti is opened on first use (the build's copy, then the loader's search), never linked:
// the replay module loads without it. One timer records at a time in a process (CUPTI's
// activity callbacks are process-wide); a process that already has a CUPTI client
// (an app under `kerncap profile`) is refused.
#pragma once
#include <cstdint>
#include <vector>

namespace kc::replay {

class KernelTimer {
 public:
  // Opens libcupti and enables kernel and external-correlation records; throws
  // Error("input") naming what is missing.
  KernelTimer();
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;
  // Every driver call between begin(k) and end() is tagged k (the launches of timed launch k).
  void begin(uint64_t k);
  void end();
  // After the stream is synchronized: per k in [0, n), the span of its kernels' records (ms).
  // Throws Error("input") when a launch has no record (a dropped buffer).
  std::vector<double> spans_ms(uint64_t n);

 private:
  static void stop() noexcept;  // records off, what they left forgotten
};

}  // namespace kc::replay
